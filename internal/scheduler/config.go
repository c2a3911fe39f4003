package scheduler

import "math"

// Policy is how Place ranks the feasible nodes (doc.go).
type Policy int

const (
	PolicyLocality    Policy = iota // locality weighed against load: the scheduler's policy
	PolicyLeastLoaded               // the lowest load among K random candidates
	PolicyRandom                    // any feasible node
)

func (p Policy) String() string {
	switch p {
	case PolicyLocality:
		return "locality"
	case PolicyLeastLoaded:
		return "least-loaded"
	case PolicyRandom:
		return "random"
	}
	return "policy(?)"
}

// Overcommit is how much more than its capacity each resource of a node
// may be promised: 2 lets a node with 16 vCPUs take sandboxes asking for 32
// in all. Below 1 it keeps a part back.
type Overcommit struct {
	CPU, Memory, Disk float64
}

// DefaultOvercommit mirrors the node's own admission defaults
// (internal/sandbox.DefaultAdmission), so that the scheduler neither
// sends a node what it would refuse nor holds back what it would take.
var DefaultOvercommit = Overcommit{CPU: 32, Memory: 1.5, Disk: 4}

func (o Overcommit) apply(r Resources) Resources {
	return Resources{
		MilliCPUs: scale(r.MilliCPUs, o.CPU),
		MemoryMB:  scale(r.MemoryMB, o.Memory),
		DiskMB:    scale(r.DiskMB, o.Disk),
	}
}

func scale(v int64, f float64) int64 { return int64(math.Floor(float64(v) * f)) }

// Config tunes the scheduler. Zero fields take the defaults below.
type Config struct {
	Policy Policy
	// Overcommit per resource; a zero ratio takes DefaultOvercommit's.
	Overcommit Overcommit
	// K is how many random feasible nodes a decision scores (default 8).
	K int
	// Locality is how many feasible holders of the lineage's nearest
	// layers, from the index, a decision scores besides (default 8).
	Locality int
	// LocalityWeight is the cost of one GiB fetched (default 1).
	LocalityWeight float64
	// LoadWeight is the cost of a node half full (default 1: as much
	// as a GiB fetched); the load term is LoadWeight × load/(1 − load).
	LoadWeight float64
}

const (
	defaultK              = 8
	defaultLocality       = 8
	defaultLocalityWeight = 1
	defaultLoadWeight     = 1
	// drawsPer bounds the random draws and index probes of a decision:
	// drawsPer × (K or Locality) before it settles for what it found.
	drawsPer = 4
	// maxClusters bounds the clusters whose nodes a decision scores.
	maxClusters = 3
	// maxLoad caps the load in the score, where load/(1 − load) would
	// grow without bound: a full node costs 99 × LoadWeight.
	maxLoad = 0.99
	gib     = 1 << 30
)

func (c Config) withDefaults() Config {
	if c.Overcommit.CPU <= 0 {
		c.Overcommit.CPU = DefaultOvercommit.CPU
	}
	if c.Overcommit.Memory <= 0 {
		c.Overcommit.Memory = DefaultOvercommit.Memory
	}
	if c.Overcommit.Disk <= 0 {
		c.Overcommit.Disk = DefaultOvercommit.Disk
	}
	if c.K <= 0 {
		c.K = defaultK
	}
	if c.Locality <= 0 {
		c.Locality = defaultLocality
	}
	if c.LocalityWeight <= 0 {
		c.LocalityWeight = defaultLocalityWeight
	}
	if c.LoadWeight <= 0 {
		c.LoadWeight = defaultLoadWeight
	}
	return c
}

// Config returns the view's configuration, defaults filled in.
func (v *View) Config() Config { return v.cfg }
