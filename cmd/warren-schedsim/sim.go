package main

import (
	"container/heap"
	"errors"
	"math/rand/v2"
	"time"

	"warren/internal/scheduler"
)

// Restore latency model: a sandbox starts after its node has fetched the
// layers it lacked, one after another (each costing a round trip to the
// blob store, its chunks in parallel at the node's bandwidth), then boots
// its kernel, or resumes a memory snapshot. The memory file's own
// transfer is not modelled.
const (
	bootCost   = 150 * time.Millisecond
	resumeCost = 30 * time.Millisecond
	layerRTT   = 5 * time.Millisecond
)

type options struct {
	nodes, sandboxes int
	seed             uint64
	util             float64 // fleet memory the live sandboxes hold, on average
	failures         float64 // nodes failing over the run, as a share of the fleet
	recoverAfter     float64 // a failed node's downtime, as a share of the run
	sched            scheduler.Config
}

// sandbox is one arrival's sandbox while it lives.
type sandbox struct {
	arr     arrival
	node    int32 // -1: not placed (refused, or its node failed and no other took it)
	pos     int32 // its position in its node's list
	snapped bool
	ended   bool
}

type sim struct {
	opt      options
	f        *fleet
	g        *workload
	v        *scheduler.View
	rng      *rand.Rand
	pool     entryPool
	sbs      []sandbox
	alloc    []scheduler.Resources // per node, the sim's own count
	events   eventHeap
	seq      int64
	byID     map[string]int32
	m        *metrics
	lin      []int32
	req      []scheduler.Layer
	evictFor int32 // the node whose cache is evicting
}

// run plays the stream of o under one policy.
func run(o options, p scheduler.Policy) (*metrics, *fleet, error) {
	start := time.Now()
	cfg := o.sched
	cfg.Policy = p
	frng := rand.New(rand.NewPCG(o.seed, 0))
	f := newFleet(o.nodes, frng)
	v := scheduler.NewView(cfg)
	oc := v.Config().Overcommit
	live := o.util * f.memoryMB(oc.Memory) / meanSandboxMB()
	s := &sim{
		opt: o, f: f, v: v,
		g:     newWorkload(o.seed, f.regions, o.nodes, live),
		rng:   rand.New(rand.NewPCG(o.seed, 2)),
		alloc: make([]scheduler.Resources, o.nodes),
		byID:  make(map[string]int32, o.nodes),
		m:     newMetrics(p, o.sandboxes),
	}
	for i := range f.nodes {
		s.byID[f.nodes[i].report.ID] = int32(i)
		if err := v.Upsert(f.nodes[i].report); err != nil {
			return nil, nil, err
		}
	}
	failEvery := int64(0)
	if n := int64(o.failures * float64(o.nodes)); n > 0 {
		failEvery = max(1, int64(o.sandboxes)/n)
	}
	// Load is sampled 50 times over the second half of the run, once the
	// fleet has filled towards its steady state.
	sampleEvery := max(1, int64(o.sandboxes)/100)
	for now := range int64(o.sandboxes) {
		if err := s.due(now); err != nil {
			return nil, nil, err
		}
		if failEvery > 0 && now%failEvery == failEvery-1 {
			if err := s.fail(int32(s.g.rng.IntN(o.nodes)), now); err != nil {
				return nil, nil, err
			}
		}
		a := s.g.next(now)
		id := int32(len(s.sbs))
		s.sbs = append(s.sbs, sandbox{arr: a, node: -1})
		if err := s.place(id, false); err != nil {
			return nil, nil, err
		}
		if a.child >= 0 {
			s.push(a.snapAt, evSnapshot, id)
		}
		s.push(a.endAt, evDelete, id)
		if now >= int64(o.sandboxes)/2 && now%sampleEvery == 0 {
			s.sampleLoad()
		}
	}
	s.m.wall = time.Since(start)
	return s.m, f, nil
}

// place asks the scheduler for a node for sandbox id and starts it there:
// a new sandbox from its source, or one whose node failed from its last
// snapshot.
func (s *sim) place(id int32, again bool) error {
	sb := &s.sbs[id]
	src := sb.arr.source
	if sb.snapped {
		src = sb.arr.child
	}
	t := &s.g.tasks[sb.arr.task]
	s.lin = s.g.lineage(src, s.lin[:0])
	s.req = s.req[:0]
	for _, l := range s.lin {
		s.req = append(s.req, scheduler.Layer{ID: s.g.ids[l], Size: s.g.layers[l].size})
	}
	req := scheduler.Request{
		Resources: t.res, Runtime: t.runtime, Isolation: t.iso,
		Region: t.region, Labels: t.labels, Lineage: s.req,
	}
	memory := false
	if c := s.g.layers[src].cpu; t.memory && c >= 0 {
		req.MemorySnapshot, memory = &cpuModels[c], true
	}
	begin := time.Now()
	d, err := scheduler.Place(s.v, req, s.rng)
	s.m.decisions = append(s.m.decisions, time.Since(begin))
	if errors.Is(err, scheduler.ErrNoFit) {
		s.m.refused(again)
		return nil
	}
	if err != nil {
		return err
	}
	n := s.byID[d.Node]
	if err := s.v.Allocate(d.Node, t.res); err != nil {
		return err
	}
	s.alloc[n] = add(s.alloc[n], t.res)
	node := &s.f.nodes[n]
	sb.node, sb.pos = n, int32(len(node.sandboxes))
	node.sandboxes = append(node.sandboxes, id)

	fetched, layers := s.materialize(n)
	if fetched != d.FetchBytes {
		s.m.mismatches++
	}
	lat := bootCost
	if memory {
		lat = resumeCost
	}
	lat += time.Duration(layers)*layerRTT + time.Duration(float64(fetched)/node.bandwidth*float64(time.Second))
	s.m.placed(again, fetched, lat, len(s.lin))
	return nil
}

