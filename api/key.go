package api

import (
	"time"
)

// CreateKeyRequest is the body of POST /v1/keys (admin key only): a new API
// key for a tenant. Tenant names are 1-63 characters of a-z, 0-9, '_' and
// '-', starting with a letter or digit; "admin" is the admin key's own.
// Scope limits the key to what it names: "" is the tenant's whole API,
// KeyScopeMetrics only GET /metrics (a scraper's key, which can do nothing
// else; its tenant names its owner).
type CreateKeyRequest struct {
	Tenant string `json:"tenant"`
	Scope  string `json:"scope,omitempty"`
}

// KeyScopeMetrics is the scope of a key that may only read /metrics.
const KeyScopeMetrics = "metrics"

// Quota is the body and answer of PUT and GET /v1/tenants/{tenant}/quota
// (admin key only): what one tenant may hold in the whole fleet at once,
// across every node. A zero field bounds nothing (each node still bounds
// its tenants by its own flags). A create, restore or snapshot beyond it
// is a 429 naming the quota and its value.
type Quota struct {
	// Sandboxes, CPUs, MemoryMB and DiskMB bound its live sandboxes and
	// what they were given.
	Sandboxes int     `json:"sandboxes"`
	CPUs      float64 `json:"cpus"`
	MemoryMB  int64   `json:"memory_mb"`
	DiskMB    int64   `json:"disk_mb"`
	// Snapshots and SnapshotBytes bound its snapshots that did not fail
	// and what they added to the blob store.
	Snapshots     int   `json:"snapshots"`
	SnapshotBytes int64 `json:"snapshot_bytes"`
	// CreatesPerMinute bounds the sandboxes it starts in any 60 seconds.
	CreatesPerMinute int `json:"creates_per_minute"`
}

// AdminTenant is the tenant of the admin key; no other key may have it.
const AdminTenant = "admin"

// Key is a new API key. The key itself is shown this once: the server keeps
// only its hash. ID names it in listings and for revocation.
type Key struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Tenant string `json:"tenant"`
	Scope  string `json:"scope,omitempty"`
}

// RotateAgentTokensResult answers POST
// /v1/tenants/{tenant}/rotate-agent-tokens (admin key only): the
// sandboxes of the tenant that got a new agent token. Their old tokens
// open nothing from then on, and what they opened has ended.
type RotateAgentTokensResult struct {
	Tenant    string   `json:"tenant"`
	Sandboxes []string `json:"sandboxes"`
}

// KeyInfo is one API key as GET /v1/keys lists it: never the key itself.
type KeyInfo struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Admin     bool      `json:"admin"`
	Scope     string    `json:"scope,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// KeyList is the answer to GET /v1/keys, oldest first.
type KeyList struct {
	Keys          []KeyInfo `json:"keys"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}
