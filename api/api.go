// Package api is the contract of warren's HTTP/JSON API: the request and
// response bodies, the error body and its codes. The server
// (internal/server) and the Go client (package client) both use it; it does
// no I/O. The OpenAPI document served at /openapi.json describes the same
// shapes (openapi.json beside this file).
package api

import (
	"strconv"
	"strings"
	"time"
)

// Isolation levels a runtime offers, weakest first.
const (
	IsolationContainer = "container" // namespaces, cgroups, seccomp: the host kernel is shared
	IsolationGVisor    = "gvisor"    // a user-space kernel (gVisor's Sentry) between the sandbox and the host kernel
	IsolationVM        = "vm"        // hardware virtualization: a guest kernel of its own
)

// Sandbox states. A sandbox moves starting → running → stopped, or to failed
// from any state; stopped and failed are final and are kept for a while so a
// caller can read what happened, then forgotten (the state machine, and how
// the node enforces it, is in internal/store/lifecycle.go). A vm sandbox may also move
// running → paused → running (POST /v1/sandboxes/{id}/pause and /resume):
// paused, its memory is saved to a file on the node and no process runs
// for it; exec and files are refused until it is resumed; it still expires,
// and may be deleted. In a fleet, a sandbox with a checkpoint policy whose
// node was lost or drained is moving: no node runs it until one starts it
// again from its last checkpoint (starting, then running, under the same
// ID; its Restored says from what).
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

// Node actions: POST /v1/nodes/{id}/{action}.
const (
	NodeCordon   = "cordon"   // take no new sandboxes; keep those it runs
	NodeUncordon = "uncordon" // take new sandboxes again
	NodeDrain    = "drain"    // take none, and move those it runs away
)

// Idempotency headers (docs/API.md, "Retries"): a request sent with
// IdempotencyKeyHeader takes effect once, and an answer given again to a
// retry carries ReplayedHeader: true.
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	ReplayedHeader       = "Idempotent-Replayed"
)

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

// NetworkPolicy is a sandbox's egress policy, set at create and replaced
// whole by PUT /v1/sandboxes/{id}/network. Entries of Allow and Deny are
// IPv4 CIDRs ("10.1.0.0/16"), IPv4 addresses, or domain names
// ("example.com" matches that name only, "*.example.com" any name below
// it). Whatever the policy, link-local (the cloud metadata address among
// it), loopback, the node itself and other sandboxes are unreachable. See
// docs/NETWORK.md for the order rules apply in.
type NetworkPolicy struct {
	// None denies all egress, DNS included. Exposed ports still reach the
	// sandbox through warren's proxy.
	None bool `json:"none,omitempty"`
	// Allow, when non-empty, is the only egress allowed (plus what allowed
	// names resolve to). It may open private ranges, which are denied by
	// default.
	Allow []string `json:"allow,omitempty"`
	// Deny is refused even when Allow matches.
	Deny []string `json:"deny,omitempty"`
}

