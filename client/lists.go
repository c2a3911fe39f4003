package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"warren/api"
)

// ListOptions select one page of a list (docs/API.md, "Lists"). The List*
// functions follow every page for the caller; the *Page functions answer
// one, with the token of the next.
type ListOptions struct {
	// States keeps items in these states (lists that have states only).
	States []string
	// Limit is the most items of the page; 0 takes the server's default.
	Limit int
	// PageToken is the NextPageToken of the page before; "" for the first.
	PageToken string
}

// query is the options' query parameters, added to q (which may be nil).
func (o ListOptions) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.PageToken != "" {
		q.Set("page_token", o.PageToken)
	}
	return q
}

// getPage fetches one page of a list into out.
func (c *Client) getPage(ctx context.Context, op, path string, q url.Values, o ListOptions, out any) error {
	cl := &call{op: op, method: http.MethodGet, path: path, query: o.query(q), retry: retryIdempotent}
	return c.do(ctx, cl, out)
}

// every follows the pages of a list from o on and returns all their items.
func every[T any](ctx context.Context, o ListOptions, page func(context.Context, ListOptions) ([]T, string, error)) ([]T, error) {
	var out []T
	for {
		items, next, err := page(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		o.PageToken = next
	}
}

// SandboxesPage returns one page of the caller's sandboxes (every tenant's
// with allTenants: admin key only), oldest first, without their env.
func (c *Client) SandboxesPage(ctx context.Context, allTenants bool, o ListOptions) (*api.SandboxList, error) {
	var q url.Values
	if allTenants {
		q = url.Values{"all_tenants": {"true"}}
	}
	var list api.SandboxList
	if err := c.getPage(ctx, "list sandboxes", "/v1/sandboxes", q, o, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListSandboxes returns the caller's sandboxes in one of states (every one
// when none is given), oldest first, without their env.
func (c *Client) ListSandboxes(ctx context.Context, states ...string) ([]api.Sandbox, error) {
	return c.listSandboxes(ctx, false, states)
}

// ListAllTenantsSandboxes lists every tenant's sandboxes in one of states
// (admin key only).
func (c *Client) ListAllTenantsSandboxes(ctx context.Context, states ...string) ([]api.Sandbox, error) {
	return c.listSandboxes(ctx, true, states)
}

func (c *Client) listSandboxes(ctx context.Context, allTenants bool, states []string) ([]api.Sandbox, error) {
	return every(ctx, ListOptions{States: states, Limit: api.MaxListLimit}, func(ctx context.Context, o ListOptions) ([]api.Sandbox, string, error) {
		p, err := c.SandboxesPage(ctx, allTenants, o)
		if err != nil {
			return nil, "", err
		}
		return p.Sandboxes, p.NextPageToken, nil
	})
}

// SnapshotsPage returns one page of the caller's snapshots on the node, of
// one sandbox when sandboxID is not "", oldest first.
func (c *Client) SnapshotsPage(ctx context.Context, sandboxID string, o ListOptions) (*api.SnapshotList, error) {
	path := "/v1/snapshots"
	if sandboxID != "" {
		path = sandboxPath(sandboxID, "snapshots")
	}
	var list api.SnapshotList
	if err := c.getPage(ctx, "list snapshots", path, nil, o, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListSnapshots returns the caller's snapshots on the node, of one sandbox
// when sandboxID is not "", in one of states (all when none is given),
// oldest first.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string, states ...string) ([]api.Snapshot, error) {
	return every(ctx, ListOptions{States: states, Limit: api.MaxListLimit}, func(ctx context.Context, o ListOptions) ([]api.Snapshot, string, error) {
		p, err := c.SnapshotsPage(ctx, sandboxID, o)
		if err != nil {
			return nil, "", err
		}
		return p.Snapshots, p.NextPageToken, nil
	})
}

// LineagePage returns one page of the ancestors of snapshot id, nearest
// first.
func (c *Client) LineagePage(ctx context.Context, id string, o ListOptions) (*api.Lineage, error) {
	var l api.Lineage
	if err := c.getPage(ctx, "snapshot lineage", snapshotPath(id, "lineage"), nil, o, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Lineage returns every ancestor of snapshot id, nearest first: its
// parent, the parent's parent, up to the first snapshot of the chain.
func (c *Client) Lineage(ctx context.Context, id string) ([]string, error) {
	return every(ctx, ListOptions{}, func(ctx context.Context, o ListOptions) ([]string, string, error) {
		p, err := c.LineagePage(ctx, id, o)
		if err != nil {
			return nil, "", err
		}
		return p.Ancestors, p.NextPageToken, nil
	})
}

// FilesPage returns one page of the entries of the directory at path in
// the sandbox id, descending depth levels (0 takes the server's default,
// 1).
func (c *Client) FilesPage(ctx context.Context, id, path string, depth int, o ListOptions) (*api.FileList, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var list api.FileList
	if err := c.getPage(ctx, "list files", sandboxPath(id, "files", "list"), q, o, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListFiles lists the directory at path in the sandbox id, descending depth
// levels (0 takes the server's default, 1), following every page.
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]api.FileInfo, error) {
	return every(ctx, ListOptions{}, func(ctx context.Context, o ListOptions) ([]api.FileInfo, string, error) {
		p, err := c.FilesPage(ctx, id, path, depth, o)
		if err != nil {
			return nil, "", err
		}
		return p.Entries, p.NextPageToken, nil
	})
}

// ListProcesses returns the processes the sandbox's agent started in one
// of states (api.ProcessRunning, api.ProcessExited; all when none is
// given), by pid.
func (c *Client) ListProcesses(ctx context.Context, id string, states ...string) ([]api.Process, error) {
	return every(ctx, ListOptions{States: states, Limit: api.MaxListLimit}, func(ctx context.Context, o ListOptions) ([]api.Process, string, error) {
		var p api.ProcessList
		if err := c.getPage(ctx, "list processes", sandboxPath(id, "processes"), nil, o, &p); err != nil {
			return nil, "", err
		}
		return p.Processes, p.NextPageToken, nil
	})
}

// ListTemplates returns the templates sandboxes can be created from, by
// name.
func (c *Client) ListTemplates(ctx context.Context) ([]api.Template, error) {
	return every(ctx, ListOptions{Limit: api.MaxListLimit}, func(ctx context.Context, o ListOptions) ([]api.Template, string, error) {
		var p api.TemplateList
		if err := c.getPage(ctx, "list templates", "/v1/templates", nil, o, &p); err != nil {
			return nil, "", err
		}
		return p.Templates, p.NextPageToken, nil
	})
}

// ListKeys lists every API key's ID, tenant and age, never a key (admin
// key only), oldest first.
func (c *Client) ListKeys(ctx context.Context) ([]api.KeyInfo, error) {
	return every(ctx, ListOptions{Limit: api.MaxListLimit}, func(ctx context.Context, o ListOptions) ([]api.KeyInfo, string, error) {
		var p api.KeyList
		if err := c.getPage(ctx, "list keys", "/v1/keys", nil, o, &p); err != nil {
			return nil, "", err
		}
		return p.Keys, p.NextPageToken, nil
	})
}
