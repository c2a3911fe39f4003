package sandbox

import (
	"fmt"
	"sync"

	"warren/api"
)

// Admission: the node promises only what it holds. Each sandbox claims its
// vCPUs, memory (a VM's VMM overhead included) and disk (root plus
// workspace) from the moment it is admitted until its teardown, paused or
// not. The node's capacity is what the host has, less a reserve for the
// host and the daemon, times a configured overcommit; a tenant's share is
// bounded too. Nothing here does I/O: the host's figures come in as
// HostCapacity, and the disk's free space is checked by the caller.

// HostCapacity is what the node's host has, as the daemon read it.
type HostCapacity struct {
	CPUs     int   // online CPUs
	MemoryMB int64 // MemTotal
	DiskMB   int64 // size of the filesystem holding the data directory
	PidMax   int64 // kernel.pid_max
}

// Admission configures the node's admission. Zero fields take the defaults
// of DefaultAdmission.
type Admission struct {
	// CPUOvercommit, MemoryOvercommit and DiskOvercommit are how much more
	// the node may promise than it holds (after the reserves). A sandbox's
	// CPUs are a cap on time shared with the others, not a reservation
	// (overcommitted, they run slower, nothing fails), and its disk is
	// sparse; its
	// memory is a cap too, but the warren parent cgroup holds every
	// sandbox together below the host's memory less the reserve, so an
	// overcommitted node OOM-kills inside a sandbox, never the host.
	CPUOvercommit, MemoryOvercommit, DiskOvercommit float64
	// ReserveMemoryMB is kept for the host and the daemon; 0 takes the
	// larger of 1 GiB and a tenth of the host's memory.
	ReserveMemoryMB int64
	// ReserveDiskMB is the free disk below which creates, restores and
	// snapshots are refused; 0 takes a twentieth of the filesystem, at
	// least 2 GiB and at most 10 GiB (a twentieth of a large disk would
	// refuse creates with tens of GiB free).
	ReserveDiskMB int64
	// ReservePids are pids kept for the host: no sandbox may have more
	// than pid_max less these, nor all of them together.
	ReservePids int64
	// Tenant bounds what one tenant, the operator too, holds of the
	// node; zero fields: none beyond the node's and the share's.
	Tenant TenantLimits
	// TenantShare is the part of the node's capacity (each of its vCPUs,
	// memory and disk, after the reserves and overcommit) that one tenant
	// may hold, so that one tenant cannot starve the others; 1 lets a
	// tenant take the whole node. The operator (api.AdminTenant) is not
	// bounded by it. 0 takes the default.
	TenantShare float64
}

// TenantLimits bound what one tenant holds on the node at once.
type TenantLimits struct {
	Sandboxes int
	CPUs      float64
	MemoryMB  int64
	DiskMB    int64
}

// DefaultAdmission are the documented defaults (docs/SECURITY.md).
var DefaultAdmission = Admission{
	CPUOvercommit: 32, MemoryOvercommit: 1.5, DiskOvercommit: 4,
	ReservePids: 2048,
	Tenant:      TenantLimits{Sandboxes: 256},
	TenantShare: 0.5,
}

// vmOverheadMB is what a VM sandbox's QEMU holds beyond its guest's memory
// (its heap and devices, and TCG's code buffer: docs/BENCHMARKS.md).
const vmOverheadMB = 224

// claim is what one sandbox holds of the node.
type claim struct {
	tenant   string
	cpus     float64
	memoryMB int64
	diskMB   int64
}

// capacity is what the node may promise in all.
type capacity struct {
	cpus          float64
	memoryMB      int64 // after the reserve, times the overcommit
	diskMB        int64
	hostMemoryMB  int64 // after the reserve: the most one sandbox may have
	maxPids       int64
	reserveDiskMB int64
	// share is what one tenant but the operator may hold of it
	// (Admission.TenantShare); zero fields: no bound.
	share TenantLimits
}

