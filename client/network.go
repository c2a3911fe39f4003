package client

import (
	"context"
	"net/http"

	"warren/api"
)

// Network returns sandbox id's egress policy, its address and gateway, and
// how many connections and DNS queries the policy refused.
func (c *Client) Network(ctx context.Context, id string) (*api.NetworkStatus, error) {
	var st api.NetworkStatus
	cl := &call{op: "get network", method: http.MethodGet, path: sandboxPath(id, "network"), retry: retryIdempotent}
	if err := c.do(ctx, cl, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// SetNetwork replaces running sandbox id's egress policy; it applies to new
// connections and DNS queries at once.
func (c *Client) SetNetwork(ctx context.Context, id string, p api.NetworkPolicy) (*api.NetworkStatus, error) {
	var st api.NetworkStatus
	cl := &call{op: "set network", method: http.MethodPut, path: sandboxPath(id, "network"), in: p, retry: retryIdempotent}
	if err := c.do(ctx, cl, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
