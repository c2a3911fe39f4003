package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"warren/api"
)

// Exposed ports (docs/API.md, "Exposed ports"): a sandbox's TCP ports are
// reached through the server, with the API key at
// /v1/sandboxes/ID/ports/PORT/, and on preview host names with the
// sandbox's access token.

// Preview returns the sandbox's preview access: whether its previews are
// public, its access token, and its preview URL template (nil URL when the
// server has no preview domain).
func (c *Client) Preview(ctx context.Context, id string) (*api.Preview, error) {
	var p api.Preview
	cl := &call{op: "get preview", method: http.MethodGet, path: sandboxPath(id, "preview"), retry: retryIdempotent}
	if err := c.do(ctx, cl, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// SetPreview makes the sandbox's previews public or private (req.Public
// nil leaves it) and, with req.RotateToken, gives it a new access token;
// it returns the result. A rotation is retried only when nothing reached
// the server: a repeat would rotate again.
func (c *Client) SetPreview(ctx context.Context, id string, req api.SetPreviewRequest) (*api.Preview, error) {
	var p api.Preview
	retry := retryIdempotent
	if req.RotateToken {
		retry = retryRefused
	}
	cl := &call{op: "set preview", method: http.MethodPut, path: sandboxPath(id, "preview"), in: req, retry: retry}
	if err := c.do(ctx, cl, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PortURL is the URL of path (from "/"; "" for the root) on the sandbox's
// port through the server's API route. Requests to it need the API key:
// send them with PortRequest.
func (c *Client) PortURL(id string, port int, path string) string {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return c.base + sandboxPath(id, "ports", strconv.Itoa(port)) + path
}

// PortRequest sends a request to path (with its query, from "/") on the
// sandbox's port through the server, with the API key, once, and returns
// the answer as it is: the sandbox's own, or the server's JSON error
// (404 unknown sandbox, 409 not running, 502 nothing answers on the port).
// The caller closes its body; a 101 answer's body is the two-way stream.
func (c *Client) PortRequest(ctx context.Context, method, id string, port int, path string, body io.Reader) (*http.Response, error) {
	if id == "" {
		return nil, fmt.Errorf("port request: empty sandbox ID")
	}
	u, err := url.Parse(c.PortURL(id, port, path))
	if err != nil {
		return nil, fmt.Errorf("port request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("port request: %w", err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("port request: %w", err)
	}
	return resp, nil
}
