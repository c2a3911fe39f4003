package scheduler

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

const mib = 1 << 20

// lineage: l0 (nearest, 100 MiB), l1 (200 MiB), base (400 MiB).
var (
	l0, l1, base = Layer{"l0", 100 * mib}, Layer{"l1", 200 * mib}, Layer{"base", 400 * mib}
	lineage      = []Layer{l0, l1, base}
)

// A node fetches the layers nearer than the nearest one it holds; one held
// further up, behind a missing one, saves nothing.
func TestFetchBytes(t *testing.T) {
	tests := []struct {
		held []Layer
		want int64
	}{
		{nil, 700 * mib},
		{[]Layer{base}, 300 * mib},
		{[]Layer{l1}, 100 * mib},
		{[]Layer{l1, base}, 100 * mib},
		{[]Layer{l0}, 0},
		{[]Layer{l0, base}, 0},
		{[]Layer{{"other", 5}}, 700 * mib},
	}
	for _, tt := range tests {
		v := newView(t, exact, mk("n1", "eu", "c1"))
		hold(t, v, "n1", tt.held...)
		if d := place(t, v, Request{Lineage: lineage}); d.FetchBytes != tt.want {
			t.Errorf("holding %v: fetch %d MiB, want %d MiB", tt.held, d.FetchBytes/mib, tt.want/mib)
		}
	}
}

// The cost is LocalityWeight × GiB fetched + LoadWeight × load/(1 − load),
// load the dominant share with the request.
func TestScore(t *testing.T) {
	req := Request{Resources: Resources{MemoryMB: 16 << 10}, Lineage: lineage}
	loaded, idle := mk("loaded", "eu", "c1"), mk("idle", "eu", "c1")
	loaded.Allocated.MemoryMB = 32 << 10 // half full; three quarters with the request

	t.Run("locality wins at equal load", func(t *testing.T) {
		v := newView(t, exact, mk("a", "eu", "c1"), mk("b", "eu", "c1"))
		hold(t, v, "b", lineage...)
		if d := place(t, v, req); d.Node != "b" || d.FetchBytes != 0 {
			t.Errorf("got %+v, want b fetching nothing", d)
		}
	})
	t.Run("load outweighs a small fetch", func(t *testing.T) {
		// loaded: 0 + 0.75/0.25 = 3; idle: 700/1024 + 0.25/0.75 ≈ 1.02.
		v := newView(t, exact, loaded, idle)
		hold(t, v, "loaded", lineage...)
		d := place(t, v, req)
		want := 700.0/1024 + 0.25/0.75
		if d.Node != "idle" || math.Abs(d.Cost-want) > 1e-9 || d.Load != 0.25 {
			t.Errorf("got %+v, want idle at cost %v", d, want)
		}
	})
	t.Run("a large fetch outweighs load", func(t *testing.T) {
		// loaded: 3; idle: 4 + 400/1024 + 1/3 ≈ 4.72.
		big := []Layer{{"deep", 4 << 30}, base}
		v := newView(t, exact, loaded, idle)
		hold(t, v, "loaded", big...)
		d := place(t, v, Request{Resources: req.Resources, Lineage: big})
		if d.Node != "loaded" || d.Cost != 3 {
			t.Errorf("got %+v, want loaded at cost 3", d)
		}
	})
	t.Run("weights", func(t *testing.T) {
		// LoadWeight 0.1: loaded 0.3, idle 0.68 + 0.03.
		v := newView(t, Config{Overcommit: exact.Overcommit, LoadWeight: 0.1}, loaded, idle)
		hold(t, v, "loaded", lineage...)
		if d := place(t, v, req); d.Node != "loaded" {
			t.Errorf("got %s, want loaded", d.Node)
		}
	})
	t.Run("reported load", func(t *testing.T) {
		busy := mk("busy", "eu", "c1")
		busy.Load = 0.9
		v := newView(t, exact, busy, mk("calm", "eu", "c1"))
		hold(t, v, "busy", l0)
		hold(t, v, "calm", l0)
		if d := place(t, v, req); d.Node != "calm" || d.Load != 0.25 {
			t.Errorf("got %+v, want calm at load 0.25", d)
		}
	})
}

