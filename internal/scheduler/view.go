package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Resources are amounts of a node's vCPUs, memory and disk. vCPUs are in
// thousandths so that fractions add up exactly.
type Resources struct {
	MilliCPUs int64
	MemoryMB  int64
	DiskMB    int64
}

func (r Resources) add(o Resources) Resources {
	return Resources{r.MilliCPUs + o.MilliCPUs, r.MemoryMB + o.MemoryMB, r.DiskMB + o.DiskMB}
}

func (r Resources) sub(o Resources) Resources {
	return Resources{r.MilliCPUs - o.MilliCPUs, r.MemoryMB - o.MemoryMB, r.DiskMB - o.DiskMB}
}

// floor0 clamps each amount at zero.
func (r Resources) floor0() Resources {
	return Resources{max(r.MilliCPUs, 0), max(r.MemoryMB, 0), max(r.DiskMB, 0)}
}

func (r Resources) covers(o Resources) bool {
	return r.MilliCPUs >= o.MilliCPUs && r.MemoryMB >= o.MemoryMB && r.DiskMB >= o.DiskMB
}

func (r Resources) negative() bool {
	return r.MilliCPUs < 0 || r.MemoryMB < 0 || r.DiskMB < 0
}

// share is the dominant share of used in total: the largest used/total
// over the three resources (a resource with no capacity counts as full
// when any of it is used).
func share(used, total Resources) float64 {
	return max(ratio(used.MilliCPUs, total.MilliCPUs), ratio(used.MemoryMB, total.MemoryMB), ratio(used.DiskMB, total.DiskMB))
}

func ratio(used, total int64) float64 {
	switch {
	case used <= 0:
		return 0
	case total <= 0:
		return 1
	}
	return float64(used) / float64(total)
}

// Isolation is how strongly a runtime separates a sandbox from the host,
// weakest first: a request for one level accepts any higher one.
type Isolation int

const (
	IsolationAny       Isolation = iota // a request that does not care
	IsolationContainer                  // namespaces, cgroups, seccomp: the host kernel is shared
	IsolationGVisor                     // a user-space kernel between the sandbox and the host's
	IsolationVM                         // hardware virtualization: a guest kernel of its own
)

func (i Isolation) String() string {
	switch i {
	case IsolationAny:
		return "any"
	case IsolationContainer:
		return "container"
	case IsolationGVisor:
		return "gvisor"
	case IsolationVM:
		return "vm"
	}
	return fmt.Sprintf("isolation(%d)", int(i))
}

// Runtime is one runtime a node offers.
type Runtime struct {
	Name      string // "vm", "container"
	Isolation Isolation
	Accel     string // a vm runtime's accel: "kvm", "tcg"; "" for none
}

// CPU is a node's CPU, or the one a memory snapshot was taken on.
type CPU struct {
	Model string
	Flags []string
}

// Node is what a node reports of itself, and what Upsert records.
type Node struct {
	ID      string
	Region  string
	Cluster string // unique within its region
	Labels  map[string]string

	Capacity  Resources // what the node has for sandboxes, before overcommit
	Allocated Resources // what its sandboxes hold, by the node's count
	Load      float64   // its measured load, 0 (idle) to 1 (saturated)
	Healthy   bool
	Draining  bool // draining or cordoned: it keeps its sandboxes, takes no new ones

	Runtimes []Runtime
	CPU      CPU
}

// ErrUnknownNode is returned for a node ID the view does not have.
var ErrUnknownNode = errors.New("scheduler: unknown node")

// View is the scheduler's picture of the fleet: the nodes' reports, the
// allocations placed since, and an index of which nodes hold which
// layers. The zero value is not usable; call NewView. Not safe for
// concurrent use.
type View struct {
	cfg Config

	nodes  []node           // by slot; a removed node's slot is free
	free   []int32          // free slots
	byID   map[string]int32 // node ID → slot
	nslots int              // live nodes

	clusters  []cluster
	byCluster map[string]int32 // region + "/" + cluster → index
	regions   []region
	byRegion  map[string]int32

	cpus    []cpuClass       // distinct CPUs, never removed (a fleet has few)
	byCPU   map[string]int32 // cpuKey → index
	layers  []layerEntry     // by ref; a ref with no holder is free
	freeRef []int32
	byLayer map[string]int32 // layer ID → ref
}

