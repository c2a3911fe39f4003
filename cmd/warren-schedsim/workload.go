package main

import (
	"math"
	"math/rand/v2"
	"strconv"

	"warren/internal/scheduler"
)

// The workload is tree search. A task (one search) starts sandboxes from
// a template, snapshots each after a step, and restores and forks those
// snapshots to try branches: half of its restores take the deepest of
// its 16 newest snapshots (extending the most promising branch, forked
// again and again), half any of them (backtracking). A lineage is the
// base layer, the task's setup layer, and step layers down to the task's
// depth limit, drawn from 1 to 49 snapshots: lineages of 1 to 50 layers.
// So the forest has few roots (the templates) and many branches.
//
// The stream does not depend on placements: a sandbox that could not be
// placed still adds its snapshot to its task (as held by no node), so
// every policy sees the same requests.
type layerInfo struct {
	parent int32 // -1 for a base layer
	size   int64
	depth  int32 // layers under the base: 0 for a base
	cpu    int32 // the CPU model of the node that took it, for memory snapshots; -1 if none did
}

// Layer sizes (bytes): templates fixed; a task's setup layer lognormal
// with median 256 MiB and σ 0.7 (clone, dependencies); a step layer
// lognormal with median 16 MiB and σ 1.2 (mean ≈ 33 MiB). Each capped and
// rounded up to 4 KiB.
var (
	templateMiB    = []int64{600, 800, 1000, 1200, 1600, 2000}
	templateWeight = []float64{0.4, 0.25, 0.15, 0.1, 0.06, 0.04}
)

const (
	maxDepth     = 49 // the deepest a snapshot is under its base: lineages of 1 to 50 layers
	frontier     = 16
	setupMedian  = 256 << 20
	setupSigma   = 0.7
	setupCap     = 4 << 30
	stepMedian   = 16 << 20
	stepSigma    = 1.2
	stepCap      = 2 << 30
	vmShare      = 0.8  // of tasks on the vm runtime; the rest containers
	memoryShare  = 0.3  // of vm tasks restoring memory snapshots (CPU-bound)
	anyRegion    = 0.2  // of tasks naming no region
	batchTasks   = 0.03 // of tasks asking for pool=batch
	minBudget    = 500  // sandboxes of one task
	maxBudget    = 3000 //
	tasksPerNode = 0.05 // active tasks per node
)

// sandboxSizes: 1 vCPU/2 GiB/10 GiB half the time, 2/4/20 a third, 4/8/40
// the rest: 3.6 GiB of memory on average.
var (
	sandboxSizes = []scheduler.Resources{
		{MilliCPUs: 1000, MemoryMB: 2 << 10, DiskMB: 10 << 10},
		{MilliCPUs: 2000, MemoryMB: 4 << 10, DiskMB: 20 << 10},
		{MilliCPUs: 4000, MemoryMB: 8 << 10, DiskMB: 40 << 10},
	}
	sandboxWeight = []float64{0.5, 0.35, 0.15}
)

func meanSandboxMB() float64 {
	var m float64
	for i, s := range sandboxSizes {
		m += sandboxWeight[i] * float64(s.MemoryMB)
	}
	return m
}

type task struct {
	region   string
	runtime  string
	iso      scheduler.Isolation
	labels   map[string]string
	memory   bool
	maxDepth int32 // the deepest snapshot it takes, 1 to maxDepth
	base     int32
	res      scheduler.Resources
	budget   int
	avail    []int32 // snapshots one may restore, oldest first
}

// arrival is one sandbox asked for.
type arrival struct {
	task   int32
	source int32 // the layer it restores: a base for a create
	child  int32 // the snapshot it takes; -1 at the depth limit
	snapAt int64 // when it takes it
	endAt  int64 // when it is deleted
}

type workload struct {
	rng       *rand.Rand
	regions   []string
	layers    []layerInfo
	ids       []string
	tasks     []task
	active    []int32
	meanLife  float64 // ticks a sandbox lives, on average (exponential)
	meanDelay float64 // ticks from a sandbox's start to its snapshot
}

