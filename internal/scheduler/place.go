package scheduler

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Decision is where a request goes.
type Decision struct {
	Node, Cluster, Region string
	// FetchBytes is what the node downloads to materialize the lineage.
	FetchBytes int64
	// Load is the node's dominant share once the request is placed.
	Load float64
	// Cost is the node's score (doc.go); lower won.
	Cost float64
	// Scored is how many feasible nodes the decision compared.
	Scored int
}

// Place picks a node for req (doc.go: filters, score, best-of-K). It
// changes nothing: the caller records the placement with Allocate (and,
// once the node holds the lineage, AddLayer) before the next decision.
// When no node fits, the error is a *NoFitError naming the filter that
// left none.
func Place(v *View, req Request, rng *rand.Rand) (Decision, error) {
	if err := req.validate(); err != nil {
		return Decision{}, err
	}
	q := v.resolve(req)
	var best candidate
	bestCI, tried, scored := int32(-1), 0, 0
	for _, rc := range v.orderClusters(q, rng) {
		// The next cluster is worth a look while its estimate beats the
		// best node found: a cluster's aggregates can hide that the few
		// nodes a request may use in it are full.
		if bestCI >= 0 && (v.cfg.Policy == PolicyRandom || rc.cost >= best.cost || tried == maxClusters) {
			break
		}
		c, ok := v.pickNode(rc.ci, q, rng)
		if !ok {
			continue
		}
		tried++
		scored += c.scored
		if bestCI < 0 || v.better(c, best) {
			best, bestCI = c, rc.ci
		}
	}
	if bestCI < 0 {
		return Decision{}, v.noFit(q)
	}
	cl := &v.clusters[bestCI]
	return Decision{
		Node: v.nodes[best.slot].id, Cluster: cl.name, Region: v.regions[cl.region].name,
		FetchBytes: best.fetch, Load: best.load, Cost: best.cost, Scored: scored,
	}, nil
}

// rankedCluster is a cluster and its estimated cost.
type rankedCluster struct {
	ci         int32
	cost, load float64
}

// orderClusters returns the clusters of the request's region that could
// hold it by their aggregates, best first.
func (v *View) orderClusters(q *query, rng *rand.Rand) []rankedCluster {
	var all []int32
	if q.req.Region == "" {
		all = make([]int32, len(v.clusters))
		for i := range all {
			all[i] = int32(i)
		}
	} else if ri, ok := v.byRegion[q.req.Region]; ok {
		all = v.regions[ri].clusters
	}
	rs := make([]rankedCluster, 0, len(all))
	for _, ci := range all {
		c := &v.clusters[ci]
		if c.nodesA == 0 || !c.free.covers(q.req.Resources) {
			continue
		}
		rs = append(rs, rankedCluster{ci: ci, load: share(c.alloc.add(q.req.Resources), c.eff)})
	}
	switch v.cfg.Policy {
	case PolicyRandom:
		// A random cluster, as likely as its share of accepting nodes,
		// then the others in the same way.
		for i := range rs {
			rs[i].cost = -weightedKey(rng, v.clusters[rs[i].ci].nodesA)
		}
	case PolicyLeastLoaded:
		for i := range rs {
			rs[i].cost = v.cost(0, rs[i].load)
		}
	default:
		nearest := v.clusterFetch(q)
		for i := range rs {
			rs[i].cost = v.cost(nearest[rs[i].ci], rs[i].load)
		}
	}
	slices.SortFunc(rs, func(a, b rankedCluster) int {
		if c := cmp.Compare(a.cost, b.cost); c != 0 {
			return c
		}
		if c := cmp.Compare(a.load, b.load); c != 0 {
			return c
		}
		return cmp.Compare(a.ci, b.ci)
	})
	return rs
}

// weightedKey is Efraimidis–Spirakis: ordering items by u^(1/w), u
// uniform in (0,1], largest first, is a random order in which an item of
// weight w comes first w times as often. It returns the log of the key.
func weightedKey(rng *rand.Rand, w int) float64 {
	return math.Log(1-rng.Float64()) / float64(w)
}

// clusterFetch returns, by cluster, the fetch of its nearest holder of the
// lineage (the whole lineage where it holds none of it). Holders that are
// down or full count too: it ranks clusters, the nodes are checked after.
func (v *View) clusterFetch(q *query) []int64 {
	nearest := make([]int64, len(v.clusters))
	for i := range nearest {
		nearest[i] = -1
	}
	for _, i := range q.present {
		for _, ch := range v.layers[q.refs[i]].holders {
			if nearest[ch.cluster] < 0 {
				nearest[ch.cluster] = q.prefix[i]
			}
		}
	}
	for i := range nearest {
		if nearest[i] < 0 {
			nearest[i] = q.total
		}
	}
	return nearest
}

// cost is the score of doc.go: lower is better.
func (v *View) cost(fetch int64, load float64) float64 {
	if v.cfg.Policy == PolicyLeastLoaded {
		return load
	}
	l := min(load, maxLoad)
	return v.cfg.LocalityWeight*float64(fetch)/gib + v.cfg.LoadWeight*l/(1-l)
}