type node struct {
	live       bool
	id         string
	cluster    int32 // index in View.clusters
	clusterPos int32 // position in the cluster's nodes
	labels     map[string]string
	capacity   Resources
	eff        Resources // capacity × overcommit
	allocated  Resources
	load       float64
	healthy    bool
	draining   bool
	runtimes   []Runtime
	cpu        int32           // index in View.cpus
	held       map[int32]int32 // layer ref → position in the layer's holders for this cluster
	heldBytes  int64
}

func (n *node) accepting() bool { return n.healthy && !n.draining }

// cluster aggregates its accepting nodes, so that a decision can rule a
// cluster out, or rank it, without looking at its nodes.
type cluster struct {
	name   string
	region int32
	nodes  []int32 // slots, accepting or not
	eff    Resources
	alloc  Resources
	free   Resources // Σ max(0, eff − allocated) per node: no node fits more than this
	nodesA int       // accepting nodes
}

type region struct {
	name     string
	clusters []int32
}

type cpuClass struct {
	model string
	flags map[string]bool
}

// NewView returns an empty view scheduling by cfg (zero fields take the
// defaults of Config).
func NewView(cfg Config) *View {
	return &View{
		cfg:       cfg.withDefaults(),
		byID:      map[string]int32{},
		byCluster: map[string]int32{},
		byRegion:  map[string]int32{},
		byCPU:     map[string]int32{},
		byLayer:   map[string]int32{},
	}
}

// Len is the number of nodes in the view.
func (v *View) Len() int { return v.nslots }

// Upsert records a node's report: a new node joins the view, a known one
// has its figures replaced (its allocations by the node's own count, which
// supersedes what Allocate added since its last report). The layers it
// holds are kept; SetLayers replaces them.
func (v *View) Upsert(r Node) error {
	if r.ID == "" || r.Region == "" || r.Cluster == "" {
		return fmt.Errorf("scheduler: node %q: an ID, a region and a cluster are required", r.ID)
	}
	if r.Capacity.negative() || r.Allocated.negative() {
		return fmt.Errorf("scheduler: node %s: negative capacity or allocation", r.ID)
	}
	ci := v.clusterIndex(r.Region, r.Cluster)
	slot, ok := v.byID[r.ID]
	if !ok {
		slot = v.newSlot()
		v.byID[r.ID] = slot
		v.nslots++
		v.nodes[slot] = node{live: true, id: r.ID, cluster: ci, held: map[int32]int32{}}
		c := &v.clusters[ci]
		v.nodes[slot].clusterPos = int32(len(c.nodes))
		c.nodes = append(c.nodes, slot)
	} else {
		v.leaveAggregates(slot)
		if v.nodes[slot].cluster != ci {
			v.moveCluster(slot, ci)
		}
	}
	n := &v.nodes[slot]
	n.labels = make(map[string]string, len(r.Labels))
	for k, val := range r.Labels {
		n.labels[k] = val
	}
	n.capacity = r.Capacity
	n.eff = v.cfg.Overcommit.apply(r.Capacity)
	n.allocated = r.Allocated
	n.load = r.Load
	n.healthy = r.Healthy
	n.draining = r.Draining
	n.runtimes = slices.Clone(r.Runtimes)
	n.cpu = v.cpuIndex(r.CPU)
	v.joinAggregates(slot)
	return nil
}

// Remove drops a node (it failed or left) and every layer it held from the
// index. It reports whether the node was there.
func (v *View) Remove(id string) bool {
	slot, ok := v.byID[id]
	if !ok {
		return false
	}
	n := &v.nodes[slot]
	for ref := range n.held {
		v.unhold(slot, ref)
	}
	v.leaveAggregates(slot)
	c := &v.clusters[n.cluster]
	v.dropFromCluster(c, n.clusterPos)
	delete(v.byID, id)
	v.nodes[slot] = node{}
	v.free = append(v.free, slot)
	v.nslots--
	return true
}

// Allocate adds what a placement claims to a node's allocations, so that
// the next decisions see it before the node's next report.
func (v *View) Allocate(id string, r Resources) error {
	return v.adjust(id, r)
}