// newCapacity works out the node's capacity from the host's and a.
func newCapacity(h HostCapacity, a Admission) (capacity, Admission) {
	d := DefaultAdmission
	for _, f := range []struct{ v, def *float64 }{
		{&a.CPUOvercommit, &d.CPUOvercommit}, {&a.MemoryOvercommit, &d.MemoryOvercommit}, {&a.DiskOvercommit, &d.DiskOvercommit},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if a.ReserveMemoryMB <= 0 {
		a.ReserveMemoryMB = max(1024, h.MemoryMB/10)
	}
	if a.ReserveDiskMB <= 0 {
		a.ReserveDiskMB = min(max(2048, h.DiskMB/20), 10<<10)
	}
	if a.ReservePids <= 0 {
		a.ReservePids = d.ReservePids
	}
	if a.Tenant.Sandboxes <= 0 {
		a.Tenant.Sandboxes = d.Tenant.Sandboxes
	}
	if a.TenantShare <= 0 || a.TenantShare > 1 {
		a.TenantShare = d.TenantShare
	}
	hostMem := max(0, h.MemoryMB-a.ReserveMemoryMB)
	c := capacity{
		cpus:          float64(h.CPUs) * a.CPUOvercommit,
		memoryMB:      int64(float64(hostMem) * a.MemoryOvercommit),
		diskMB:        int64(float64(h.DiskMB) * a.DiskOvercommit),
		hostMemoryMB:  hostMem,
		maxPids:       max(0, h.PidMax-a.ReservePids),
		reserveDiskMB: a.ReserveDiskMB,
	}
	if a.TenantShare < 1 {
		c.share = TenantLimits{CPUs: c.cpus * a.TenantShare, MemoryMB: int64(float64(c.memoryMB) * a.TenantShare),
			DiskMB: int64(float64(c.diskMB) * a.TenantShare)}
	}
	return c, a
}

// HostShare is what all sandboxes together may really use of the host,
// whatever the overcommit: its memory and its pids less the reserves. The
// daemon sets them as the limits of the warren parent cgroup.
func HostShare(h HostCapacity, a Admission) (memoryMB, pids int64) {
	c, _ := newCapacity(h, a)
	return c.hostMemoryMB, c.maxPids
}

// ledger holds the claims of the node's sandboxes. It is safe for
// concurrent use; it does no I/O.
type ledger struct {
	cap    capacity
	tenant TenantLimits

	mu     sync.Mutex
	claims map[string]claim // by sandbox ID; guarded by mu
	// scratchMB is the free disk that builds and imports hold for their
	// scratch files (reserveScratch); guarded by mu.
	scratchMB int64
}

func newLedger(cap capacity, tenant TenantLimits) *ledger {
	return &ledger{cap: cap, tenant: tenant, claims: map[string]claim{}}
}

// fits checks one sandbox's own size against the host: no overcommit lets
// one sandbox have more memory or pids than the host has.
func (l *ledger) fits(memoryMB, pids int64) error {
	if memoryMB > l.cap.hostMemoryMB {
		return api.Errorf(api.CodeBadRequest, "memory_mb %d is more than this node has for sandboxes (%d MiB: its memory less a reserve for the host)", memoryMB, l.cap.hostMemoryMB)
	}
	if pids > l.cap.maxPids {
		return api.Errorf(api.CodeBadRequest, "pids %d is more than this node has for sandboxes (%d: its pid_max less a reserve for the host)", pids, l.cap.maxPids)
	}
	return nil
}

// admit records the claims of sandboxes ids (all of one tenant) if the
// node and the tenant can hold them all, and none otherwise: 409 for CPUs
// and memory, 507 for disk, 429 for the tenant's limits, each naming what
// is short.
func (l *ledger) admit(ids []string, c claim) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var node claim
	for _, h := range l.claims {
		node.cpus += h.cpus
		node.memoryMB += h.memoryMB
		node.diskMB += h.diskMB
	}
	n := len(ids)
	want := claim{cpus: c.cpus * float64(n), memoryMB: c.memoryMB * int64(n), diskMB: c.diskMB * int64(n)}
	sandboxes := "a sandbox"
	if n > 1 {
		sandboxes = fmt.Sprintf("%d sandboxes", n)
	}
	if c.tenant != pooled {
		if err := l.overTenant(c.tenant, want, n); err != nil {
			return err
		}
	}
	switch {
	case node.cpus+want.cpus > l.cap.cpus:
		return api.Errorf(api.CodeConflict, "this node cannot hold %s of %g vCPUs: %g of its %g are promised", sandboxes, c.cpus, node.cpus, l.cap.cpus)
	case node.memoryMB+want.memoryMB > l.cap.memoryMB:
		return api.Errorf(api.CodeConflict, "this node cannot hold %s of %d MiB memory: %d of its %d MiB are promised", sandboxes, c.memoryMB, node.memoryMB, l.cap.memoryMB)
	case node.diskMB+want.diskMB > l.cap.diskMB:
		return api.Errorf(api.CodeInsufficientStorage, "this node cannot hold %s of %d MiB disk: %d of its %d MiB are promised", sandboxes, c.diskMB, node.diskMB, l.cap.diskMB)
	}
	for _, id := range ids {
		l.claims[id] = c
	}
	return nil
}

// pooled is the tenant of a warm pool's member (pools.go): the node's own
// until a create claims it, bounded by the node's capacity only.
const pooled = ""

// overTenant says why tenant may not hold n more sandboxes claiming want
// in all on the node, or returns nil. l.mu is held.
func (l *ledger) overTenant(tenant string, want claim, n int) error {
	var held claim
	count := 0
	for _, h := range l.claims {
		if h.tenant == tenant {
			count++
			held.cpus += h.cpus
			held.memoryMB += h.memoryMB
			held.diskMB += h.diskMB
		}
	}
	t := l.tenant
	if t.Sandboxes > 0 && count+n > t.Sandboxes {
		return api.Errorf(api.CodeTooMany, "tenant quota: at most %d sandboxes at once on this node (%d running)", t.Sandboxes, count)
	}
	if err := over(t, held, want, "tenant quota"); err != nil {
		return err
	}
	if tenant == api.AdminTenant {
		return nil
	}
	return over(l.cap.share, held, want, "tenant share (--tenant-share)")
}

