package main

import (
	"fmt"
	"math/rand/v2"

	"warren/internal/scheduler"
)

// The fleet: regions of clusters of about clusterSize nodes, each node one
// of three types. Memory is what binds (vCPUs and disk are overcommitted
// 32× and 4×, as the node's admission does); the layer cache is a part of
// the node's disk kept for materialized layers, and the download
// bandwidth is the node's share of the blob store.
type nodeType struct {
	name      string
	weight    float64
	capacity  scheduler.Resources
	cacheGiB  int64
	bandwidth float64 // bytes per second from the blob store
}

var nodeTypes = []nodeType{
	{"small", 0.3, scheduler.Resources{MilliCPUs: 16000, MemoryMB: 64 << 10, DiskMB: 1 << 20}, 48, 1.25e9},
	{"medium", 0.5, scheduler.Resources{MilliCPUs: 32000, MemoryMB: 128 << 10, DiskMB: 2 << 20}, 96, 2.5e9},
	{"large", 0.2, scheduler.Resources{MilliCPUs: 64000, MemoryMB: 256 << 10, DiskMB: 4 << 20}, 192, 2.5e9},
}

// cpuModels: a memory snapshot resumes only on a CPU with every flag of
// the one it was taken on (and the same model).
var cpuModels = []scheduler.CPU{
	{Model: "epyc-milan", Flags: []string{"avx2", "sha_ni", "vaes"}},
	{Model: "epyc-genoa", Flags: []string{"avx2", "avx512f", "sha_ni", "vaes"}},
	{Model: "xeon-icelake", Flags: []string{"avx2", "avx512f", "sha_ni", "vaes"}},
}

const (
	clusterSize   = 500
	maxRegions    = 4
	batchPool     = "batch" // the label a few tasks ask for: pool=batch
	batchShare    = 0.1     // of the nodes labelled pool=batch
	containerOnly = 0.15    // of the nodes without the vm runtime (no KVM)
)

type simNode struct {
	report    scheduler.Node // what it reports when it (re)joins
	bandwidth float64
	cpu       int
	up        bool
	sandboxes []int32 // its live sandboxes; each knows its position here
	cache     lru
}

type fleet struct {
	nodes    []simNode
	regions  []string
	clusters int
}

func newFleet(n int, rng *rand.Rand) *fleet {
	clusters := max(1, (n+clusterSize/2)/clusterSize)
	f := &fleet{clusters: clusters}
	for r := range min(maxRegions, clusters) {
		f.regions = append(f.regions, fmt.Sprintf("region-%d", r))
	}
	for i := range n {
		t := pickType(rng)
		c := i % clusters
		cpu := rng.IntN(len(cpuModels))
		rep := scheduler.Node{
			ID:       fmt.Sprintf("node-%05d", i),
			Region:   f.regions[c%len(f.regions)],
			Cluster:  fmt.Sprintf("cluster-%02d", c),
			Capacity: t.capacity,
			Healthy:  true,
			Runtimes: []scheduler.Runtime{{Name: "container", Isolation: scheduler.IsolationContainer}},
			CPU:      cpuModels[cpu],
		}
		if rng.Float64() >= containerOnly {
			rep.Runtimes = append(rep.Runtimes, scheduler.Runtime{Name: "vm", Isolation: scheduler.IsolationVM, Accel: "kvm"})
		}
		if rng.Float64() < batchShare {
			rep.Labels = map[string]string{"pool": batchPool}
		}
		f.nodes = append(f.nodes, simNode{report: rep, bandwidth: t.bandwidth, cpu: cpu, up: true, cache: newLRU(t.cacheGiB << 30)})
	}
	return f
}

func pickType(rng *rand.Rand) nodeType {
	u := rng.Float64()
	for _, t := range nodeTypes {
		if u < t.weight {
			return t
		}
		u -= t.weight
	}
	return nodeTypes[len(nodeTypes)-1]
}

// memoryMB is the fleet's memory after overcommit: what sandboxes may hold.
func (f *fleet) memoryMB(overcommit float64) float64 {
	var m float64
	for i := range f.nodes {
		m += float64(f.nodes[i].report.Capacity.MemoryMB) * overcommit
	}
	return m
}