func newWorkload(seed uint64, regions []string, nodes int, meanLife float64) *workload {
	g := &workload{rng: rand.New(rand.NewPCG(seed, 1)), regions: regions, meanLife: meanLife}
	for i, mib := range templateMiB {
		g.layers = append(g.layers, layerInfo{parent: -1, size: mib << 20, cpu: -1})
		g.ids = append(g.ids, "tpl-"+strconv.Itoa(i))
	}
	for range max(4, int(float64(nodes)*tasksPerNode)) {
		g.active = append(g.active, g.newTask())
	}
	g.meanDelay = 2 * float64(len(g.active))
	return g
}

func (g *workload) newTask() int32 {
	r := g.rng
	t := task{
		base:     int32(pick(r, templateWeight)),
		res:      sandboxSizes[pick(r, sandboxWeight)],
		budget:   minBudget + r.IntN(maxBudget-minBudget+1),
		maxDepth: 1 + r.Int32N(maxDepth),
	}
	if r.Float64() >= anyRegion {
		t.region = g.regions[r.IntN(len(g.regions))]
	}
	if r.Float64() < vmShare {
		t.runtime, t.iso = "vm", scheduler.IsolationVM
		t.memory = r.Float64() < memoryShare
	} else {
		t.runtime, t.iso = "container", scheduler.IsolationContainer
	}
	if r.Float64() < batchTasks {
		t.labels = map[string]string{"pool": batchPool}
	}
	g.tasks = append(g.tasks, t)
	return int32(len(g.tasks) - 1)
}

// next is the arrival at tick now.
func (g *workload) next(now int64) arrival {
	r := g.rng
	slot := r.IntN(len(g.active))
	ti := g.active[slot]
	t := &g.tasks[ti]
	a := arrival{task: ti, child: -1}
	if len(t.avail) == 0 {
		a.source = t.base
	} else if n := len(t.avail); r.IntN(2) == 0 {
		a.source = t.avail[n-1]
		for _, l := range t.avail[n-min(n, frontier):] {
			if g.layers[l].depth > g.layers[a.source].depth {
				a.source = l
			}
		}
	} else {
		a.source = t.avail[r.IntN(n)]
	}
	if d := g.layers[a.source].depth; d < t.maxDepth {
		median, sigma, cap := float64(stepMedian), stepSigma, int64(stepCap)
		if d == 0 {
			median, sigma, cap = setupMedian, setupSigma, setupCap
		}
		a.child = g.addLayer(a.source, lognormal(r, median, sigma, cap))
	}
	delay := int64(g.meanDelay * (0.5 + r.Float64()))
	life := int64(r.ExpFloat64() * g.meanLife)
	a.snapAt, a.endAt = now+delay, now+max(life, delay+1)
	if t.budget--; t.budget == 0 {
		g.active[slot] = g.newTask()
	}
	return a
}

// taken makes a snapshot restorable: its sandbox took it.
func (g *workload) taken(a arrival) {
	t := &g.tasks[a.task]
	t.avail = append(t.avail, a.child)
}

func (g *workload) addLayer(parent int32, size int64) int32 {
	g.layers = append(g.layers, layerInfo{parent: parent, size: size, depth: g.layers[parent].depth + 1, cpu: -1})
	id := int32(len(g.layers) - 1)
	g.ids = append(g.ids, "snap-"+strconv.Itoa(int(id)))
	return id
}

// lineage appends the layers from l up to its base, nearest first.
func (g *workload) lineage(l int32, out []int32) []int32 {
	for ; l >= 0; l = g.layers[l].parent {
		out = append(out, l)
	}
	return out
}

func lognormal(r *rand.Rand, median, sigma float64, cap int64) int64 {
	v := min(int64(median*math.Exp(sigma*r.NormFloat64())), cap)
	return (v + 4095) &^ 4095
}

func pick(r *rand.Rand, weights []float64) int {
	u := r.Float64()
	for i, w := range weights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(weights) - 1
}