func TestTieBreaks(t *testing.T) {
	t.Run("node ID", func(t *testing.T) {
		v := newView(t, exact, mk("n2", "eu", "c1"), mk("n1", "eu", "c1"), mk("n3", "eu", "c1"))
		for seed := range uint64(20) {
			if d, err := Place(v, Request{Resources: small()}, seeded(seed)); err != nil || d.Node != "n1" {
				t.Fatalf("seed %d: got %q, %v; want n1", seed, d.Node, err)
			}
		}
	})
	t.Run("fewer bytes at equal cost", func(t *testing.T) {
		// Least-loaded ignores locality, then breaks the tie by it.
		v := newView(t, Config{Overcommit: exact.Overcommit, Policy: PolicyLeastLoaded}, mk("a", "eu", "c1"), mk("b", "eu", "c1"))
		hold(t, v, "b", l1)
		for seed := range uint64(20) {
			if d, err := Place(v, Request{Lineage: lineage}, seeded(seed)); err != nil || d.Node != "b" || d.FetchBytes != 100*mib {
				t.Fatalf("seed %d: got %+v, %v; want b fetching 100 MiB", seed, d, err)
			}
		}
	})
}

func TestPolicies(t *testing.T) {
	half := mk("half", "eu", "c1")
	half.Allocated.MemoryMB = 32 << 10
	nodes := []Node{half, mk("empty", "eu", "c1")}
	req := Request{Resources: small(), Lineage: lineage}

	v := newView(t, Config{Overcommit: exact.Overcommit, Policy: PolicyLeastLoaded}, nodes...)
	hold(t, v, "half", lineage...)
	if d := place(t, v, req); d.Node != "empty" || d.FetchBytes != 700*mib {
		t.Errorf("least-loaded: got %+v, want empty fetching 700 MiB", d)
	}

	v = newView(t, Config{Overcommit: exact.Overcommit, Policy: PolicyRandom}, append(nodes, func() Node { n := mk("down", "eu", "c1"); n.Healthy = false; return n }())...)
	hold(t, v, "half", lineage...)
	seen := map[string]int{}
	for seed := range uint64(200) {
		d, err := Place(v, req, seeded(seed))
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Node]++
		if want := map[string]int64{"half": 0, "empty": 700 * mib}[d.Node]; d.FetchBytes != want {
			t.Errorf("random: %s fetches %d, want %d", d.Node, d.FetchBytes, want)
		}
	}
	if seen["half"] < 50 || seen["empty"] < 50 || seen["down"] > 0 {
		t.Errorf("random over 200 seeds: %v, want both feasible nodes often, never down", seen)
	}
}

