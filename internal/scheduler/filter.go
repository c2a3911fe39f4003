package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Request is what a create or restore needs of a node. It names no
// tenant: tenants' quotas are the control plane's.
type Request struct {
	Resources Resources
	Runtime   string    // the runtime's name; "" for any
	Isolation Isolation // the least isolation accepted
	Accel     string    // "" for any
	Region    string    // "" for any
	Labels    map[string]string
	// Lineage is what the node materializes, nearest first: the snapshot's
	// layer, its parent's, … up to the template's base layer. A plain
	// create from a template has just the base layer.
	Lineage []Layer
	// MemorySnapshot is the CPU a memory snapshot was taken on; nil for a
	// restore of the disk alone, which any CPU can boot.
	MemorySnapshot *CPU
	// Avoid is a node not to place on: the one that holds what the
	// placement backs up (a paused sandbox's standby); "" for none.
	Avoid string
}

func (r *Request) validate() error {
	if r.Resources.negative() {
		return errors.New("scheduler: negative resources requested")
	}
	for _, l := range r.Lineage {
		if l.ID == "" || l.Size < 0 {
			return fmt.Errorf("scheduler: lineage layer %q of size %d", l.ID, l.Size)
		}
	}
	return nil
}

// Filter is one of the filters a node must pass, in the order they apply.
type Filter int

const (
	FilterNone    Filter = iota // passed every filter
	FilterRegion                // not in the requested region
	FilterHealth                // unhealthy, draining or cordoned
	FilterAvoid                 // the node the request avoids
	FilterRuntime               // lacks the runtime, isolation or accel
	FilterCPU                   // CPU incompatible with the memory snapshot
	FilterLabels                // lacks a label
	FilterCPUs                  // too few free vCPUs
	FilterMemory                // too little free memory
	FilterDisk                  // too little free disk
	numFilters
)

var filterNames = [numFilters]string{"none", "region", "health", "avoid", "runtime", "cpu", "labels", "vcpus", "memory", "disk"}

func (f Filter) String() string {
	if f < 0 || f >= numFilters {
		return "filter(" + strconv.Itoa(int(f)) + ")"
	}
	return filterNames[f]
}

// ErrNoFit matches every NoFitError.
var ErrNoFit = errors.New("scheduler: no node fits")

// NoFitError says why no node fits a request: the filter that emptied the
// field (the first after which no node of the region was left) and how
// many nodes each filter removed, a node counting at the first filter it
// fails.
type NoFitError struct {
	Region  string // the request's; "" for any
	Filter  Filter
	Want    string // what Filter asked for, e.g. "has 8 vCPUs free"
	Nodes   int    // nodes in the region
	Removed map[Filter]int
}

func (e *NoFitError) Error() string {
	where := "in any region"
	if e.Region != "" {
		where = "in region " + e.Region
	}
	switch e.Filter {
	case FilterRegion:
		return "scheduler: no node " + where
	case FilterHealth:
		return fmt.Sprintf("scheduler: no node %s is healthy and accepting sandboxes (%d down, draining or cordoned)", where, e.Nodes)
	}
	left := e.Nodes
	for f := FilterRegion; f < e.Filter; f++ {
		left -= e.Removed[f]
	}
	return fmt.Sprintf("scheduler: no node %s %s (%d passed the filters before)", where, e.Want, left)
}

func (e *NoFitError) Is(target error) bool { return target == ErrNoFit }

// query is a request resolved against the view once per decision.
type query struct {
	req    Request
	cpuOK  []bool  // by CPU class; nil when no memory snapshot is involved
	refs   []int32 // the lineage's refs in the index; -1 for a layer nobody holds
	prefix []int64 // prefix[i]: the bytes of Lineage[:i]
	total  int64   // the bytes of the whole lineage
	// present are the positions in the lineage of layers someone holds,
	// nearest first: the only ones a fetch computation looks up.
	present []int
}

func (v *View) resolve(req Request) *query {
	q := &query{req: req, refs: make([]int32, len(req.Lineage)), prefix: make([]int64, len(req.Lineage)+1)}
	for i, l := range req.Lineage {
		q.prefix[i+1] = q.prefix[i] + l.Size
		ref, ok := v.byLayer[l.ID]
		if !ok {
			q.refs[i] = -1
			continue
		}
		q.refs[i] = ref
		q.present = append(q.present, i)
	}
	q.total = q.prefix[len(req.Lineage)]
	if m := req.MemorySnapshot; m != nil {
		q.cpuOK = make([]bool, len(v.cpus))
		for i, c := range v.cpus {
			q.cpuOK[i] = cpuCompatible(c, *m)
		}
	}
	return q
}

