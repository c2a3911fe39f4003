package scheduler

import (
	"errors"
	"testing"
)

// Back-to-back decisions see the allocations placed before them.
func TestAllocateSteersNextDecision(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"), mk("n2", "eu", "c1"))
	req := Request{Resources: Resources{MemoryMB: 40 << 10}}
	first := place(t, v, req)
	if err := v.Allocate(first.Node, req.Resources); err != nil {
		t.Fatal(err)
	}
	second := place(t, v, req)
	if second.Node == first.Node {
		t.Fatalf("second decision on %s again, which has 24 GiB left", first.Node)
	}
	if err := v.Allocate(second.Node, req.Resources); err != nil {
		t.Fatal(err)
	}
	if _, err := Place(v, req, seeded(1)); !errors.Is(err, ErrNoFit) {
		t.Fatalf("third: got %v, want no fit", err)
	}
	if err := v.Release(first.Node, req.Resources); err != nil {
		t.Fatal(err)
	}
	if d := place(t, v, req); d.Node != first.Node {
		t.Errorf("after release: got %s, want %s", d.Node, first.Node)
	}
	if err := v.Release("n1", Resources{MemoryMB: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Allocated("n1"); got != (Resources{}) {
		t.Errorf("over-release: allocated %+v, want zero", got)
	}
	if err := checkInvariants(v); err != nil {
		t.Error(err)
	}
	if err := v.Allocate("nope", req.Resources); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("unknown node: got %v", err)
	}
}

// A report replaces what Allocate added: the node's count is the truth.
func TestUpsertReplacesAllocation(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"))
	if err := v.Allocate("n1", Resources{MemoryMB: 60 << 10}); err != nil {
		t.Fatal(err)
	}
	n := mk("n1", "eu", "c1")
	n.Allocated.MemoryMB = 1 << 10
	if err := v.Upsert(n); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Allocated("n1"); got.MemoryMB != 1<<10 {
		t.Errorf("allocated %d MB, want 1024", got.MemoryMB)
	}
	if err := checkInvariants(v); err != nil {
		t.Error(err)
	}
}

func TestRemove(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"), mk("n2", "eu", "c1"))
	hold(t, v, "n1", lineage...)
	hold(t, v, "n2", base)
	if !v.Remove("n1") || v.Remove("n1") {
		t.Fatal("Remove: want true once, then false")
	}
	if v.Holds("n1", "l0") || v.Len() != 1 {
		t.Errorf("removed node still in the view")
	}
	if _, ok := v.byLayer["l0"]; ok {
		t.Errorf("layer l0 held by nobody is still indexed")
	}
	for seed := range uint64(10) {
		if d, err := Place(v, Request{Lineage: lineage}, seeded(seed)); err != nil || d.Node != "n2" || d.FetchBytes != 300*mib {
			t.Fatalf("seed %d: got %+v, %v; want n2 fetching 300 MiB", seed, d, err)
		}
	}
	// The slot and the layer ref are reused.
	if err := v.Upsert(mk("n3", "eu", "c1")); err != nil {
		t.Fatal(err)
	}
	hold(t, v, "n3", l0)
	if len(v.nodes) != 2 || len(v.layers) != 3 {
		t.Errorf("%d slots and %d refs, want 2 and 3 (reused)", len(v.nodes), len(v.layers))
	}
	if err := checkInvariants(v); err != nil {
		t.Error(err)
	}
}

func TestLayerUpdates(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "c1"), mk("n2", "eu", "c1"))
	hold(t, v, "n1", lineage...)
	hold(t, v, "n2", l0)
	if got := v.HeldBytes("n1"); got != 700*mib {
		t.Errorf("held %d, want 700 MiB", got)
	}
	// A report of a new size changes every holder's bytes.
	hold(t, v, "n1", Layer{"l0", 50 * mib})
	if v.HeldBytes("n1") != 650*mib || v.HeldBytes("n2") != 50*mib {
		t.Errorf("after resize: held %d and %d MiB, want 650 and 50", v.HeldBytes("n1")/mib, v.HeldBytes("n2")/mib)
	}
	if !v.RemoveLayer("n1", "l0") || v.RemoveLayer("n1", "l0") || v.RemoveLayer("n1", "zz") {
		t.Error("RemoveLayer: want true once, then false; false for an unknown layer")
	}
	if v.Holds("n1", "l0") || !v.Holds("n2", "l0") {
		t.Error("RemoveLayer took the wrong holder")
	}
	if err := v.SetLayers("n1", []Layer{l0, {"x", 1}}); err != nil {
		t.Fatal(err)
	}
	if v.Holds("n1", "l1") || v.Holds("n1", "base") || !v.Holds("n1", "x") || !v.Holds("n1", "l0") {
		t.Error("SetLayers did not replace the summary")
	}
	if _, ok := v.byLayer["base"]; ok {
		t.Error("base, held by nobody now, still indexed")
	}
	for _, err := range []error{
		v.AddLayer("nope", l0), v.AddLayer("n1", Layer{"", 1}), v.AddLayer("n1", Layer{"a", -1}),
		v.SetLayers("nope", nil), v.SetLayers("n1", []Layer{{"", 1}}),
	} {
		if err == nil {
			t.Error("invalid layer update accepted")
		}
	}
	if err := checkInvariants(v); err != nil {
		t.Error(err)
	}
}

// A node that reports another cluster moves, with its layers in the index.
// Regression: a layer only the moving node held was freed from the index
// on the way out and held again under a recycled, nameless entry.
func TestUpsertMovesCluster(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "a"), mk("n2", "eu", "a"))
	hold(t, v, "n1", lineage...)
	hold(t, v, "n1", Layer{"only", mib})
	hold(t, v, "n2", lineage...)
	if err := v.Upsert(mk("n1", "eu", "b")); err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(v); err != nil {
		t.Fatal(err)
	}
	if !v.Holds("n1", "only") {
		t.Error("the moved node lost a layer only it held")
	}
	v.Remove("n2")
	if d := place(t, v, Request{Lineage: lineage}); d.Node != "n1" || d.Cluster != "b" || d.FetchBytes != 0 {
		t.Errorf("got %+v, want n1 in b fetching nothing", d)
	}
}

// Health and draining move a node out of its cluster's aggregates and back.
func TestHealthChangesAggregates(t *testing.T) {
	v := newView(t, exact, mk("n1", "eu", "a"))
	down := mk("n1", "eu", "a")
	down.Healthy = false
	for _, n := range []Node{down, mk("n1", "eu", "a"), func() Node { n := mk("n1", "eu", "a"); n.Draining = true; return n }()} {
		if err := v.Upsert(n); err != nil {
			t.Fatal(err)
		}
		if err := v.Allocate("n1", small()); err != nil {
			t.Fatal(err)
		}
		if err := checkInvariants(v); err != nil {
			t.Fatal(err)
		}
	}
	if v.clusters[0].nodesA != 0 {
		t.Errorf("a draining node counted as accepting")
	}
}

func TestUpsertValidates(t *testing.T) {
	v := NewView(exact)
	bad := []Node{{ID: "", Region: "eu", Cluster: "a"}, {ID: "n", Cluster: "a"}, {ID: "n", Region: "eu"},
		{ID: "n", Region: "eu", Cluster: "a", Capacity: Resources{MemoryMB: -1}}}
	for _, n := range bad {
		if err := v.Upsert(n); err == nil {
			t.Errorf("%+v accepted", n)
		}
	}
	if v.Len() != 0 {
		t.Errorf("%d nodes after invalid reports", v.Len())
	}
}
