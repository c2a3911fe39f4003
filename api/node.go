package api

import (
	"time"
)

// Isolation levels a runtime offers, weakest first.
const (
	IsolationContainer = "container" // namespaces, cgroups, seccomp: the host kernel is shared
	IsolationGVisor    = "gvisor"    // a user-space kernel (gVisor's Sentry) between the sandbox and the host kernel
	IsolationVM        = "vm"        // hardware virtualization: a guest kernel of its own
)

// Node actions: POST /v1/nodes/{id}/{action}.
const (
	NodeCordon   = "cordon"   // take no new sandboxes; keep those it runs
	NodeUncordon = "uncordon" // take new sandboxes again
	NodeDrain    = "drain"    // take none, and move those it runs away
)

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
