package scheduler

import (
	"errors"
	"strings"
	"testing"
)

// Each filter, alone: with a node that fails it beside one that passes,
// Place takes the one that passes, whatever the seed; with the failing
// node alone, the error names the filter.
func TestFilters(t *testing.T) {
	snap := &CPU{Model: "epyc", Flags: []string{"avx2"}}
	labelled := func(n Node) Node { n.Labels = map[string]string{"pool": "batch"}; return n }
	tests := []struct {
		name string
		bad  func(*Node)
		req  func(*Request)
		want Filter
	}{
		{"region", func(n *Node) { n.Region = "us" }, func(r *Request) { r.Region = "eu" }, FilterRegion},
		{"unhealthy", func(n *Node) { n.Healthy = false }, nil, FilterHealth},
		{"draining", func(n *Node) { n.Draining = true }, nil, FilterHealth},
		{"runtime", func(n *Node) { n.Runtimes = n.Runtimes[1:] }, func(r *Request) { r.Runtime = "vm" }, FilterRuntime},
		{"isolation", func(n *Node) { n.Runtimes = n.Runtimes[1:] }, func(r *Request) { r.Isolation = IsolationVM }, FilterRuntime},
		{"accel", func(n *Node) { n.Runtimes = []Runtime{{Name: "vm", Isolation: IsolationVM, Accel: "tcg"}} }, func(r *Request) { r.Accel = "kvm" }, FilterRuntime},
		{"cpu model", func(n *Node) { n.CPU.Model = "xeon" }, func(r *Request) { r.MemorySnapshot = snap }, FilterCPU},
		{"cpu flag", func(n *Node) { n.CPU.Flags = []string{"sse4_2"} }, func(r *Request) { r.MemorySnapshot = snap }, FilterCPU},
		{"label missing", func(n *Node) { n.Labels = nil }, func(r *Request) { r.Labels = map[string]string{"pool": "batch"} }, FilterLabels},
		{"label value", func(n *Node) { n.Labels = map[string]string{"pool": "web"} }, func(r *Request) { r.Labels = map[string]string{"pool": "batch"} }, FilterLabels},
		{"vcpus", func(n *Node) { n.Allocated.MilliCPUs = cpus(15.5) }, nil, FilterCPUs},
		{"memory", func(n *Node) { n.Allocated.MemoryMB = 64<<10 - 1000 }, nil, FilterMemory},
		{"disk", func(n *Node) { n.Allocated.DiskMB = 1<<20 - 1 }, nil, FilterDisk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := labelled(mk("good", "eu", "c1"))
			bad := labelled(mk("bad", "eu", "c1"))
			tt.bad(&bad)
			req := Request{Resources: small()}
			if tt.req != nil {
				tt.req(&req)
			}
			v := newView(t, exact, good, bad)
			for seed := range uint64(20) {
				d, err := Place(v, req, seeded(seed))
				if err != nil || d.Node != "good" {
					t.Fatalf("seed %d: got %q, %v; want good", seed, d.Node, err)
				}
			}
			_, err := Place(newView(t, exact, bad), req, seeded(1))
			var nf *NoFitError
			if !errors.As(err, &nf) || !errors.Is(err, ErrNoFit) {
				t.Fatalf("alone: got %v, want a NoFitError", err)
			}
			if nf.Filter != tt.want {
				t.Errorf("alone: filter %v, want %v (%v)", nf.Filter, tt.want, err)
			}
		})
	}
}

// A CPU with more flags than the snapshot's is compatible; a snapshot
// naming no model accepts any; a disk-only restore ignores the CPU.
func TestCPUCompatibility(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"))
	for _, m := range []*CPU{nil, {Model: "epyc"}, {Flags: []string{"avx2", "sse4_2"}}, {Model: "epyc", Flags: []string{"sse4_2"}}} {
		if _, err := Place(v, Request{MemorySnapshot: m}, seeded(1)); err != nil {
			t.Errorf("snapshot CPU %+v: %v", m, err)
		}
	}
	for _, m := range []*CPU{{Model: "xeon"}, {Flags: []string{"avx512f"}}} {
		if _, err := Place(v, Request{MemorySnapshot: m}, seeded(1)); !errors.Is(err, ErrNoFit) {
			t.Errorf("snapshot CPU %+v: got %v, want no fit", m, err)
		}
	}
}

// TestAvoid: a request that avoids a node is placed on another, and on
// none when that is the only one, saying so.
func TestAvoid(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"), mk("n2", "eu", "c1"))
	for i := range 20 {
		d, err := Place(v, Request{Avoid: "n1"}, seeded(uint64(i)))
		if err != nil || d.Node != "n2" {
			t.Fatalf("avoiding n1: %+v %v, want n2", d, err)
		}
	}
	one := newView(t, exact, mk("n1", "eu", "c1"))
	_, err := Place(one, Request{Avoid: "n1"}, seeded(1))
	var nf *NoFitError
	if !errors.As(err, &nf) || nf.Filter != FilterAvoid || !strings.Contains(err.Error(), "other than n1") {
		t.Errorf("avoiding the only node: %v, want no fit at the avoid filter", err)
	}
}

