package client

import (
	"context"
	"net/http"

	"warren/api"
)

// SandboxMetrics returns running sandbox id's resource use as its agent
// measures it: CPU share since the previous call, memory, disk and tasks.
// An *Error with CodeConflict for a sandbox that is not running.
func (c *Client) SandboxMetrics(ctx context.Context, id string) (*api.SandboxMetrics, error) {
	var m api.SandboxMetrics
	cl := &call{op: "get sandbox metrics", method: http.MethodGet, path: sandboxPath(id, "metrics"), retry: retryIdempotent}
	if err := c.do(ctx, cl, &m); err != nil {
		return nil, err
	}
	return &m, nil
}