// cpuCompatible: a memory snapshot resumes on a CPU of the same model (if
// the snapshot names one) that has every flag the snapshot's CPU had, so
// that no instruction the guest found at boot goes missing.
func cpuCompatible(c cpuClass, want CPU) bool {
	if want.Model != "" && c.model != want.Model {
		return false
	}
	for _, f := range want.Flags {
		if !c.flags[f] {
			return false
		}
	}
	return true
}

// check returns the first filter a node fails, or FilterNone. The region
// is the caller's to check.
func (v *View) check(slot int32, q *query) Filter {
	n := &v.nodes[slot]
	r := &q.req
	switch {
	case !n.accepting():
		return FilterHealth
	case r.Avoid != "" && n.id == r.Avoid:
		return FilterAvoid
	case !hasRuntime(n.runtimes, r):
		return FilterRuntime
	case q.cpuOK != nil && !q.cpuOK[n.cpu]:
		return FilterCPU
	case !hasLabels(n.labels, r.Labels):
		return FilterLabels
	}
	free := n.eff.sub(n.allocated)
	switch {
	case free.MilliCPUs < r.Resources.MilliCPUs:
		return FilterCPUs
	case free.MemoryMB < r.Resources.MemoryMB:
		return FilterMemory
	case free.DiskMB < r.Resources.DiskMB:
		return FilterDisk
	}
	return FilterNone
}

func hasRuntime(rts []Runtime, r *Request) bool {
	for _, rt := range rts {
		if (r.Runtime == "" || rt.Name == r.Runtime) && rt.Isolation >= r.Isolation && (r.Accel == "" || rt.Accel == r.Accel) {
			return true
		}
	}
	return false
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// noFit scans the region (every node, when the request names none) and
// says which filter left no node.
func (v *View) noFit(q *query) error {
	e := &NoFitError{Region: q.req.Region, Removed: map[Filter]int{}}
	var clusters []int32
	if ri, ok := v.byRegion[q.req.Region]; ok {
		clusters = v.regions[ri].clusters
	} else if q.req.Region == "" {
		for ci := range v.clusters {
			clusters = append(clusters, int32(ci))
		}
	}
	for _, ci := range clusters {
		for _, s := range v.clusters[ci].nodes {
			e.Nodes++
			e.Removed[v.check(s, q)]++
		}
	}
	e.Filter = FilterRegion
	left := e.Nodes
	for f := FilterRegion; f < numFilters && left > 0; f++ {
		left -= e.Removed[f]
		e.Filter = f
	}
	if left > 0 {
		// Place tries every cluster whose aggregate could hold the
		// request, and no node fits more than its cluster's aggregate.
		return fmt.Errorf("scheduler: %d nodes fit but none was placed: the view's aggregates are inconsistent", left)
	}
	e.Want = want(e.Filter, &q.req)
	return e
}

func want(f Filter, r *Request) string {
	switch f {
	case FilterAvoid:
		return "other than " + r.Avoid
	case FilterRuntime:
		s := "has a runtime"
		if r.Runtime != "" {
			s = "has runtime " + r.Runtime
		}
		if r.Isolation > IsolationAny {
			s += " with isolation " + r.Isolation.String()
		}
		if r.Accel != "" {
			s += " and accel " + r.Accel
		}
		return s
	case FilterCPU:
		m := r.MemorySnapshot
		model := m.Model
		if model == "" {
			model = "any model"
		}
		return fmt.Sprintf("has a CPU compatible with the memory snapshot's (%s, flags %s)", model, strings.Join(m.Flags, " "))
	case FilterLabels:
		kv := make([]string, 0, len(r.Labels))
		for k, val := range r.Labels {
			kv = append(kv, k+"="+val)
		}
		slices.Sort(kv)
		return "has labels " + strings.Join(kv, ",")
	case FilterCPUs:
		return "has " + strconv.FormatFloat(float64(r.Resources.MilliCPUs)/1000, 'f', -1, 64) + " vCPUs free"
	case FilterMemory:
		return fmt.Sprintf("has %d MB of memory free", r.Resources.MemoryMB)
	case FilterDisk:
		return fmt.Sprintf("has %d MB of disk free", r.Resources.DiskMB)
	}
	return ""
}