func TestOvercommit(t *testing.T) {
	cfg := Config{Overcommit: Overcommit{CPU: 2, Memory: 1.5, Disk: 0.5}}
	v := newView(t, cfg, mk("n1", "eu", "c1")) // 16 vCPUs, 64 GiB, 1 TiB
	tests := []struct {
		r    Resources
		want Filter
	}{
		{Resources{MilliCPUs: cpus(32), MemoryMB: 96 << 10, DiskMB: 512 << 10}, FilterNone},
		{Resources{MilliCPUs: cpus(32) + 1}, FilterCPUs},
		{Resources{MemoryMB: 96<<10 + 1}, FilterMemory},
		{Resources{DiskMB: 512<<10 + 1}, FilterDisk},
	}
	for _, tt := range tests {
		_, err := Place(v, Request{Resources: tt.r}, seeded(1))
		var nf *NoFitError
		switch {
		case tt.want == FilterNone && err != nil:
			t.Errorf("%+v: %v, want a fit", tt.r, err)
		case tt.want != FilterNone && (!errors.As(err, &nf) || nf.Filter != tt.want):
			t.Errorf("%+v: got %v, want filter %v", tt.r, err, tt.want)
		}
	}
	// Zero ratios take the node's admission defaults: 32 × 16 vCPUs.
	v = newView(t, Config{}, mk("n1", "eu", "c1"))
	if got := v.Config().Overcommit; got != DefaultOvercommit {
		t.Errorf("default overcommit %+v, want %+v", got, DefaultOvercommit)
	}
	if _, err := Place(v, Request{Resources: Resources{MilliCPUs: cpus(512)}}, seeded(1)); err != nil {
		t.Errorf("512 vCPUs on 16 at 32×: %v", err)
	}
}

// The error names the filter after which no node was left, counts what
// each filter removed, and reads as a sentence an operator can act on.
func TestNoFitMessages(t *testing.T) {
	eu := func(id string) Node { return mk(id, "eu-west", "c1") }
	down, full := eu("down"), eu("full")
	down.Healthy = false
	full.Allocated.MilliCPUs = cpus(10)
	unlabelled := eu("unlabelled")
	labelled := full
	labelled.ID, labelled.Labels = "labelled", map[string]string{"pool": "batch", "zone": "a"}

	tests := []struct {
		name    string
		nodes   []Node
		req     Request
		want    string
		removed map[Filter]int
	}{
		{"vcpus", []Node{down, unlabelled, labelled}, Request{Region: "eu-west", Labels: map[string]string{"pool": "batch"}, Resources: Resources{MilliCPUs: cpus(8)}},
			"scheduler: no node in region eu-west has 8 vCPUs free (1 passed the filters before)",
			map[Filter]int{FilterHealth: 1, FilterLabels: 1, FilterCPUs: 1}},
		{"fractional vcpus", []Node{full}, Request{Resources: Resources{MilliCPUs: cpus(6.5)}},
			"scheduler: no node in any region has 6.5 vCPUs free (1 passed the filters before)", map[Filter]int{FilterCPUs: 1}},
		{"unknown region", []Node{full}, Request{Region: "mars"}, "scheduler: no node in region mars", map[Filter]int{}},
		{"health", []Node{down}, Request{Region: "eu-west"},
			"scheduler: no node in region eu-west is healthy and accepting sandboxes (1 down, draining or cordoned)", map[Filter]int{FilterHealth: 1}},
		{"runtime", []Node{func() Node { n := eu("c"); n.Runtimes = n.Runtimes[1:]; return n }()}, Request{Runtime: "vm", Isolation: IsolationVM, Accel: "kvm"},
			"scheduler: no node in any region has runtime vm with isolation vm and accel kvm (1 passed the filters before)", map[Filter]int{FilterRuntime: 1}},
		{"cpu", []Node{full}, Request{MemorySnapshot: &CPU{Model: "xeon", Flags: []string{"avx512f"}}},
			"scheduler: no node in any region has a CPU compatible with the memory snapshot's (xeon, flags avx512f) (1 passed the filters before)", map[Filter]int{FilterCPU: 1}},
		{"labels", []Node{unlabelled}, Request{Labels: map[string]string{"zone": "a", "pool": "batch"}},
			"scheduler: no node in any region has labels pool=batch,zone=a (1 passed the filters before)", map[Filter]int{FilterLabels: 1}},
		{"memory", []Node{full}, Request{Resources: Resources{MemoryMB: 64<<10 + 1}},
			"scheduler: no node in any region has 65537 MB of memory free (1 passed the filters before)", map[Filter]int{FilterMemory: 1}},
		{"disk", []Node{full}, Request{Resources: Resources{DiskMB: 2 << 20}},
			"scheduler: no node in any region has 2097152 MB of disk free (1 passed the filters before)", map[Filter]int{FilterDisk: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Place(newView(t, exact, tt.nodes...), tt.req, seeded(1))
			var nf *NoFitError
			if !errors.As(err, &nf) {
				t.Fatalf("got %v, want a NoFitError", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			for f := FilterRegion; f < numFilters; f++ {
				if nf.Removed[f] != tt.removed[f] {
					t.Errorf("removed by %v: %d, want %d", f, nf.Removed[f], tt.removed[f])
				}
			}
		})
	}
}

func TestInvalidRequest(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"))
	for _, req := range []Request{
		{Resources: Resources{MemoryMB: -1}},
		{Lineage: []Layer{{ID: "", Size: 1}}},
		{Lineage: []Layer{{ID: "l", Size: -1}}},
	} {
		if _, err := Place(v, req, seeded(1)); err == nil || errors.Is(err, ErrNoFit) {
			t.Errorf("%+v: got %v, want an invalid request", req, err)
		}
	}
}
