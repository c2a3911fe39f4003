package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// exact is a configuration without overcommit, so that capacities in the
// tests read as what fits.
var exact = Config{Overcommit: Overcommit{CPU: 1, Memory: 1, Disk: 1}}

func cpus(n float64) int64 { return int64(n * 1000) }

// mk returns a healthy node with 16 vCPUs, 64 GiB, 1 TiB, both runtimes
// and an "epyc" CPU with avx2 and sse4_2.
func mk(id, region, cluster string) Node {
	return Node{
		ID: id, Region: region, Cluster: cluster,
		Capacity: Resources{MilliCPUs: cpus(16), MemoryMB: 64 << 10, DiskMB: 1 << 20},
		Healthy:  true,
		Runtimes: []Runtime{{Name: "vm", Isolation: IsolationVM, Accel: "kvm"}, {Name: "container", Isolation: IsolationContainer}},
		CPU:      CPU{Model: "epyc", Flags: []string{"avx2", "sse4_2"}},
	}
}

func newView(t testing.TB, cfg Config, nodes ...Node) *View {
	t.Helper()
	v := NewView(cfg)
	for _, n := range nodes {
		if err := v.Upsert(n); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func hold(t testing.TB, v *View, id string, layers ...Layer) {
	t.Helper()
	for _, l := range layers {
		if err := v.AddLayer(id, l); err != nil {
			t.Fatal(err)
		}
	}
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func small() Resources { return Resources{MilliCPUs: cpus(1), MemoryMB: 1024, DiskMB: 10 << 10} }

// place places req with seed 1 and fails the test on an error.
func place(t testing.TB, v *View, req Request) Decision {
	t.Helper()
	d, err := Place(v, req, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkInvariants recomputes what the view keeps incrementally: the layer
// index both ways, held bytes, cluster membership and aggregates.
func checkInvariants(v *View) error {
	live := 0
	for slot := range v.nodes {
		n := &v.nodes[slot]
		if !n.live {
			continue
		}
		live++
		if v.byID[n.id] != int32(slot) {
			return fmt.Errorf("node %s: byID says %d, slot %d", n.id, v.byID[n.id], slot)
		}
		if c := v.clusters[n.cluster].nodes; c[n.clusterPos] != int32(slot) {
			return fmt.Errorf("node %s: not at its position in its cluster", n.id)
		}
		var bytes int64
		for ref, pos := range n.held {
			e := &v.layers[ref]
			hi := e.holdersIn(n.cluster)
			if hi < 0 || e.holders[hi].nodes[pos] != int32(slot) {
				return fmt.Errorf("node %s: layer %s not indexed at %d", n.id, e.id, pos)
			}
			bytes += e.size
		}
		if bytes != n.heldBytes {
			return fmt.Errorf("node %s: held bytes %d, layers sum to %d", n.id, n.heldBytes, bytes)
		}
	}
	if live != v.nslots || live != len(v.byID) {
		return fmt.Errorf("%d live nodes, nslots %d, byID %d", live, v.nslots, len(v.byID))
	}
	for ref := range v.layers {
		e := &v.layers[ref]
		if len(e.holders) == 0 {
			continue
		}
		if v.byLayer[e.id] != int32(ref) {
			return fmt.Errorf("layer %s: byLayer says %d, ref %d", e.id, v.byLayer[e.id], ref)
		}
		for _, ch := range e.holders {
			if len(ch.nodes) == 0 {
				return fmt.Errorf("layer %s: an empty holder list for cluster %d", e.id, ch.cluster)
			}
			for pos, s := range ch.nodes {
				n := &v.nodes[s]
				if p, ok := n.held[int32(ref)]; !ok || p != int32(pos) || n.cluster != ch.cluster {
					return fmt.Errorf("layer %s: holder %s does not hold it there", e.id, n.id)
				}
			}
		}
	}
	if len(v.byLayer) != len(v.layers)-len(v.freeRef) {
		return fmt.Errorf("%d layers by ID, %d refs in use", len(v.byLayer), len(v.layers)-len(v.freeRef))
	}
	for ci := range v.clusters {
		c := &v.clusters[ci]
		var eff, alloc, free Resources
		accepting := 0
		for pos, s := range c.nodes {
			n := &v.nodes[s]
			if n.cluster != int32(ci) || n.clusterPos != int32(pos) {
				return fmt.Errorf("cluster %s: node %s misplaced", c.name, n.id)
			}
			if n.accepting() {
				eff, alloc = eff.add(n.eff), alloc.add(n.allocated)
				free = free.add(n.eff.sub(n.allocated).floor0())
				accepting++
			}
		}
		if eff != c.eff || alloc != c.alloc || free != c.free || accepting != c.nodesA {
			return fmt.Errorf("cluster %s: aggregates %v %v %v %d, recomputed %v %v %v %d", c.name, c.eff, c.alloc, c.free, c.nodesA, eff, alloc, free, accepting)
		}
	}
	return nil
}
