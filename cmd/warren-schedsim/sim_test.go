package main

import (
	"bytes"
	"strings"
	"testing"

	"warren/internal/scheduler"
)

func smallRun() options {
	return options{nodes: 200, sandboxes: 5000, seed: 1, util: 0.6, failures: 0.05, recoverAfter: 0.05}
}

// The simulation keeps its direction: locality downloads well under what
// least-loaded and random do, every arrival is placed or refused, a failed
// node's sandboxes are placed again (locality packs sandboxes onto fewer
// nodes, so a random failure may strand none), and the scheduler's
// expected fetch is exactly what the node's cache then fetched.
func TestSimulationSmall(t *testing.T) {
	o := smallRun()
	ps := []scheduler.Policy{scheduler.PolicyLocality, scheduler.PolicyLeastLoaded, scheduler.PolicyRandom}
	ms, f, err := simulate(o, ps)
	if err != nil {
		t.Fatal(err)
	}
	stranded := 0
	for _, m := range ms {
		if m.placedNew+m.refusedNew != o.sandboxes {
			t.Errorf("%v: %d placed + %d refused, want %d", m.policy, m.placedNew, m.refusedNew, o.sandboxes)
		}
		if m.refusedNew > o.sandboxes/100 {
			t.Errorf("%v: %d refused of %d at 60%% memory", m.policy, m.refusedNew, o.sandboxes)
		}
		if m.failures == 0 || m.placedAgain+m.refusedAgain != m.stranded {
			t.Errorf("%v: %d failures stranded %d sandboxes, %d re-placed and %d refused: want failures, each sandbox re-placed or refused",
				m.policy, m.failures, m.stranded, m.placedAgain, m.refusedAgain)
		}
		stranded += m.stranded
		if m.mismatches != 0 {
			t.Errorf("%v: %d decisions expected another fetch than the node made", m.policy, m.mismatches)
		}
		if len(m.decisions) != m.placedNew+m.refusedNew+m.placedAgain+m.refusedAgain {
			t.Errorf("%v: %d decisions timed, %d made", m.policy, len(m.decisions), m.placedNew+m.refusedNew+m.placedAgain+m.refusedAgain)
		}
	}
	if stranded == 0 {
		t.Error("no failure stranded a sandbox")
	}
	loc, ll, rnd := ms[0], ms[1], ms[2]
	if r := float64(loc.bytes) / float64(ll.bytes); r > 0.35 {
		t.Errorf("locality downloaded %.0f%% of least-loaded's, want well under (≤ 35%% at this size)", 100*r)
	}
	if loc.bytes >= rnd.bytes {
		t.Errorf("locality downloaded %d, random %d", loc.bytes, rnd.bytes)
	}
	if loc.summarize().latP99 >= ll.summarize().latP99 {
		t.Errorf("locality's restore p99 %v, least-loaded's %v", loc.summarize().latP99, ll.summarize().latP99)
	}
	var out bytes.Buffer
	report(&out, o, f, ms)
	for _, want := range []string{"locality", "least-loaded", "random", "goal: decision p99 < 1 ms", "goal: locality downloads"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// The same seed gives the same run.
func TestSimulationDeterministic(t *testing.T) {
	o := smallRun()
	o.sandboxes = 2000
	a, _, err := run(o, scheduler.PolicyLocality)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := run(o, scheduler.PolicyLocality)
	if err != nil {
		t.Fatal(err)
	}
	if a.bytes != b.bytes || a.placedAgain != b.placedAgain || a.failures != b.failures {
		t.Errorf("two runs of seed 1: %d/%d/%d and %d/%d/%d bytes/re-placed/failures", a.bytes, a.placedAgain, a.failures, b.bytes, b.placedAgain, b.failures)
	}
}

// Lineages are 1 to 50 layers over few roots, sized as documented.
func TestWorkloadShape(t *testing.T) {
	g := newWorkload(3, []string{"r0", "r1"}, 400, 1000) // 20 tasks
	roots, deepest := map[int32]bool{}, 0
	var lin []int32
	for now := range int64(20000) {
		a := g.next(now)
		lin = g.lineage(a.source, lin[:0])
		if len(lin) < 1 || len(lin) > 50 {
			t.Fatalf("lineage of %d layers", len(lin))
		}
		deepest = max(deepest, len(lin))
		roots[lin[len(lin)-1]] = true
		if a.child >= 0 {
			if s := g.layers[a.child].size; s <= 0 || s > setupCap || s%4096 != 0 {
				t.Fatalf("layer of %d bytes", s)
			}
			g.taken(a) // at once: the tree grows as fast as it can
		}
	}
	if len(roots) > len(templateMiB) || deepest < 40 {
		t.Errorf("%d roots, deepest lineage %d: want at most %d roots, and deep lineages", len(roots), deepest, len(templateMiB))
	}
}

func TestLRU(t *testing.T) {
	var p entryPool
	sizes := map[int32]int64{1: 40, 2: 30, 3: 20, 4: 50}
	size := func(l int32) int64 { return sizes[l] }
	var evicted []int32
	ev := func(l int32) { evicted = append(evicted, l) }
	c := newLRU(100)
	c.insert(&p, 1, size, ev)
	c.insert(&p, 2, size, ev)
	c.insert(&p, 3, size, ev) // 90
	c.touch(&p, 1)            // order, oldest first: 2 3 1
	c.insert(&p, 4, size, ev) // 140: out go 2 (110), then 3 (90)
	if len(evicted) != 2 || evicted[0] != 2 || evicted[1] != 3 {
		t.Fatalf("evicted %v, want [2 3]", evicted)
	}
	if !c.holds(1) || !c.holds(4) || c.holds(2) || c.bytes != 90 {
		t.Errorf("holds 1:%v 4:%v 2:%v, %d bytes; want 1 and 4, 90 bytes", c.holds(1), c.holds(4), c.holds(2), c.bytes)
	}
	// A layer larger than the cache evicts everything else, not itself.
	sizes[5] = 500
	c.insert(&p, 5, size, ev)
	if !c.holds(5) || c.holds(1) || c.holds(4) {
		t.Errorf("after a huge layer: holds 5:%v 1:%v 4:%v", c.holds(5), c.holds(1), c.holds(4))
	}
	c.clear(&p)
	if c.holds(5) || c.bytes != 0 || c.head != -1 || len(p.free) != len(p.ents) {
		t.Errorf("after clear: %d bytes, %d of %d entries free", c.bytes, len(p.free), len(p.ents))
	}
}