// over says why a tenant holding held may not hold want more within t's
// vCPUs, memory and disk (zero: no bound), naming the bound what.
func over(t TenantLimits, held, want claim, what string) error {
	switch {
	case t.CPUs > 0 && held.cpus+want.cpus > t.CPUs:
		return api.Errorf(api.CodeTooMany, "%s: at most %g vCPUs on this node (%g held, %g asked)", what, t.CPUs, held.cpus, want.cpus)
	case t.MemoryMB > 0 && held.memoryMB+want.memoryMB > t.MemoryMB:
		return api.Errorf(api.CodeTooMany, "%s: at most %d MiB of memory on this node (%d held, %d asked)", what, t.MemoryMB, held.memoryMB, want.memoryMB)
	case t.DiskMB > 0 && held.diskMB+want.diskMB > t.DiskMB:
		return api.Errorf(api.CodeTooMany, "%s: at most %d MiB of disk on this node (%d held, %d asked)", what, t.DiskMB, held.diskMB, want.diskMB)
	}
	return nil
}

// couldHold says why the node could never hold n sandboxes of claim c
// at once, or returns nil.
func (l *ledger) couldHold(c claim, n int) error {
	switch f := float64(n); {
	case c.cpus*f > l.cap.cpus:
		return api.Errorf(api.CodeConflict, "this node cannot hold %d sandboxes of %g vCPUs: it may promise %g in all", n, c.cpus, l.cap.cpus)
	case c.memoryMB*int64(n) > l.cap.memoryMB:
		return api.Errorf(api.CodeConflict, "this node cannot hold %d sandboxes of %d MiB memory: it may promise %d MiB in all", n, c.memoryMB, l.cap.memoryMB)
	case c.diskMB*int64(n) > l.cap.diskMB:
		return api.Errorf(api.CodeInsufficientStorage, "this node cannot hold %d sandboxes of %d MiB disk: it may promise %d MiB in all", n, c.diskMB, l.cap.diskMB)
	}
	return nil
}

// assign gives pooled sandbox id, which the node holds already, to
// tenant, if the tenant's bounds leave room for it.
func (l *ledger) assign(id, tenant string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.claims[id]
	if !ok || c.tenant != pooled {
		return fmt.Errorf("sandbox %s is no pool member of the ledger", id)
	}
	if err := l.overTenant(tenant, c, 1); err != nil {
		return err
	}
	c.tenant = tenant
	l.claims[id] = c
	return nil
}

// release drops sandbox id's claim; releasing twice, or an ID without a
// claim, does nothing.
func (l *ledger) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.claims, id)
}

// restore records the claim of a sandbox adopted after a restart, whether
// or not it fits: it already runs.
func (l *ledger) restore(id string, c claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims[id] = c
}

// diskFree checks the free disk of the node, less what scratch files may
// still take, against its reserve.
func (l *ledger) diskFree(freeMB int64, what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.diskFreeLocked(freeMB, 0, what)
}

func (l *ledger) diskFreeLocked(freeMB, wantMB int64, what string) error {
	if left := freeMB - l.scratchMB - wantMB; left < l.cap.reserveDiskMB {
		if l.scratchMB+wantMB > 0 {
			return api.Errorf(api.CodeInsufficientStorage, "this node's disk has %d MiB free, of which builds and imports may still take %d MiB: %s refused below its reserve of %d MiB, until space is freed", freeMB, l.scratchMB+wantMB, what, l.cap.reserveDiskMB)
		}
		return api.Errorf(api.CodeInsufficientStorage, "this node's disk has %d MiB free, below its reserve of %d MiB: %s refused until space is freed", freeMB, l.cap.reserveDiskMB, what)
	}
	return nil
}

// holdScratch holds wantMB of the node's free disk (freeMB now) for a
// build's or an import's scratch files, if that leaves the reserve free
// beside every other hold; the returned func gives it back, once.
func (l *ledger) holdScratch(freeMB, wantMB int64, what string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.diskFreeLocked(freeMB, wantMB, what); err != nil {
		return nil, err
	}
	l.scratchMB += wantMB
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.scratchMB -= wantMB
			l.mu.Unlock()
		})
	}, nil
}

// Usage is what the node may promise in all (Capacity, its host's less
// the reserves, times the overcommit) and what its sandboxes hold of it
// (Claimed), as the fleet's scheduler is told.
type Usage struct {
	Capacity, Claimed Amounts
	// Sandboxes is how many sandboxes hold a claim.
	Sandboxes int
}

// Amounts are vCPUs, memory and disk.
type Amounts struct {
	CPUs     float64
	MemoryMB int64
	DiskMB   int64
}

// usage sums the claims.
func (l *ledger) usage() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := Usage{Capacity: Amounts{CPUs: l.cap.cpus, MemoryMB: l.cap.memoryMB, DiskMB: l.cap.diskMB}, Sandboxes: len(l.claims)}
	for _, c := range l.claims {
		u.Claimed.CPUs += c.cpus
		u.Claimed.MemoryMB += c.memoryMB
		u.Claimed.DiskMB += c.diskMB
	}
	return u
}
