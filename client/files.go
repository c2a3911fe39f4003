package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"warren/api"
)

// FileReader is the content of a file as ReadFile streams it.
type FileReader struct {
	io.ReadCloser
	// Size is the file's size in bytes as the server announced it (its
	// Content-Length), -1 when it did not.
	Size int64
}

// ReadFile returns the contents of the file at path in the sandbox id as a
// stream, which the caller must close, with its size. A stream cut short
// returns an error wrapping io.ErrUnexpectedEOF rather than a silent early
// EOF.
func (c *Client) ReadFile(ctx context.Context, id, path string) (*FileReader, error) {
	cl := &call{op: "read file", method: http.MethodGet, path: sandboxPath(id, "files"), query: url.Values{"path": {path}}, retry: retryIdempotent}
	resp, err := c.send(ctx, cl)
	if err != nil {
		return nil, err
	}
	return &FileReader{ReadCloser: resp.Body, Size: resp.ContentLength}, nil
}

// WriteFile streams r, until it ends, to the file at path in the sandbox id,
// without holding it in memory, and returns the file written. Missing
// parents are created and the file is replaced atomically. mode 0 and user ""
// take the server's defaults (0644, root). WriteFile does not close r. Never
// retried.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode uint32, user string) (*api.FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode))
	}
	if user != "" {
		q.Set("user", user)
	}
	var fi api.FileInfo
	cl := &call{op: "write file", method: http.MethodPut, path: sandboxPath(id, "files"), query: q, body: r, retry: retryNever}
	if err := c.do(ctx, cl, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// StatFile describes the file or directory at path in the sandbox id.
func (c *Client) StatFile(ctx context.Context, id, path string) (*api.FileInfo, error) {
	var fi api.FileInfo
	cl := &call{op: "stat file", method: http.MethodGet, path: sandboxPath(id, "files", "stat"), query: url.Values{"path": {path}}, retry: retryIdempotent}
	if err := c.do(ctx, cl, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Mkdir creates the directory at path in the sandbox id and its missing
// parents. mode 0 and user "" take the server's defaults (0755, root).
func (c *Client) Mkdir(ctx context.Context, id, path string, mode uint32, user string) (*api.FileInfo, error) {
	var fi api.FileInfo
	in := api.MkdirRequest{Path: path, Mode: mode, User: user}
	cl := &call{op: "mkdir", method: http.MethodPost, path: sandboxPath(id, "files", "mkdir"), in: in, retry: retryRefused}
	if err := c.do(ctx, cl, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Move renames src to dst in the sandbox id and returns what is now at dst.
func (c *Client) Move(ctx context.Context, id, src, dst string) (*api.FileInfo, error) {
	var fi api.FileInfo
	in := api.MoveRequest{Source: src, Destination: dst}
	cl := &call{op: "move", method: http.MethodPost, path: sandboxPath(id, "files", "move"), in: in, retry: retryRefused}
	if err := c.do(ctx, cl, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// RemoveFile removes the file or directory at path in the sandbox id. A
// directory that is not empty needs recursive, or it is an *api.Error with
// code conflict.
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	cl := &call{op: "remove file", method: http.MethodDelete, path: sandboxPath(id, "files"), query: q, retry: retryRefused}
	return c.do(ctx, cl, nil)
}
