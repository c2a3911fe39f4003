package api

import (
	"time"
)

// Sandbox states. A sandbox moves starting → running → stopped, or to failed
// from any state; stopped and failed are final and are kept for a while so a
// caller can read what happened, then forgotten (the state machine, and how
// the node enforces it, is in internal/store/lifecycle.go). Any sandbox may
// also move running → paused → running (POST /v1/sandboxes/{id}/pause and
// /resume, or by its Lifecycle): paused, its disk is a durable snapshot in
// the blob store and, with memory (Paused.Memory), its processes are held
// where they were; exec and files are refused (or, with AutoResume, wake
// it); it may be deleted, and is once Lifecycle.PausedTTLSeconds pass. In a
// fleet, a sandbox with a checkpoint policy whose node was lost or drained
// is moving: no node runs it until one starts it again from its last
// checkpoint (starting, then running, under the same ID; its Restored says
// from what).
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateMoving   = "moving"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// How a sandbox's root disk persists (SandboxSpec.Persistence).
const (
	// PersistenceSnapshot keeps what explicit snapshots save: the disk is
	// a file on the node, and what was written since the last snapshot is
	// lost with the node.
	PersistenceSnapshot = "snapshot"
	// PersistenceAlways writes every block back, continuously, through the
	// node's block server to its tiers: a flush (fsync) in the sandbox
	// returns once its data is durable beyond the node.
	PersistenceAlways = "always"
)

// Volume is an always-on disk's write-back state (docs/ALWAYS-ON.md).
type Volume struct {
	// Layer is the newest layer in the durable tier: every write the
	// sandbox flushed is in it or below it.
	Layer string `json:"layer"`
	// RecoveryPoint is the time up to which object storage holds every
	// flushed write; absent when it holds them all (or when there is no
	// cluster tier: the durable tier is object storage).
	RecoveryPoint *time.Time `json:"recovery_point,omitempty"`
	// DirtyBytes is what was written and not yet flushed; CachedBytes what
	// of the disk the node holds.
	DirtyBytes  int64 `json:"dirty_bytes"`
	CachedBytes int64 `json:"cached_bytes"`
	// DurableBytes is what the disk holds in the durable tier: the chunks
	// of its layers and those superseded and not yet reclaimed. It stays
	// within DurableLimitBytes (the node's --durable-limit times the
	// disk's size): a flush that could pass it waits up to 10 s for
	// reclaiming, then fails, and the sandbox's fsync with it (ENOSPC).
	// UsedBytes is what the disk's own blocks take of it, compressed.
	DurableBytes      int64 `json:"durable_bytes"`
	DurableLimitBytes int64 `json:"durable_limit_bytes"`
	UsedBytes         int64 `json:"used_bytes"`
	// Refused says why the disk's last flush was refused; absent when it
	// was not.
	Refused string `json:"refused,omitempty"`
}

// Sandbox is one sandbox as the API shows it.
type Sandbox struct {
	ID string `json:"id"`
	// Tenant owns the sandbox.
	Tenant   string `json:"tenant"`
	Template string `json:"template"`
	// TemplateVersion is the version of the tenant's template it was
	// created from, NAME@VERSION (Template is then the built-in template
	// under it).
	TemplateVersion string `json:"template_version,omitempty"`
	Runtime         string `json:"runtime"`
	Isolation       string `json:"isolation"` // e.g. "container (shared host kernel)": never more than it is
	// Accel is how a vm sandbox's vCPUs run: "kvm" (hardware
	// virtualization) or "tcg" (QEMU's software emulation: for testing, not
	// production). Empty for a container.
	Accel string `json:"accel,omitempty"`
	State string `json:"state"`
	// Error says why a failed sandbox failed.
	Error string `json:"error,omitempty"`
	// DiskKept says a failed sandbox still holds its disks, until ExpiresAt
	// or until it is deleted: a snapshot of it saves its work.
	DiskKept bool    `json:"disk_kept,omitempty"`
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memory_mb"`
	Pids     int64   `json:"pids"`
	DiskMB   int64   `json:"disk_mb"`
	// Env is the environment it was created with: shown by GET of the
	// sandbox while it is not stopped or failed, never in a list (it may be
	// large, and hold secrets). A sandbox that ends forgets it.
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// AgentToken opens the sandbox's agent routes
	// (/v1/sandboxes/ID/agent/...) without an API key, in the
	// X-Access-Token header: what E2B's SDKs call the envd access token.
	// Shown like Env: by a create, a restore and GET of the sandbox, never
	// in a list.
	AgentToken string `json:"agent_token,omitempty"`
	// WorkspaceMB is the size of the sandbox's workspace disk, mounted at
	// /workspace; 0 when it has none.
	WorkspaceMB int64 `json:"workspace_mb,omitempty"`
	// Origin is the snapshot the sandbox's root disk was restored from, and
	// WorkspaceOrigin the one its workspace disk was, if any.
	Origin          string `json:"origin,omitempty"`
	WorkspaceOrigin string `json:"workspace_origin,omitempty"`
	// Network is the sandbox's egress policy (docs/NETWORK.md).
	Network   NetworkPolicy `json:"network"`
	CreatedAt time.Time     `json:"created_at"`
	// ExpiresAt is when the sandbox is deleted unless its timeout is
	// extended; for a failed sandbox that kept its disks, when they go.
	ExpiresAt time.Time `json:"expires_at"`
	// Persistence is how its root disk persists: PersistenceSnapshot or
	// PersistenceAlways; Volume, an always-on disk's write-back state,
	// shown by GET of a running sandbox (never in a list).
	Persistence string  `json:"persistence"`
	Volume      *Volume `json:"volume,omitempty"`
	// CheckpointEverySeconds is its checkpoint policy (0: none), and
	// Checkpoint the last checkpoint taken by it.
	CheckpointEverySeconds int64       `json:"checkpoint_every_seconds,omitempty"`
	Checkpoint             *Checkpoint `json:"checkpoint,omitempty"`
	// Restored is set once the sandbox was started again from a checkpoint
	// after its node was lost or drained: the last time it was.
	Restored *Restored `json:"restored,omitempty"`
	// Lifecycle is what happens at its timeout and when it is idle.
	Lifecycle
	// Paused says how a paused sandbox sleeps; absent unless it is paused.
	Paused *Paused `json:"paused,omitempty"`
}