// NetworkStatus is the body of GET and PUT /v1/sandboxes/{id}/network.
type NetworkStatus struct {
	Policy NetworkPolicy `json:"policy"`
	// Address is the sandbox's own address (the same in every sandbox) and
	// Gateway its router and DNS server.
	Address string `json:"address"`
	Gateway string `json:"gateway"`
	// Denied counts the connections and DNS queries the policy refused.
	Denied uint64 `json:"denied"`
	// RateLimited counts new connections refused by the connection-rate
	// limit.
	RateLimited uint64 `json:"rate_limited"`
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

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
//
// Exactly one of Cmd (an argv, run directly) and Shell (a command line, run
// by /bin/sh -c) is set. A command that does not exist ends with exit code
// 127, as in a shell.
type ExecRequest struct {
	Cmd   []string          `json:"cmd,omitempty"`
	Shell string            `json:"shell,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"` // default root
	// TimeoutMs kills the command after this long (exit code 137, timed_out).
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	Stdin     []byte `json:"stdin,omitempty"` // base64 in JSON; written, then stdin is closed
	// Background starts the command and answers at once with its pid (202);
	// the process endpoints attach to it, feed its stdin, signal it or wait
	// for it. Its stdin stays open until closed.
	Background bool   `json:"background,omitempty"`
	Tag        string `json:"tag,omitempty"`
	// Stream answers with a stream of ExecEvent, one JSON object a line
	// (application/x-ndjson), instead of one ExecResult at the end.
	Stream bool `json:"stream,omitempty"`
	// OutputEncoding is how ExecResult carries stdout and stderr: "utf8"
	// (the default: text, with U+FFFD for bytes that are not UTF-8) or
	// "base64" (exact bytes, a third larger; JSON would write a control
	// byte such as NUL as six).
	OutputEncoding string `json:"output_encoding,omitempty"`
	// PTY runs the command on a pseudo-terminal of this size: its stdin,
	// stdout and stderr are the terminal, TERM is xterm-256color unless Env
	// sets it, and its output comes as events of type "pty" (what a
	// terminal shows: both streams, with the terminal's echo and line
	// endings). Such an exec must stream or run in the background; stdin
	// routes type into the terminal, and resize changes its size.
	PTY *PTYSize `json:"pty,omitempty"`
}

// PTYSize is a pseudo-terminal's size, each 1 to MaxPTYSize; it is also the
// body of POST /v1/sandboxes/{id}/processes/{pid}/resize.
type PTYSize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// MaxPTYSize bounds PTYSize's columns and rows.
const MaxPTYSize = 1000

// Output encodings of ExecRequest.OutputEncoding.
const (
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
)

// ExecResult is the answer to a foreground, non-streaming exec, and to a
// process wait. Output that is not valid UTF-8 is shown with U+FFFD in
// Stdout/Stderr; use streaming for exact bytes.
type ExecResult struct {
	PID        uint32  `json:"pid"`
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Status     string  `json:"status,omitempty"` // e.g. "exit status 1", "signal: killed"
	DurationMs float64 `json:"duration_ms"`
	// Truncated is set when the output exceeded the server's limit for a
	// non-streaming exec (--exec-output-max, per stream) and was cut.
	Truncated bool `json:"truncated,omitempty"`
	// Encoding is the encoding of Stdout and Stderr (ExecRequest's
	// OutputEncoding; empty for utf8).
	Encoding string `json:"encoding,omitempty"`
}

// ExecEvent types.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventPTY    = "pty" // the output of a process on a pseudo-terminal
	EventEnd    = "end"
	EventError  = "error"
)

// ExecEvent is one line of a streamed exec or attach. Data carries exact
// bytes (base64 in JSON).
type ExecEvent struct {
	Type       string  `json:"type"`
	PID        uint32  `json:"pid,omitempty"`
	Data       []byte  `json:"data,omitempty"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	Status     string  `json:"status,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// StartedProcess is the answer to a background exec.
type StartedProcess struct {
	PID uint32 `json:"pid"`
	Tag string `json:"tag,omitempty"`
}

// Process is one process the sandbox's agent started, running or ended.
type Process struct {
	PID      uint32   `json:"pid"`
	Tag      string   `json:"tag,omitempty"`
	Cmd      string   `json:"cmd"`
	Args     []string `json:"args,omitempty"`
	Running  bool     `json:"running"`
	ExitCode *int     `json:"exit_code,omitempty"`
}

// SignalRequest is the body of POST /v1/sandboxes/{id}/processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT
}

// FileInfo describes one file or directory in a sandbox.
type FileInfo struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // file, dir, symlink, other
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"` // permission bits, e.g. 0644 (420 in JSON)
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir. Missing
// parents are created.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"` // default 0755
	User string `json:"user,omitempty"`
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/files/move.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// Template is one template as the API shows it: a built-in one (Shared,
// no version: every tenant's), or a version of one of the tenant's own
// (docs/TEMPLATES.md).
type Template struct {
	Name string `json:"name"`
	// Version counts the builds of a tenant's template from 1; Ref is
	// NAME@VERSION, what pins it (NAME alone for a built-in one).
	Version int64  `json:"version,omitempty"`
	Ref     string `json:"ref"`
	Shared  bool   `json:"shared"`
	// State of a tenant's version: building, ready or failed (Error says
	// why, naming the step).
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	// Source says what it was made from: "spec", "image REF",
	// "snapshot ID"; Digest names its content; Snapshot is its disk.
	Source    string          `json:"source,omitempty"`
	Digest    string          `json:"digest,omitempty"`
	Snapshot  string          `json:"snapshot,omitempty"`
	Config    *TemplateConfig `json:"config,omitempty"`
	SizeBytes int64           `json:"size_bytes"` // apparent size of the disk image
	UsedBytes int64           `json:"used_bytes"` // bytes the image really occupies
	CreatedAt *time.Time      `json:"created_at,omitempty"`
	BuiltAt   time.Time       `json:"built_at"`
}

