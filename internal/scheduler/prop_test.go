package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// A random fleet under random reports, placements, layer changes and
// failures: every decision passes every filter and reports the fetch a
// brute force computes; a refusal happens only when no node is feasible,
// and names the filter a brute force finds emptied the field; the
// incremental index and aggregates match a recomputation after each step.
func TestPlaceProperties(t *testing.T) {
	for seed := range uint64(60) {
		for _, p := range []Policy{PolicyLocality, PolicyLeastLoaded, PolicyRandom} {
			if err := churn(seed, p, 40); err != nil {
				t.Fatalf("seed %d, %v: %v", seed, p, err)
			}
		}
	}
}

func FuzzPlace(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint8(30))
	f.Add(uint64(99), uint8(2), uint8(200))
	f.Fuzz(func(t *testing.T, seed uint64, policy, steps uint8) {
		if err := churn(seed, Policy(policy%3), int(steps)); err != nil {
			t.Fatal(err)
		}
	})
}

var (
	propRegions = []string{"eu", "us", "ap"}
	propCPUs    = []CPU{{"epyc", []string{"avx2"}}, {"epyc", []string{"avx2", "avx512f"}}, {"xeon", []string{"avx2", "avx512f"}}}
	propLayers  = func() []Layer {
		var ls []Layer
		for i := range 30 {
			ls = append(ls, Layer{fmt.Sprintf("L%d", i), int64(i+1) * 37 * mib})
		}
		return ls
	}()
)

func randNode(rng *rand.Rand, id string) Node {
	n := Node{
		ID: id, Region: propRegions[rng.IntN(3)], Cluster: fmt.Sprintf("c%d", rng.IntN(3)),
		Capacity: Resources{MilliCPUs: int64(4<<rng.IntN(4)) * 1000, MemoryMB: int64(8<<rng.IntN(4)) << 10, DiskMB: int64(100<<rng.IntN(4)) << 10},
		Load:     rng.Float64() / 2,
		Healthy:  rng.IntN(8) > 0,
		Draining: rng.IntN(10) == 0,
		CPU:      propCPUs[rng.IntN(3)],
	}
	n.Allocated = Resources{rng.Int64N(n.Capacity.MilliCPUs + 1), rng.Int64N(n.Capacity.MemoryMB + 1), rng.Int64N(n.Capacity.DiskMB + 1)}
	n.Runtimes = []Runtime{{Name: "container", Isolation: IsolationContainer}}
	if rng.IntN(3) > 0 {
		n.Runtimes = append(n.Runtimes, Runtime{Name: "vm", Isolation: IsolationVM, Accel: []string{"kvm", "tcg"}[rng.IntN(2)]})
	}
	if rng.IntN(3) == 0 {
		n.Labels = map[string]string{"pool": []string{"batch", "web"}[rng.IntN(2)]}
	}
	return n
}

func randRequest(rng *rand.Rand) Request {
	r := Request{Resources: Resources{MilliCPUs: cpus(float64(1 + rng.IntN(8))), MemoryMB: int64(1+rng.IntN(16)) << 10, DiskMB: int64(1+rng.IntN(100)) << 10}}
	if rng.IntN(2) == 0 {
		r.Region = propRegions[rng.IntN(3)]
	}
	switch rng.IntN(4) {
	case 0:
		r.Runtime, r.Isolation = "vm", IsolationVM
	case 1:
		r.Isolation, r.Accel = IsolationVM, "kvm"
	}
	if rng.IntN(4) == 0 {
		r.Labels = map[string]string{"pool": "batch"}
	}
	if rng.IntN(3) == 0 {
		c := propCPUs[rng.IntN(3)]
		r.MemorySnapshot = &c
	}
	// A lineage: a random chain down from one of three bases.
	at := rng.IntN(3)
	r.Lineage = []Layer{propLayers[at]}
	for range rng.IntN(10) {
		at += 3 * (1 + rng.IntN(2))
		if at >= len(propLayers) {
			break
		}
		r.Lineage = append([]Layer{propLayers[at]}, r.Lineage...)
	}
	return r
}