// The index finds the few holders of a lineage among many nodes, which K
// random draws would almost always miss, and forks spread over them as
// each fills up.
func TestIndexCandidates(t *testing.T) {
	v := NewView(exact)
	for i := range 500 {
		if err := v.Upsert(mk(fmt.Sprintf("n%03d", i), "eu", "c1")); err != nil {
			t.Fatal(err)
		}
	}
	holders := map[string]bool{"n017": true, "n123": true, "n444": true}
	for id := range holders {
		hold(t, v, id, l0)
	}
	req := Request{Resources: Resources{MemoryMB: 64 << 10}, Lineage: lineage} // fills a node
	rng := seeded(7)
	for i := range 4 {
		d, err := Place(v, req, rng)
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 && (!holders[d.Node] || d.FetchBytes != 0) {
			t.Fatalf("fork %d: got %+v, want a holder fetching nothing", i, d)
		}
		if i == 3 && (holders[d.Node] || d.FetchBytes != 700*mib) {
			t.Fatalf("fork 3: got %+v, want a non-holder (all holders full)", d)
		}
		delete(holders, d.Node)
		if err := v.Allocate(d.Node, req.Resources); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClusterChoice(t *testing.T) {
	in := func(id, region, cluster string, alloc int64) Node {
		n := mk(id, region, cluster)
		n.Allocated.MemoryMB = alloc
		return n
	}
	req := Request{Resources: Resources{MemoryMB: 8 << 10}, Lineage: lineage}
	t.Run("region", func(t *testing.T) {
		v := newView(t, exact, in("us1", "us", "c1", 0), in("eu1", "eu", "c1", 48<<10))
		hold(t, v, "us1", lineage...)
		r := req
		r.Region = "eu"
		if d := place(t, v, r); d.Node != "eu1" || d.Region != "eu" || d.Cluster != "c1" {
			t.Errorf("got %+v, want eu1 in eu/c1", d)
		}
	})
	t.Run("locality", func(t *testing.T) {
		v := newView(t, exact, in("a1", "eu", "a", 0), in("b1", "eu", "b", 16<<10))
		hold(t, v, "b1", l0)
		if d := place(t, v, req); d.Cluster != "b" {
			t.Errorf("got %+v, want cluster b (it holds the lineage)", d)
		}
	})
	t.Run("least loaded at equal locality", func(t *testing.T) {
		v := newView(t, exact, in("a1", "eu", "a", 40<<10), in("a2", "eu", "a", 0), in("b1", "eu", "b", 8<<10), in("b2", "eu", "b", 8<<10))
		if d := place(t, v, req); d.Cluster != "b" {
			t.Errorf("got %+v, want cluster b (20%% loaded against 31%%)", d)
		}
	})
	t.Run("no room in aggregate", func(t *testing.T) {
		v := newView(t, exact, in("a1", "eu", "a", 60<<10), in("b1", "eu", "b", 0))
		hold(t, v, "a1", lineage...)
		if d := place(t, v, req); d.Node != "b1" {
			t.Errorf("got %+v, want b1", d)
		}
	})
	t.Run("falls through when no node of the best cluster fits", func(t *testing.T) {
		a1, a2, b1 := in("a1", "eu", "a", 0), in("a2", "eu", "a", 0), in("b1", "eu", "b", 0)
		b1.Labels = map[string]string{"pool": "batch"}
		v := newView(t, exact, a1, a2, b1)
		hold(t, v, "a1", lineage...)
		r := req
		r.Labels = b1.Labels
		if d := place(t, v, r); d.Node != "b1" {
			t.Errorf("got %+v, want b1 (the only labelled node)", d)
		}
	})
	t.Run("the next cluster's estimate beats the best node found", func(t *testing.T) {
		// Cluster a holds the lineage and is idle in aggregate, but its
		// one labelled node is nearly full; b's labelled node is idle.
		a1, a2, a3, b1, b2 := in("a1", "eu", "a", 52<<10), in("a2", "eu", "a", 0), in("a3", "eu", "a", 0), in("b1", "eu", "b", 0), in("b2", "eu", "b", 40<<10)
		a1.Labels, b1.Labels = map[string]string{"pool": "batch"}, map[string]string{"pool": "batch"}
		v := newView(t, exact, a1, a2, a3, b1, b2)
		hold(t, v, "a1", lineage...)
		r := req
		r.Labels = a1.Labels
		if d := place(t, v, r); d.Node != "b1" || d.Scored != 2 {
			t.Errorf("got %+v, want b1 after scoring a1 too", d)
		}
	})
	t.Run("fragmented: aggregate fits, no single node does", func(t *testing.T) {
		v := newView(t, exact, in("a1", "eu", "a", 60<<10), in("a2", "eu", "a", 60<<10))
		_, err := Place(v, req, seeded(1))
		var nf *NoFitError
		if !errors.As(err, &nf) || nf.Filter != FilterMemory {
			t.Errorf("got %v, want no fit on memory", err)
		}
	})
}

// A decision is a function of the view, the request and the seed.
func TestDeterministic(t *testing.T) {
	run := func() []Decision {
		v := NewView(Config{})
		for i := range 300 {
			n := mk(fmt.Sprintf("n%d", i), fmt.Sprintf("r%d", i%3), fmt.Sprintf("c%d", i%7))
			if err := v.Upsert(n); err != nil {
				t.Fatal(err)
			}
			if i%5 == 0 {
				hold(t, v, n.ID, base)
			}
		}
		rng := seeded(42)
		var out []Decision
		for range 200 {
			d, err := Place(v, Request{Resources: small(), Lineage: lineage}, rng)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Allocate(d.Node, small()); err != nil {
				t.Fatal(err)
			}
			hold(t, v, d.Node, lineage...)
			out = append(out, d)
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d: %+v then %+v", i, a[i], b[i])
		}
	}
}
