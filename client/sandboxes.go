package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"warren/api"
)

// Health checks that the server answers GET /healthz with status ok. It
// needs no API key.
func (c *Client) Health(ctx context.Context) error {
	var h struct {
		Status string `json:"status"`
	}
	cl := &call{op: "health", method: http.MethodGet, path: "/healthz", retry: retryIdempotent}
	if err := c.do(ctx, cl, &h); err != nil {
		return err
	}
	if h.Status != "ok" {
		return fmt.Errorf("health: status %q", h.Status)
	}
	return nil
}

// OpenAPI returns the server's OpenAPI 3.1 document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	cl := &call{op: "get openapi document", method: http.MethodGet, path: "/openapi.json", retry: retryIdempotent}
	if err := c.do(ctx, cl, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// Info describes the node: its runtimes and their isolation, how it clones
// disks, its cgroup version.
func (c *Client) Info(ctx context.Context) (*api.NodeInfo, error) {
	var info api.NodeInfo
	cl := &call{op: "get info", method: http.MethodGet, path: "/v1/info", retry: retryIdempotent}
	if err := c.do(ctx, cl, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// CreateSandbox creates a sandbox and returns it once it runs. It is never
// retried: a repeated create could make two sandboxes.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	cl := once(ctx, &call{op: "create sandbox", method: http.MethodPost, path: "/v1/sandboxes", in: req})
	if err := c.do(ctx, cl, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// GetSandbox returns the sandbox id; an unknown one is an *api.Error with
// code not_found.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	cl := &call{op: "get sandbox", method: http.MethodGet, path: sandboxPath(id), retry: retryIdempotent}
	if err := c.do(ctx, cl, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// allTenants is the query of the admin scope of listings and deletions.
var allTenants = url.Values{"all_tenants": {"true"}}

// DeleteSandbox deletes the sandbox id. It is retried: when an attempt whose
// answer was lost deleted it, the 404 of the next attempt counts as success.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	cl := &call{op: "delete sandbox", method: http.MethodDelete, path: sandboxPath(id), retry: retryIdempotent, goneIsDone: true}
	return c.do(ctx, cl, nil)
}

// DeleteAnyTenantsSandbox deletes sandbox id whichever tenant owns it
// (admin key only).
func (c *Client) DeleteAnyTenantsSandbox(ctx context.Context, id string) error {
	cl := &call{op: "delete sandbox", method: http.MethodDelete, path: sandboxPath(id), query: allTenants, retry: retryIdempotent, goneIsDone: true}
	return c.do(ctx, cl, nil)
}

// SetTimeout makes the sandbox id expire ttl from now (rounded up to a
// second) and returns it with its new expiry.
func (c *Client) SetTimeout(ctx context.Context, id string, ttl time.Duration) (*api.Sandbox, error) {
	var sb api.Sandbox
	in := api.SetTimeoutRequest{TimeoutSeconds: int64((ttl + time.Second - 1) / time.Second)}
	cl := &call{op: "set timeout", method: http.MethodPost, path: sandboxPath(id, "timeout"), in: in, retry: retryRefused}
	if err := c.do(ctx, cl, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// PauseSandbox pauses the vm sandbox id with its memory (saved to a file on
// its node; no process runs for it) and returns it paused. A container
// sandbox, or one that is not running, is a conflict error.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	cl := &call{op: "pause sandbox", method: http.MethodPost, path: sandboxPath(id, "pause"), retry: retryRefused}
	if err := c.do(ctx, cl, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ResumeSandbox runs the paused sandbox id again from its saved memory and
// returns it running; its processes carry on where they were.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	cl := &call{op: "resume sandbox", method: http.MethodPost, path: sandboxPath(id, "resume"), retry: retryRefused}
	if err := c.do(ctx, cl, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// CreateKey makes a new API key for tenant (needs an admin key). The key is
// in the answer only: the server keeps its hash. Sent once, never retried
// (a retry could make a second key).
func (c *Client) CreateKey(ctx context.Context, req api.CreateKeyRequest) (*api.Key, error) {
	var k api.Key
	cl := &call{op: "create key", method: http.MethodPost, path: "/v1/keys", in: req, retry: retryNever}
	if err := c.do(ctx, cl, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// DeleteKey revokes the API key named id (admin key only): it
// authenticates nothing from the next request on.
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	cl := &call{op: "delete key", method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(id), retry: retryIdempotent}
	return c.do(ctx, cl, nil)
}

// RotateAgentTokens gives every sandbox of tenant a new agent token
// (needs the admin key): the old ones open nothing from then on, and the
// calls they had open end. It answers the sandboxes that got one.
func (c *Client) RotateAgentTokens(ctx context.Context, tenant string) (api.RotateAgentTokensResult, error) {
	var res api.RotateAgentTokensResult
	cl := &call{op: "rotate agent tokens", method: http.MethodPost, path: idPath("tenants", tenant, "rotate-agent-tokens"), retry: retryIdempotent}
	return res, c.do(ctx, cl, &res)
}

// ListNodes lists the fleet's nodes (needs the admin key); none on a
// single machine.
func (c *Client) ListNodes(ctx context.Context) ([]api.FleetNode, error) {
	var list api.FleetNodeList
	cl := &call{op: "list nodes", method: http.MethodGet, path: "/v1/nodes", retry: retryIdempotent}
	if err := c.do(ctx, cl, &list); err != nil {
		return nil, err
	}
	return list.Nodes, nil
}

// NodeAction does action to node id (needs the admin key):
// api.NodeCordon stops it taking new sandboxes, api.NodeUncordon lets it
// again, api.NodeDrain moves its sandboxes away.
func (c *Client) NodeAction(ctx context.Context, id, action string) (*api.FleetNode, error) {
	var n api.FleetNode
	cl := &call{op: action + " node", method: http.MethodPost, path: nodePath(id, action), retry: retryIdempotent}
	if err := c.do(ctx, cl, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// Quota returns tenant's quota in the fleet (needs the admin key).
func (c *Client) Quota(ctx context.Context, tenant string) (*api.Quota, error) {
	var q api.Quota
	cl := &call{op: "get quota", method: http.MethodGet, path: idPath("tenants", tenant, "quota"), retry: retryIdempotent}
	if err := c.do(ctx, cl, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// SetQuota sets tenant's quota in the fleet, whole (needs the admin key).
func (c *Client) SetQuota(ctx context.Context, tenant string, q api.Quota) error {
	cl := &call{op: "set quota", method: http.MethodPut, path: idPath("tenants", tenant, "quota"), in: q, retry: retryIdempotent}
	return c.do(ctx, cl, nil)
}

// Pools lists the warm pools with their state (needs the admin key).
func (c *Client) Pools(ctx context.Context) ([]api.Pool, error) {
	var list api.PoolList
	cl := &call{op: "list pools", method: http.MethodGet, path: "/v1/pools", retry: retryIdempotent}
	if err := c.do(ctx, cl, &list); err != nil {
		return nil, err
	}
	return list.Pools, nil
}

// SetPool sets the warm pool of template and spec's runtime, whole, and
// returns it (needs the admin key).
func (c *Client) SetPool(ctx context.Context, template string, spec api.PoolSpec) (*api.Pool, error) {
	var p api.Pool
	cl := &call{op: "set pool", method: http.MethodPut, path: idPath("pools", template), in: spec, retry: retryIdempotent}
	if err := c.do(ctx, cl, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// DeletePool removes the warm pool of template and runtime ("": what a
// create picks) (needs the admin key).
func (c *Client) DeletePool(ctx context.Context, template, runtime string) error {
	path := idPath("pools", template)
	if runtime != "" {
		path += "?runtime=" + url.QueryEscape(runtime)
	}
	cl := &call{op: "delete pool", method: http.MethodDelete, path: path, retry: retryIdempotent}
	return c.do(ctx, cl, nil)
}