// Template version states.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// TemplateConfig is what a template's sandboxes start with: env under
// their own, a process's default working directory and user, and a
// service started in each, which a create waits for until Ready succeeds.
type TemplateConfig struct {
	Env                 map[string]string `json:"env,omitempty"`
	Workdir             string            `json:"workdir,omitempty"`
	User                string            `json:"user,omitempty"`
	Start               string            `json:"start,omitempty"`
	Ready               string            `json:"ready,omitempty"`
	ReadyTimeoutSeconds int64             `json:"ready_timeout_seconds,omitempty"`
}

// CreateTemplateRequest is the body of POST /v1/templates: a new version of
// the tenant's template Name, made from exactly one of a snapshot, an OCI
// image or a build spec.
type CreateTemplateRequest struct {
	Name string `json:"name"`
	// FromSnapshot promotes one of the tenant's durable snapshots.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// FromImage imports an OCI image.
	FromImage *ImageSource `json:"from_image,omitempty"`
	// Spec is a build spec: warren's YAML, or a Dockerfile when SpecFormat
	// is "dockerfile". Context is the build context its copy steps read,
	// a tar (base64 in JSON), at most MaxTemplateContext bytes.
	Spec       string `json:"spec,omitempty"`
	SpecFormat string `json:"spec_format,omitempty"`
	Context    []byte `json:"context,omitempty"`
	// Config, for a snapshot or an image, sets what the spec's env,
	// workdir, user and start would (an image's own config is under it).
	Config *TemplateConfig `json:"config,omitempty"`
	// Background answers 202 with the version, building, at once; GET
	// /v1/templates/NAME@VERSION follows it. Otherwise the answer is the
	// build's ndjson stream of TemplateBuildEvent.
	Background bool `json:"background,omitempty"`
}

// ShareTemplateRequest is the body of PUT /v1/templates/{ref}/shared (admin
// key only): the admin's version ref is published to every tenant, or
// withdrawn.
type ShareTemplateRequest struct {
	Shared bool `json:"shared"`
}

// MaxTemplateContext bounds a build's context.
const MaxTemplateContext = 64 << 20