// better orders candidates: lower cost, then fewer bytes, then node ID.
func (v *View) better(a, b candidate) bool { return v.compare(a, b) < 0 }

func (v *View) compare(a, b candidate) int {
	if c := cmp.Compare(a.cost, b.cost); c != 0 {
		return c
	}
	if c := cmp.Compare(a.fetch, b.fetch); c != 0 {
		return c
	}
	return cmp.Compare(v.nodes[a.slot].id, v.nodes[b.slot].id)
}

// candidate is a feasible node a decision scores.
type candidate struct {
	slot   int32
	fetch  int64
	load   float64
	cost   float64
	scored int // of the winner: how many were scored
}

// pickNode returns the best of the candidates it finds in a cluster, or
// false when no node of it is feasible.
func (v *View) pickNode(ci int32, q *query, rng *rand.Rand) (candidate, bool) {
	c := &v.clusters[ci]
	present := q.presentIn(v, ci)
	cands := make([]candidate, 0, v.cfg.Locality+v.cfg.K)
	if v.cfg.Policy == PolicyLocality {
		cands = v.holderCandidates(cands, ci, q, rng)
	}
	want := v.cfg.K
	if v.cfg.Policy == PolicyRandom {
		want = 1
	}
	before := len(cands)
	cands = v.randomCandidates(cands, c, q, present, want, rng)
	if found := len(cands) - before; found < want {
		// Few nodes of the cluster are feasible: find the others, lest
		// the holders alone (full, perhaps) be compared.
		cands = v.scanCandidates(cands, c, q, present, want-found, rng)
	}
	if len(cands) == 0 {
		return candidate{}, false
	}
	for i := range cands {
		cd := &cands[i]
		n := &v.nodes[cd.slot]
		cd.load = max(n.load, share(n.allocated.add(q.req.Resources), n.eff))
		cd.cost = v.cost(cd.fetch, cd.load)
	}
	best := slices.MinFunc(cands, v.compare)
	best.scored = len(cands)
	return best, true
}

// presentIn narrows q.present to the layers cluster ci holds.
func (q *query) presentIn(v *View, ci int32) []int {
	var out []int
	for _, i := range q.present {
		if v.layers[q.refs[i]].holdersIn(ci) >= 0 {
			out = append(out, i)
		}
	}
	return out
}

// fetch is what node slot downloads for the lineage: the layers nearer
// than the nearest it holds. present lists the lineage positions worth
// looking up (held by someone in its cluster), nearest first.
func (v *View) fetch(slot int32, q *query, present []int) int64 {
	held := v.nodes[slot].held
	for _, i := range present {
		if _, ok := held[q.refs[i]]; ok {
			return q.prefix[i]
		}
	}
	return q.total
}

// holderCandidates adds up to Locality feasible nodes of cluster ci that
// hold the lineage's nearest layers, walking each layer's holders from a
// random one. A node is met first at the nearest layer it holds, so its
// fetch is that layer's prefix.
func (v *View) holderCandidates(cands []candidate, ci int32, q *query, rng *rand.Rand) []candidate {
	limit, probes := v.cfg.Locality, 0
	for _, i := range q.present {
		e := &v.layers[q.refs[i]]
		hi := e.holdersIn(ci)
		if hi < 0 {
			continue
		}
		nodes := e.holders[hi].nodes
		start := rng.IntN(len(nodes))
		for j := range nodes {
			s := nodes[(start+j)%len(nodes)]
			if has(cands, s) {
				continue
			}
			if v.check(s, q) == FilterNone {
				cands = append(cands, candidate{slot: s, fetch: q.prefix[i]})
				if len(cands) == limit {
					return cands
				}
			}
			if probes++; probes == drawsPer*limit {
				return cands
			}
		}
	}
	return cands
}

// randomCandidates adds up to want feasible nodes of c drawn at random.
func (v *View) randomCandidates(cands []candidate, c *cluster, q *query, present []int, want int, rng *rand.Rand) []candidate {
	found := 0
	for range drawsPer*want + 8 {
		s := c.nodes[rng.IntN(len(c.nodes))]
		if has(cands, s) || v.check(s, q) != FilterNone {
			continue
		}
		cands = append(cands, candidate{slot: s, fetch: v.fetch(s, q, present)})
		if found++; found == want {
			break
		}
	}
	return cands
}

// scanCandidates looks at the nodes of c, from a random one, for up to
// want more feasible ones: when random draws find few, few fit.
func (v *View) scanCandidates(cands []candidate, c *cluster, q *query, present []int, want int, rng *rand.Rand) []candidate {
	start, found := rng.IntN(len(c.nodes)), 0
	for j := range c.nodes {
		s := c.nodes[(start+j)%len(c.nodes)]
		if has(cands, s) || v.check(s, q) != FilterNone {
			continue
		}
		cands = append(cands, candidate{slot: s, fetch: v.fetch(s, q, present)})
		if found++; found == want {
			break
		}
	}
	return cands
}

func has(cands []candidate, s int32) bool {
	for i := range cands {
		if cands[i].slot == s {
			return true
		}
	}
	return false
}
