package api

import (
	"strings"
	"time"
)

// Snapshot states. A snapshot is pending from the moment its disk is cloned
// (the API answers then) until every chunk and its manifest are stored and
// verified in the blob store: then it is durable, and it survives the loss of
// the node. An upload that keeps failing past its retries ends failed, with
// the reason. Only durable snapshots can be restored on another node; a
// pending one can already be restored on the node that took it. Durable
// and failed are final for a tenant's snapshot (the state machine, and how
// the store enforces it, is in internal/store/snapshots.go).
const (
	SnapshotPending = "pending"
	SnapshotDurable = "durable"
	SnapshotFailed  = "failed"
)

// Snapshot scopes: which of a sandbox's disks a snapshot saves.
const (
	ScopeRoot      = "root"      // the root disk: the whole system
	ScopeWorkspace = "workspace" // the workspace disk mounted at /workspace
)

// Snapshot names. A snapshot may be given a name when it is taken, unique
// among its tenant's snapshots (another tenant's may have the same); every
// route that takes a snapshot's ID takes its name too. A name is 1 to
// MaxSnapshotNameLen letters, digits, '.', '_' and '-', starting with a
// letter or a digit, and never starts with SnapshotIDPrefix: a reference
// to a snapshot is either an ID or a name, never both. Deleting a snapshot
// frees its name.
const (
	MaxSnapshotNameLen = 63
	SnapshotIDPrefix   = "sn-"
)

// CheckSnapshotName returns nil if name is a valid snapshot name, else a
// CodeBadRequest *Error that says why.
func CheckSnapshotName(name string) error {
	bad := func(why string) error {
		return Errorf(CodeBadRequest, "bad snapshot name %.70q: %s", name, why)
	}
	switch {
	case name == "" || len(name) > MaxSnapshotNameLen:
		return bad("it must be 1 to 63 characters")
	case strings.HasPrefix(name, SnapshotIDPrefix):
		return bad("a name cannot start with \"" + SnapshotIDPrefix + "\", as snapshot IDs do")
	case !isAlnum(name[0]):
		return bad("it must start with a letter or a digit")
	}
	for i := range len(name) {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return bad("only letters, digits, '.', '_' and '-' are allowed")
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Snapshot is a saved disk of a sandbox.
type Snapshot struct {
	ID string `json:"id"`
	// Name is the snapshot's name, if it was given one.
	Name      string `json:"name,omitempty"`
	SandboxID string `json:"sandbox_id"`
	Scope     string `json:"scope"` // root or workspace
	// Parent is the snapshot this one's layer is stored against: the
	// sandbox's previous snapshot, or the snapshot it was restored from;
	// empty when the layer is against the template.
	Parent string `json:"parent,omitempty"`
	// The rest of the chain is GET /v1/snapshots/{id}/lineage.
	Template string `json:"template"`
	State    string `json:"state"`
	// Error says why a failed snapshot failed.
	Error string `json:"error,omitempty"`
	// DiskBytes is the size of the saved disk.
	DiskBytes int64 `json:"disk_bytes"`
	// ChangedBytes is the data in this snapshot's layer: what differs from
	// its parent (known once durable).
	ChangedBytes int64 `json:"changed_bytes"`
	// StoredBytes is what the layer added to the blob store, compressed and
	// without the chunks the tenant's snapshots had stored already (known
	// once durable); another tenant's chunks are never shared.
	StoredBytes int64     `json:"stored_bytes"`
	CreatedAt   time.Time `json:"created_at"`
	// DurableAt is when the snapshot became durable.
	DurableAt *time.Time `json:"durable_at,omitempty"`
	// AckMs is how long taking it held the sandbox's writes: its filesystem
	// synced and its disk cloned (docs/API.md, "Snapshots").
	AckMs float64 `json:"ack_ms"`
	// UploadMs is how long the upload took, once durable.
	UploadMs float64 `json:"upload_ms,omitempty"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Name names the snapshot (CheckSnapshotName); one another of the
	// tenant's snapshots has is a CodeConflict naming that snapshot.
	Name string `json:"name,omitempty"`
	// Scope is root (the default) or workspace.
	Scope string `json:"scope,omitempty"`
	// Wait answers only once the snapshot is durable (or failed), within
	// WaitTimeoutSeconds (default 600); otherwise the answer comes as soon as
	// the disk is cloned, with the snapshot pending.
	Wait               bool  `json:"wait,omitempty"`
	WaitTimeoutSeconds int64 `json:"wait_timeout_seconds,omitempty"`
}

// RestoreRequest is the body of POST /v1/snapshots/{id}/restore: start
// Count sandboxes (default 1), each with the snapshot's disk and a fresh
// identity. A root snapshot gives their root disk; a workspace snapshot
// gives their workspace disk, and the root disk is a fresh clone of the
// snapshot's template. The spec is as a create's (the runtime defaults to
// auto, the strongest available); the snapshot's disk keeps its size.
type RestoreRequest struct {
	Count int `json:"count,omitempty"`
	SandboxSpec
}

// RestoreResult is the answer to a restore: the new sandboxes, running.
type RestoreResult struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork: Count children
// (default 1) of a running sandbox. Zero fields of the spec take the
// parent's values (runtime, resources, env, metadata, egress policy,
// checkpoint policy, time to live), not the server's defaults.
type ForkRequest struct {
	Count int `json:"count,omitempty"`
	SandboxSpec
}

// ForkResult is the answer to a fork: the snapshot of the parent's disk
// the children start from (the tenant's, like any other), how long the
// parent waited for it (a container's writes while its filesystem was
// synced and its disk cloned; a vm's vCPUs while its memory was saved and
// its disk cloned), and the children, running.
type ForkResult struct {
	Snapshot  Snapshot  `json:"snapshot"`
	PausedMs  float64   `json:"paused_ms"`
	Sandboxes []Sandbox `json:"sandboxes"`
}

// GCRequest is the body of POST /v1/gc (admin key only).
type GCRequest struct {
	// GraceSeconds spares objects younger than this (default: the server's,
	// an hour), for uploads in flight on other nodes sharing the blob store.
	// 0 is for a blob store that only this node writes.
	GraceSeconds *int64 `json:"grace_seconds,omitempty"`
}

// GCResult is the answer to POST /v1/gc.
type GCResult struct {
	ManifestsDeleted int   `json:"manifests_deleted"`
	ChunksDeleted    int   `json:"chunks_deleted"`
	BytesFreed       int64 `json:"bytes_freed"`
	ChunksKept       int   `json:"chunks_kept"`
}

// SnapshotList is the answer to GET /v1/snapshots and
// GET /v1/sandboxes/{id}/snapshots, oldest first.
type SnapshotList struct {
	Snapshots     []Snapshot `json:"snapshots"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}

// Lineage is the answer to GET /v1/snapshots/{id}/lineage: the snapshot's
// ancestors, nearest first: its parent, the parent's parent, and so on up
// to the first snapshot of the chain.
type Lineage struct {
	Ancestors     []string `json:"ancestors"`
	NextPageToken string   `json:"next_page_token,omitempty"`
}