// materialize brings s.lin into node n's cache: the layers nearer than the
// nearest it holds are fetched, and it reports them to the view.
func (s *sim) materialize(n int32) (int64, int) {
	c := &s.f.nodes[n].cache
	h := len(s.lin)
	for i, l := range s.lin {
		if c.holds(l) {
			h = i
			c.touch(&s.pool, l)
			break
		}
	}
	var bytes int64
	for i := h - 1; i >= 0; i-- { // root side first: the nearest ends most recent
		bytes += s.g.layers[s.lin[i]].size
		s.cache(n, s.lin[i])
	}
	return bytes, h
}

// cache adds a layer to node n's cache, and the change to the view.
func (s *sim) cache(n, layer int32) {
	s.evictFor = n
	s.f.nodes[n].cache.insert(&s.pool, layer, s.size, s.evicted)
	if err := s.v.AddLayer(s.f.nodes[n].report.ID, scheduler.Layer{ID: s.g.ids[layer], Size: s.g.layers[layer].size}); err != nil {
		panic(err) // the node is in the view and the layer valid: a bug of the sim
	}
}

func (s *sim) size(l int32) int64 { return s.g.layers[l].size }

func (s *sim) evicted(l int32) {
	s.v.RemoveLayer(s.f.nodes[s.evictFor].report.ID, s.g.ids[l])
}

// fail takes node n down with its cache; its sandboxes come back elsewhere
// from their last snapshot.
func (s *sim) fail(n int32, now int64) error {
	node := &s.f.nodes[n]
	if !node.up {
		return nil
	}
	node.up = false
	s.m.failures++
	s.v.Remove(node.report.ID)
	node.cache.clear(&s.pool)
	s.alloc[n] = scheduler.Resources{}
	lost := node.sandboxes
	node.sandboxes = nil
	s.m.stranded += len(lost)
	for _, id := range lost {
		s.sbs[id].node = -1
		if err := s.place(id, true); err != nil {
			return err
		}
	}
	s.push(now+int64(s.opt.recoverAfter*float64(s.opt.sandboxes)), evRecover, n)
	return nil
}

// due plays the events up to now.
func (s *sim) due(now int64) error {
	for len(s.events) > 0 && s.events[0].at <= now {
		e := heap.Pop(&s.events).(event)
		switch e.kind {
		case evSnapshot:
			sb := &s.sbs[e.id]
			s.g.taken(sb.arr)
			if sb.ended {
				continue
			}
			sb.snapped = true
			if sb.node >= 0 {
				s.g.layers[sb.arr.child].cpu = int32(s.f.nodes[sb.node].cpu)
				s.cache(sb.node, sb.arr.child)
			}
		case evDelete:
			sb := &s.sbs[e.id]
			sb.ended = true
			if sb.node >= 0 {
				s.release(e.id)
			}
		case evRecover:
			node := &s.f.nodes[e.id]
			node.up = true
			if err := s.v.Upsert(node.report); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *sim) release(id int32) {
	sb := &s.sbs[id]
	n := sb.node
	node := &s.f.nodes[n]
	res := s.g.tasks[sb.arr.task].res
	if err := s.v.Release(node.report.ID, res); err != nil {
		panic(err) // a placed sandbox's node is in the view: a bug of the sim
	}
	s.alloc[n] = add(s.alloc[n], scheduler.Resources{MilliCPUs: -res.MilliCPUs, MemoryMB: -res.MemoryMB, DiskMB: -res.DiskMB})
	last := node.sandboxes[len(node.sandboxes)-1]
	node.sandboxes[sb.pos] = last
	s.sbs[last].pos = sb.pos
	node.sandboxes = node.sandboxes[:len(node.sandboxes)-1]
	sb.node = -1
}

// sampleLoad records how unevenly memory is held: the fullest node's share
// against the mean share of the nodes that are up.
func (s *sim) sampleLoad() {
	oc := s.v.Config().Overcommit.Memory
	var sum, top float64
	up := 0
	for i := range s.f.nodes {
		if !s.f.nodes[i].up {
			continue
		}
		sh := float64(s.alloc[i].MemoryMB) / (float64(s.f.nodes[i].report.Capacity.MemoryMB) * oc)
		sum += sh
		top = max(top, sh)
		up++
	}
	if up > 0 && sum > 0 {
		s.m.imbalance = append(s.m.imbalance, top/(sum/float64(up)))
		s.m.peak = max(s.m.peak, top)
	}
}

func add(a, b scheduler.Resources) scheduler.Resources {
	return scheduler.Resources{MilliCPUs: a.MilliCPUs + b.MilliCPUs, MemoryMB: a.MemoryMB + b.MemoryMB, DiskMB: a.DiskMB + b.DiskMB}
}

type eventKind uint8

const (
	evSnapshot eventKind = iota
	evDelete
	evRecover
)

type event struct {
	at, seq int64
	kind    eventKind
	id      int32 // a sandbox; a node for evRecover
}

func (s *sim) push(at int64, k eventKind, id int32) {
	s.seq++
	heap.Push(&s.events, event{at: at, seq: s.seq, kind: k, id: id})
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