// What a sandbox's timeout does (Lifecycle.OnTimeout).
const (
	OnTimeoutDelete = "delete"
	OnTimeoutPause  = "pause"
)

// Lifecycle is how a sandbox sleeps and wakes (docs/API.md, "Pause, sleep
// and wake"). Zero values: deleted at its timeout, never idle, kept paused
// for the server's default paused TTL, and no auto-resume.
type Lifecycle struct {
	// OnTimeout is what its timeout (and its idle timeout) does:
	// OnTimeoutDelete (the default) or OnTimeoutPause.
	OnTimeout string `json:"on_timeout,omitempty"`
	// IdleTimeoutSeconds, when not 0, ends the sandbox's run (as
	// OnTimeout says) once no exec, file call, terminal or request to one
	// of its ports has used it for that long.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// PausedTTLSeconds bounds how long it stays paused before it is
	// deleted (0: the server's default, shown once created).
	PausedTTLSeconds int64 `json:"paused_ttl_seconds,omitempty"`
	// AutoResume wakes a paused sandbox for any call that needs it
	// running (exec, files, terminal, a request to one of its ports, E2B's
	// connect) before the call goes on; without it such a call is 409.
	AutoResume bool `json:"auto_resume,omitempty"`
}

// Paused is how a paused sandbox sleeps.
type Paused struct {
	// At is when it paused; Reason why ("requested", or what paused it on
	// its own: its timeout, or idle); Auto says its lifecycle paused it.
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Auto   bool      `json:"auto,omitempty"`
	// Memory says its processes are kept: they go on where they were when
	// it resumes. Without it (a container, or a sandbox whose memory
	// image cannot be restored), it resumes from its disk and its
	// processes start again: its init, and nothing it ran.
	Memory bool `json:"memory"`
	// Snapshot is the durable snapshot of its root disk it wakes from on
	// any node, and Workspace that of its workspace disk, when it has one.
	Snapshot  string `json:"snapshot"`
	Workspace string `json:"workspace,omitempty"`
	// Image is the durable memory image it wakes from with its processes
	// on a node other than its own, when its runtime keeps memory: one of
	// the same runtime build and CPU restores it (elsewhere it wakes from
	// its disk alone, and says so). Held says its node holds it still
	// and resumes it in place (set in answers, not stored).
	Image string `json:"image,omitempty"`
	Held  bool   `json:"held"`
	// Standby is the node, in a fleet, that has fetched (or is fetching)
	// what it wakes from while its own node holds it: its wake goes there
	// if its node is lost or drained. Set in answers, not stored here.
	Standby string `json:"standby,omitempty"`
}

// Checkpoint is a durable snapshot a sandbox's checkpoint policy took.
type Checkpoint struct {
	Snapshot string    `json:"snapshot"`
	At       time.Time `json:"at"`
}

