package api

import (
	"time"
)

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
