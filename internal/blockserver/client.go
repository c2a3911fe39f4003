package blockserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
)

// ErrNotFound means the block server serves no such volume.
var ErrNotFound = errors.New("volume not served")

// Client drives the block server of a data directory.
type Client struct {
	hc *http.Client
}

// NewClient talks to the block server of dataDir (it need not run yet).
func NewClient(dataDir string) *Client {
	sock := filepath.Join(dataDir, sockFile)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &Client{hc: &http.Client{Transport: tr}}
}

// Serve serves volume id (see VolumeRequest).
func (c *Client) Serve(ctx context.Context, id string, req VolumeRequest) (VolumeInfo, error) {
	var in VolumeInfo
	return in, c.do(ctx, http.MethodPut, "/v1/volumes/"+id, req, &in)
}

// Volume reports a served volume, or an error wrapping ErrNotFound.
func (c *Client) Volume(ctx context.Context, id string) (VolumeInfo, error) {
	var in VolumeInfo
	return in, c.do(ctx, http.MethodGet, "/v1/volumes/"+id, nil, &in)
}

// Volumes lists the served volumes.
func (c *Client) Volumes(ctx context.Context) ([]VolumeInfo, error) {
	var out []VolumeInfo
	return out, c.do(ctx, http.MethodGet, "/v1/volumes", nil, &out)
}

// Flush makes every write to the volume so far durable.
func (c *Client) Flush(ctx context.Context, id string) (VolumeInfo, error) {
	var in VolumeInfo
	return in, c.do(ctx, http.MethodPost, "/v1/volumes/"+id+"/flush", nil, &in)
}

// GrowFS grows the ext4 filesystem on the volume to the volume's size,
// whatever its front end (QEMU's disk is a socket, which resize2fs cannot
// open). Nothing may use the disk meanwhile: call it before the sandbox
// starts.
func (c *Client) GrowFS(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/volumes/"+id+"/grow-fs", nil, nil)
}

// Snapshot writes a snapshot of the volume as layer req.ID, in object
// storage when it returns.
func (c *Client) Snapshot(ctx context.Context, id string, req SnapshotRequest) (SnapshotInfo, error) {
	var in SnapshotInfo
	return in, c.do(ctx, http.MethodPost, "/v1/volumes/"+id+"/snapshots", req, &in)
}

// Forget stops serving the volume and deletes it, on the node and in the
// tiers. Forgetting a volume that is not served deletes what is left of
// it.
func (c *Client) Forget(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/volumes/"+id, nil, nil)
}

// Release stops serving the volume and removes its state on this node,
// leaving its layers in the tiers: another node recovers it from them.
func (c *Client) Release(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/volumes/"+id+"?keep=tiers", nil, nil)
}

// Ping reports whether the block server answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/v1/volumes", nil, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://block-server"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("block server: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e errorBody
		json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&e)
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("block server: %w: %s", ErrNotFound, e.Error)
		}
		return fmt.Errorf("block server: %s (%s)", e.Error, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