// feasible is the filters of doc.go, written again plainly.
func feasible(n Node, eff Resources, r Request) Filter {
	if r.Region != "" && n.Region != r.Region {
		return FilterRegion
	}
	if !n.Healthy || n.Draining {
		return FilterHealth
	}
	rt := false
	for _, x := range n.Runtimes {
		rt = rt || ((r.Runtime == "" || x.Name == r.Runtime) && x.Isolation >= r.Isolation && (r.Accel == "" || x.Accel == r.Accel))
	}
	if !rt {
		return FilterRuntime
	}
	if m := r.MemorySnapshot; m != nil {
		if m.Model != "" && m.Model != n.CPU.Model {
			return FilterCPU
		}
		for _, f := range m.Flags {
			found := false
			for _, g := range n.CPU.Flags {
				found = found || f == g
			}
			if !found {
				return FilterCPU
			}
		}
	}
	for k, val := range r.Labels {
		if n.Labels[k] != val {
			return FilterLabels
		}
	}
	switch free := eff.sub(n.Allocated); {
	case free.MilliCPUs < r.Resources.MilliCPUs:
		return FilterCPUs
	case free.MemoryMB < r.Resources.MemoryMB:
		return FilterMemory
	case free.DiskMB < r.Resources.DiskMB:
		return FilterDisk
	}
	return FilterNone
}

func churn(seed uint64, policy Policy, steps int) error {
	rng := seeded(seed)
	cfg := Config{Policy: policy, Overcommit: Overcommit{CPU: 2, Memory: 1, Disk: 1.5}, K: 1 + rng.IntN(8), Locality: 1 + rng.IntN(8)}
	v := NewView(cfg)
	nodes := map[string]Node{} // the truth, as reported and allocated
	held := map[string]map[string]bool{}
	var ids []string
	report := func(n Node) error {
		nodes[n.ID] = n
		return v.Upsert(n)
	}
	for i := range 5 + rng.IntN(40) {
		id := fmt.Sprintf("n%02d", i)
		ids = append(ids, id)
		held[id] = map[string]bool{}
		if err := report(randNode(rng, id)); err != nil {
			return err
		}
	}
	for step := range steps {
		id := ids[rng.IntN(len(ids))]
		_, live := nodes[id]
		switch op := rng.IntN(10); {
		case op == 0:
			if err := report(randNode(rng, id)); err != nil {
				return err
			}
		case op == 1 && live:
			v.Remove(id)
			delete(nodes, id)
			held[id] = map[string]bool{}
		case op == 2 && live:
			l := propLayers[rng.IntN(len(propLayers))]
			if held[id][l.ID] {
				v.RemoveLayer(id, l.ID)
				delete(held[id], l.ID)
			} else if err := v.AddLayer(id, l); err != nil {
				return err
			} else {
				held[id][l.ID] = true
			}
		default:
			req := randRequest(rng)
			d, err := Place(v, req, rng)
			if err := checkDecision(v, nodes, held, req, d, err); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if err == nil {
				n := nodes[d.Node]
				n.Allocated = n.Allocated.add(req.Resources)
				nodes[d.Node] = n
				if err := v.Allocate(d.Node, req.Resources); err != nil {
					return err
				}
				for _, l := range req.Lineage {
					held[d.Node][l.ID] = true
					if err := v.AddLayer(d.Node, l); err != nil {
						return err
					}
				}
			}
		}
		if err := checkInvariants(v); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return nil
}

func checkDecision(v *View, nodes map[string]Node, held map[string]map[string]bool, req Request, d Decision, err error) error {
	eff := func(n Node) Resources { return v.cfg.Overcommit.apply(n.Capacity) }
	if err == nil {
		n, ok := nodes[d.Node]
		if !ok {
			return fmt.Errorf("placed on %s, which is not in the fleet", d.Node)
		}
		if f := feasible(n, eff(n), req); f != FilterNone {
			return fmt.Errorf("placed on %s, which fails filter %v", d.Node, f)
		}
		if d.Region != n.Region || d.Cluster != n.Cluster {
			return fmt.Errorf("decision says %s/%s, the node is in %s/%s", d.Region, d.Cluster, n.Region, n.Cluster)
		}
		var fetch int64
		for _, l := range req.Lineage {
			if held[d.Node][l.ID] {
				break
			}
			fetch += l.Size
		}
		if fetch != d.FetchBytes {
			return fmt.Errorf("placed on %s fetching %d, a brute force says %d", d.Node, d.FetchBytes, fetch)
		}
		return nil
	}
	var nf *NoFitError
	if !errors.As(err, &nf) {
		return err
	}
	inRegion, left := 0, map[Filter]int{}
	for _, n := range nodes {
		f := feasible(n, eff(n), req)
		if f == FilterNone {
			return fmt.Errorf("refused (%v) though %s fits", err, n.ID)
		}
		if f != FilterRegion {
			inRegion++
			left[f]++
		}
	}
	want, remaining := FilterRegion, inRegion
	for f := FilterHealth; f < numFilters && remaining > 0; f++ {
		remaining -= left[f]
		want = f
	}
	if nf.Filter != want || nf.Nodes != inRegion {
		return fmt.Errorf("refusal names %v of %d nodes, a brute force %v of %d: %v", nf.Filter, nf.Nodes, want, inRegion, err)
	}
	return nil
}
