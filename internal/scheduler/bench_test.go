package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchFleet is 10,000 nodes in 20 clusters over 4 regions, a third of
// their memory allocated, each holding the lineages of 20 random snapshots
// of a forest of 20,000 (4 template roots, depths up to 50).
func benchFleet(b *testing.B, cfg Config) (*View, [][]Layer) {
	rng := seeded(1)
	parent := make([]int, 20000)
	depth := make([]int, 20000)
	layers := make([]Layer, 20000)
	for i := range parent {
		layers[i] = Layer{fmt.Sprintf("snap-%d", i), int64(1+rng.IntN(64)) * mib}
		if i < 4 {
			parent[i], layers[i].Size = -1, 1<<30
			continue
		}
		for {
			parent[i] = rng.IntN(i)
			if depth[parent[i]] < 49 {
				break
			}
		}
		depth[i] = depth[parent[i]] + 1
	}
	lineageOf := func(i int) []Layer {
		var l []Layer
		for ; i >= 0; i = parent[i] {
			l = append(l, layers[i])
		}
		return l
	}
	v := NewView(cfg)
	for i := range 10000 {
		n := mk(fmt.Sprintf("node-%05d", i), fmt.Sprintf("r%d", i%4), fmt.Sprintf("c%d", i%20))
		n.Allocated = Resources{MilliCPUs: cpus(5), MemoryMB: 20 << 10, DiskMB: 300 << 10}
		if err := v.Upsert(n); err != nil {
			b.Fatal(err)
		}
		for range 20 {
			hold(b, v, n.ID, lineageOf(rng.IntN(len(layers)))...)
		}
	}
	var reqs [][]Layer
	for range 1024 {
		reqs = append(reqs, lineageOf(rng.IntN(len(layers))))
	}
	return v, reqs
}

func BenchmarkPlace10k(b *testing.B) {
	for _, p := range []Policy{PolicyLocality, PolicyLeastLoaded, PolicyRandom} {
		for _, region := range []string{"", "r2"} {
			b.Run(fmt.Sprintf("%v/region=%q", p, region), func(b *testing.B) {
				v, lineages := benchFleet(b, Config{Policy: p})
				rng := rand.New(rand.NewPCG(2, 3))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					req := Request{Resources: small(), Region: region, Runtime: "vm", Lineage: lineages[i%len(lineages)]}
					if _, err := Place(v, req, rng); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
