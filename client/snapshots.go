package client

import (
	"context"
	"net/http"

	"warren/api"
)

// snapshotPath is the escaped path of snapshot id (its ID or its name)
// and elems under it.
func snapshotPath(id string, elems ...string) string {
	return idPath("snapshots", id, elems...)
}

// Snapshot saves the sandbox's disk and returns the snapshot: pending, or
// with req.Wait durable (or failed), named req.Name if set (a name another
// of the caller's snapshots has is an *api.Error with code conflict).
// Never retried: a repeat would take a second snapshot.
func (c *Client) Snapshot(ctx context.Context, sandboxID string, req api.CreateSnapshotRequest) (*api.Snapshot, error) {
	var sn api.Snapshot
	cl := once(ctx, &call{op: "snapshot", method: http.MethodPost, path: sandboxPath(sandboxID, "snapshots"), in: req})
	if err := c.do(ctx, cl, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// GetSnapshot returns the snapshot id, an ID or the name of one of the
// caller's snapshots (as every snapshot method here takes); an unknown one
// is an *api.Error with code not_found.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var sn api.Snapshot
	cl := &call{op: "get snapshot", method: http.MethodGet, path: snapshotPath(id), retry: retryIdempotent}
	if err := c.do(ctx, cl, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot deletes the snapshot id; retried, and a 404 after a lost
// answer counts as done.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	cl := &call{op: "delete snapshot", method: http.MethodDelete, path: snapshotPath(id), retry: retryIdempotent, goneIsDone: true}
	return c.do(ctx, cl, nil)
}

// Restore starts sandboxes from the snapshot id (req.Count, default 1) and
// returns them running. Never retried: a repeat would start more.
func (c *Client) Restore(ctx context.Context, id string, req api.RestoreRequest) ([]api.Sandbox, error) {
	var res api.RestoreResult
	cl := once(ctx, &call{op: "restore", method: http.MethodPost, path: snapshotPath(id, "restore"), in: req})
	if err := c.do(ctx, cl, &res); err != nil {
		return nil, err
	}
	return res.Sandboxes, nil
}

// Fork starts req.Count children (default 1) of the running sandbox id
// from a snapshot of its disk, and returns them running with that
// snapshot and how long the parent paused. Sent under an idempotency key,
// so a retry never starts more.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.ForkResult, error) {
	var res api.ForkResult
	cl := once(ctx, &call{op: "fork", method: http.MethodPost, path: sandboxPath(id, "fork"), in: req})
	if err := c.do(ctx, cl, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// GC collects the snapshot layers and chunks nothing needs (admin key
// only); a nil grace takes the server's.
func (c *Client) GC(ctx context.Context, req api.GCRequest) (*api.GCResult, error) {
	var res api.GCResult
	cl := &call{op: "gc", method: http.MethodPost, path: "/v1/gc", in: req, retry: retryRefused}
	if err := c.do(ctx, cl, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DebugVars returns the daemon's own resource use (admin key only).
func (c *Client) DebugVars(ctx context.Context) (*api.DebugVars, error) {
	var v api.DebugVars
	cl := &call{op: "debug vars", method: http.MethodGet, path: "/v1/debug/vars", retry: retryIdempotent}
	if err := c.do(ctx, cl, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