// Restored says how a sandbox came back on another node.
type Restored struct {
	// Snapshot is the checkpoint it came back from, taken at SnapshotAt;
	// At is when it came back. LostSeconds is the work lost: the time from
	// the snapshot to the loss of its node (0 for a drain, whose final
	// snapshot is taken with the sandbox frozen). An always-on sandbox
	// comes back with its own disk as its last flush left it: Snapshot is
	// its own ID, SnapshotAt zero, LostSeconds 0 (what it wrote and never
	// flushed, at most the block server's write-back period, is lost).
	Snapshot    string    `json:"snapshot"`
	SnapshotAt  time.Time `json:"snapshot_at"`
	At          time.Time `json:"at"`
	LostSeconds float64   `json:"lost_seconds"`
	// Reason is why it moved: its node stopped answering, or was drained.
	Reason string `json:"reason"`
	// From is the node it ran on before.
	From string `json:"from,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero values take
// the server's defaults.
type CreateSandboxRequest struct {
	Template string `json:"template,omitempty"` // default "default"
	DiskMB   int64  `json:"disk_mb,omitempty"`
	SandboxSpec
}

// SandboxSpec is what a create and a restore both say of the sandboxes
// they start. Zero values take the server's defaults.
type SandboxSpec struct {
	Runtime  string  `json:"runtime,omitempty"` // "vm", "gvisor", "container" or "auto" (default: the strongest available; never a vm under tcg)
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	Pids     int64   `json:"pids,omitempty"`
	// WorkspaceMB adds a workspace disk of this size, an empty ext4
	// filesystem mounted at /workspace, which can be snapshotted on its own
	// (scope "workspace"). 0: none. A restore of a workspace snapshot
	// cannot set it: its disk keeps its size.
	WorkspaceMB int64 `json:"workspace_mb,omitempty"`
	// Network is the egress policy; nil: the default (the internet, not
	// private ranges). A snapshot does not carry one.
	Network *NetworkPolicy `json:"network,omitempty"`
	// TimeoutSeconds is the sandbox's time to live; it is deleted after it.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// CheckpointEverySeconds, when not 0, is the sandbox's checkpoint
	// policy: its root disk is snapshotted that often (each checkpoint
	// replaces the one before), and in a fleet, when its node is lost or
	// drained, it starts again on another node from the last checkpoint,
	// under the same ID (docs/FLEET.md, "Checkpoints and drain"). Not with
	// a workspace disk.
	CheckpointEverySeconds int64 `json:"checkpoint_every_seconds,omitempty"`
	// Lifecycle is how it sleeps and wakes; a fork's children take the
	// parent's.
	Lifecycle
	// Persistence is how the root disk persists: PersistenceSnapshot (the
	// default: what explicit snapshots save) or PersistenceAlways (every
	// write goes back, continuously, to the node's tiers: docs/ALWAYS-ON.md).
	// An always-on disk starts at once from any snapshot, its blocks
	// fetched as they are read. A fork's children take the parent's.
	Persistence string            `json:"persistence,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Region and NodeLabels choose where a fleet starts the sandbox: on a
	// node of that region whose labels include all of these. "" and none:
	// anywhere. A single machine is in no region and has no labels, and
	// refuses a request that names any (503).
	Region     string            `json:"region,omitempty"`
	NodeLabels map[string]string `json:"node_labels,omitempty"`
}

// SandboxMetrics is the body of GET /v1/sandboxes/{id}/metrics: a running
// sandbox's resource use, measured by its agent from inside (a container's
// cgroup, a vm's own kernel).
type SandboxMetrics struct {
	// At is when the figures were read.
	At time.Time `json:"at"`
	// CPUUsedPct is the CPU time the sandbox used since the previous
	// metrics call (or over 100 ms when there was none in the last minute),
	// as a percentage of its CPUCount CPUs: 0 to 100.
	CPUUsedPct float64 `json:"cpu_used_pct"`
	// CPUCount is how many CPUs the sandbox may use.
	CPUCount uint32 `json:"cpu_count"`
	// MemoryUsedBytes is memory in use and not readily reclaimable (a vm's
	// MemTotal - MemAvailable, a container's working set: its cgroup's
	// usage less inactive file pages).
	MemoryUsedBytes uint64 `json:"memory_used_bytes"`
	// MemoryTotalBytes is the memory the sandbox may use (on cgroup v1 a
	// container's includes the agent's reserve).
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
	// MemoryCacheBytes is the page cache.
	MemoryCacheBytes uint64 `json:"memory_cache_bytes"`
	// DiskUsedBytes and DiskTotalBytes are the root filesystem's.
	DiskUsedBytes  uint64 `json:"disk_used_bytes"`
	DiskTotalBytes uint64 `json:"disk_total_bytes"`
	// Pids counts the sandbox's tasks, threads included (in a vm, every
	// task of its kernel, the kernel's own threads too).
	Pids uint64 `json:"pids"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the
// sandbox now expires this many seconds from now.
type SetTimeoutRequest struct {
	TimeoutSeconds int64 `json:"timeout_seconds"`
}

// SandboxList is the answer to GET /v1/sandboxes, oldest first.
type SandboxList struct {
	Sandboxes     []Sandbox `json:"sandboxes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}