// Release takes back what a sandbox held (it was deleted or moved);
// allocations do not go below zero.
func (v *View) Release(id string, r Resources) error {
	return v.adjust(id, Resources{}.sub(r))
}

func (v *View) adjust(id string, d Resources) error {
	slot, ok := v.byID[id]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownNode, id)
	}
	v.leaveAggregates(slot)
	n := &v.nodes[slot]
	n.allocated = n.allocated.add(d).floor0()
	v.joinAggregates(slot)
	return nil
}

// Allocated returns a node's allocations as the view counts them.
func (v *View) Allocated(id string) (Resources, bool) {
	slot, ok := v.byID[id]
	if !ok {
		return Resources{}, false
	}
	return v.nodes[slot].allocated, true
}

func (v *View) newSlot() int32 {
	if k := len(v.free); k > 0 {
		s := v.free[k-1]
		v.free = v.free[:k-1]
		return s
	}
	v.nodes = append(v.nodes, node{})
	return int32(len(v.nodes) - 1)
}

func (v *View) clusterIndex(regionName, name string) int32 {
	key := regionName + "/" + name
	if ci, ok := v.byCluster[key]; ok {
		return ci
	}
	ri, ok := v.byRegion[regionName]
	if !ok {
		ri = int32(len(v.regions))
		v.regions = append(v.regions, region{name: regionName})
		v.byRegion[regionName] = ri
	}
	ci := int32(len(v.clusters))
	v.clusters = append(v.clusters, cluster{name: name, region: ri})
	v.byCluster[key] = ci
	v.regions[ri].clusters = append(v.regions[ri].clusters, ci)
	return ci
}

// dropFromCluster swap-removes the node at pos from c's node list.
func (v *View) dropFromCluster(c *cluster, pos int32) {
	last := c.nodes[len(c.nodes)-1]
	c.nodes[pos] = last
	v.nodes[last].clusterPos = pos
	c.nodes = c.nodes[:len(c.nodes)-1]
}

// moveCluster moves a node, and its entries in the layer index, to
// another cluster. The caller has taken it out of the aggregates.
func (v *View) moveCluster(slot, to int32) {
	n := &v.nodes[slot]
	refs := make([]int32, 0, len(n.held))
	for ref := range n.held {
		refs = append(refs, ref)
	}
	for _, ref := range refs {
		v.unlist(slot, ref)
	}
	v.dropFromCluster(&v.clusters[n.cluster], n.clusterPos)
	n.cluster = to
	c := &v.clusters[to]
	n.clusterPos = int32(len(c.nodes))
	c.nodes = append(c.nodes, slot)
	for _, ref := range refs {
		v.hold(slot, ref)
	}
}

func (v *View) leaveAggregates(slot int32) {
	n := &v.nodes[slot]
	if !n.accepting() {
		return
	}
	c := &v.clusters[n.cluster]
	c.eff = c.eff.sub(n.eff)
	c.alloc = c.alloc.sub(n.allocated)
	c.free = c.free.sub(n.eff.sub(n.allocated).floor0())
	c.nodesA--
}

func (v *View) joinAggregates(slot int32) {
	n := &v.nodes[slot]
	if !n.accepting() {
		return
	}
	c := &v.clusters[n.cluster]
	c.eff = c.eff.add(n.eff)
	c.alloc = c.alloc.add(n.allocated)
	c.free = c.free.add(n.eff.sub(n.allocated).floor0())
	c.nodesA++
}

// cpuKey names a CPU by its model and its sorted, deduplicated flags.
func cpuKey(c CPU) string {
	flags := slices.Clone(c.Flags)
	slices.Sort(flags)
	return c.Model + "\x00" + strings.Join(slices.Compact(flags), " ")
}

func (v *View) cpuIndex(c CPU) int32 {
	key := cpuKey(c)
	if i, ok := v.byCPU[key]; ok {
		return i
	}
	cl := cpuClass{model: c.Model, flags: make(map[string]bool, len(c.Flags))}
	for _, f := range c.Flags {
		cl.flags[f] = true
	}
	v.cpus = append(v.cpus, cl)
	i := int32(len(v.cpus) - 1)
	v.byCPU[key] = i
	return i
}