// ImageSource names an OCI image: a registry reference, pulled by the
// node. Insecure allows plain HTTP to the registry.
type ImageSource struct {
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// TemplateBuildEvent is one line of the stream answering a build
// (POST /v1/templates, POST /v1/templates/{name}/build): progress lines,
// each naming the step it is of, then the template or an error.
type TemplateBuildEvent struct {
	Step     string    `json:"step,omitempty"`
	Progress string    `json:"progress,omitempty"`
	Template *Template `json:"template,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// RuntimeInfo describes one runtime a node offers.
type RuntimeInfo struct {
	Name      string `json:"name"`
	Isolation string `json:"isolation"` // e.g. "container (shared host kernel)"
	Available bool   `json:"available"`
	// Reason says why an unavailable runtime is unavailable.
	Reason string `json:"reason,omitempty"`
	// Accel is how the vm runtime's vCPUs run on this node: "kvm" or "tcg"
	// (software emulation; "auto" does not pick a tcg vm). Empty for a
	// container.
	Accel string `json:"accel,omitempty"`
}

// FleetNode is a node of a fleet as GET /v1/nodes lists it (admin key
// only): where it is, its state, and what it said at its last heartbeat.
type FleetNode struct {
	ID      string            `json:"id"`
	Addr    string            `json:"addr"`
	Region  string            `json:"region"`
	Cluster string            `json:"cluster"`
	Labels  map[string]string `json:"labels,omitempty"`
	// State is active, cordoned (it takes no new sandboxes), draining or
	// fenced (it lost its lease).
	State       string    `json:"state"`
	Epoch       int64     `json:"epoch"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	Sandboxes   int       `json:"sandboxes"`
	// Capacity is what the node may promise; Allocated what its sandboxes
	// hold of it.
	Capacity  Amounts  `json:"capacity"`
	Allocated Amounts  `json:"allocated"`
	Runtimes  []string `json:"runtimes"`
}

// Amounts are vCPUs, memory and disk.
type Amounts struct {
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memory_mb"`
	DiskMB   int64   `json:"disk_mb"`
}

// FleetNodeList is the answer to GET /v1/nodes.
type FleetNodeList struct {
	Nodes []FleetNode `json:"nodes"`
}

// NodeInfo is the answer to GET /v1/info.
type NodeInfo struct {
	Version       string        `json:"version"`
	Kernel        string        `json:"kernel"`
	Runtimes      []RuntimeInfo `json:"runtimes"`
	CloneMode     string        `json:"clone_mode"` // how disks are cloned: reflink, reflink (xfs loop image), copy
	CgroupVersion int           `json:"cgroup_version"`
	// BlobStore is where the node stores snapshots (never with
	// credentials); shown to an admin key only.
	BlobStore string `json:"blob_store,omitempty"`
	// Sandboxes is how many of the caller's tenant's sandboxes run on the
	// node (every tenant's for an admin key).
	Sandboxes int `json:"sandboxes"`
	// MemoryImages are the node's memory images, which vm sandboxes start
	// from instead of booting (docs/API.md, "Memory starts"); shown to an
	// admin key only.
	MemoryImages []MemoryImage `json:"memory_images,omitempty"`
}

// MemoryImage is a booted vm sandbox of a template and shape, saved, that
// vm sandboxes of that template and shape start from.
type MemoryImage struct {
	Runtime         string    `json:"runtime"` // the runtime whose sandboxes start from it: "vm" or "gvisor"
	Template        string    `json:"template"`
	TemplateBuiltAt time.Time `json:"template_built_at"`
	VCPUs           int       `json:"vcpus"`
	MemoryMB        int64     `json:"memory_mb"`
	Network         bool      `json:"network"`
	// State is "preparing", "ready" or "failed" (tried again later).
	State string `json:"state"`
	// Bytes is what its memory file takes of the node's disk (about what
	// the guest used of its memory); its disk is a clone of the
	// template's, sharing its blocks.
	Bytes int64 `json:"bytes"`
	// Starts counts the sandboxes started from it.
	Starts int64 `json:"starts"`
}

// Preview is the body of GET and PUT /v1/sandboxes/{id}/preview: how the
// sandbox's ports are reached on preview host names,
// PORT-ID.<preview domain> (docs/API.md, "Exposed ports").
type Preview struct {
	// Public lets anyone reach the sandbox's ports on its preview hosts;
	// otherwise a request needs Token.
	Public bool `json:"public"`
	// Token is the sandbox's access token: header X-Warren-Access-Token,
	// query parameter warren_token (a GET is then redirected without it and
	// the browser keeps a cookie), or that cookie. Every sandbox gets its
	// own at create and restore; rotating it makes a new one.
	Token string `json:"token"`
	// URL is the preview URL of the sandbox's ports with "{port}" in place
	// of a port, e.g. "https://{port}-sb-….preview.example.com/"; null when
	// the node serves no preview domain.
	URL *string `json:"url"`
}

// PortURL is the preview URL of the sandbox's port, without the token; ""
// when the node serves no preview domain.
func (p Preview) PortURL(port int) string {
	if p.URL == nil {
		return ""
	}
	return strings.ReplaceAll(*p.URL, "{port}", strconv.Itoa(port))
}

// SetPreviewRequest is the body of PUT /v1/sandboxes/{id}/preview.
type SetPreviewRequest struct {
	// Public makes the preview hosts public (true) or private (false);
	// absent leaves it as it is.
	Public *bool `json:"public,omitempty"`
	// RotateToken replaces the access token with a new one: the old one
	// stops working at once (cookies made from it included).
	RotateToken bool `json:"rotate_token,omitempty"`
}

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

// Snapshot states. A snapshot is pending from the moment its disk is cloned
// (the API answers then) until every chunk and its manifest are stored and
// verified in the blob store: then it is durable, and it survives the loss of
// the node. An upload that keeps failing past its retries ends failed, with
// the reason. Only durable snapshots can be restored on another node; a
// pending one can already be restored on the node that took it.
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

// Snapshot is a saved disk of a sandbox.
type Snapshot struct {
	ID        string `json:"id"`
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

// DebugVars is the answer to GET /v1/debug/vars (admin key only): the
// daemon's own resource use, for finding leaks.
type DebugVars struct {
	Goroutines     int    `json:"goroutines"`
	OpenFDs        int    `json:"open_fds"`
	HeapAllocBytes uint64 `json:"heap_alloc_bytes"`
	HeapObjects    uint64 `json:"heap_objects"`
	SysBytes       uint64 `json:"sys_bytes"` // memory obtained from the OS
	NumGC          uint32 `json:"num_gc"`
}

// Lists (docs/API.md, "Lists"). Every list answers one page: at most limit
// items (DefaultListLimit when not asked, at most MaxListLimit), in a fixed
// order, and a NextPageToken while more may follow. The token is opaque; it
// names the last item answered, not a position, so the pages of a list stay
// right while items are added or removed: none is answered twice, and every
// item that exists from the first page to the last is answered once.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// A directory listing's pages are larger, and bounded on their own.
	DefaultFileListLimit = 1000
	MaxFileListLimit     = 10000
	// DefaultLineageLimit is the page size of a lineage (at most
	// MaxListLimit).
	DefaultLineageLimit = MaxListLimit
)

// Process states, for the state filter of GET /v1/sandboxes/{id}/processes.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// SandboxList is the answer to GET /v1/sandboxes, oldest first.
type SandboxList struct {
	Sandboxes     []Sandbox `json:"sandboxes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
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

// ProcessList is the answer to GET /v1/sandboxes/{id}/processes, by pid.
type ProcessList struct {
	Processes     []Process `json:"processes"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// FileList is the answer to GET /v1/sandboxes/{id}/files/list: entries
// depth first, each directory's in byte order of their names.
type FileList struct {
	Entries       []FileInfo `json:"entries"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}

// TemplateList is the answer to GET /v1/templates, by name.
type TemplateList struct {
	Templates     []Template `json:"templates"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}

// KeyList is the answer to GET /v1/keys, oldest first.
type KeyList struct {
	Keys          []KeyInfo `json:"keys"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// PoolSpec is a warm pool of one template and runtime, as PUT
// /v1/pools/{template} sets it (admin key only; docs/API.md, "Warm
// pools"). The node keeps Min sandboxes booted ahead of demand (disk
// cloned and mounted, agent answering, network attached) and grows the
// pool toward Max while creates miss it. A create of that template and
// runtime whose resources are the pool's takes a member in one step and
// gets its identity then. Zero resources take the server's defaults, as a
// create's do.
type PoolSpec struct {
	Runtime  string  `json:"runtime,omitempty"` // "container", "gvisor" or "vm" (default: what "auto" picks)
	Min      int     `json:"min"`
	Max      int     `json:"max,omitempty"` // default Min
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	Pids     int64   `json:"pids,omitempty"`
	DiskMB   int64   `json:"disk_mb,omitempty"`
}

// Pool is a warm pool and its state, summed over the nodes that keep it.
type Pool struct {
	Template string `json:"template"`
	PoolSpec
	// Target is how many members the nodes aim to keep ready now (Min,
	// grown toward Max by misses); Ready how many are.
	Target int `json:"target"`
	Ready  int `json:"ready"`
	// Hits are creates that took a member, Misses creates that matched
	// the pool but found it empty, since the pool was set.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Nodes are the nodes that keep the pool, each with its share.
	Nodes     []PoolNode `json:"nodes,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// PoolNode is one node's share of a pool, as it last reported it.
type PoolNode struct {
	Node       string    `json:"node"`
	Target     int       `json:"target"`
	Ready      int       `json:"ready"`
	Hits       int64     `json:"hits"`
	Misses     int64     `json:"misses"`
	ReportedAt time.Time `json:"reported_at"`
	// Error says why the node cannot fill its share, if it cannot.
	Error string `json:"error,omitempty"`
}

// PoolList is the answer to GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}
