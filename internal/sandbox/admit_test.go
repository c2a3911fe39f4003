package sandbox

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"warren/api"
)

// host is the build machine's shape: 2 CPUs, 24 GiB, a 250 GiB disk,
// pid_max 32768.
var host = HostCapacity{CPUs: 2, MemoryMB: 24 << 10, DiskMB: 250 << 10, PidMax: 32768}

func TestCapacityDefaults(t *testing.T) {
	c, a := newCapacity(host, Admission{})
	// Reserves: a tenth of the memory (2.4 GiB > 1 GiB), a twentieth of
	// the disk (12.5 GiB) held to 10 GiB.
	if a.ReserveMemoryMB != 2457 || a.ReserveDiskMB != 10240 || a.ReservePids != 2048 {
		t.Errorf("reserves %d MiB, %d MiB, %d pids", a.ReserveMemoryMB, a.ReserveDiskMB, a.ReservePids)
	}
	if c.cpus != 64 || c.hostMemoryMB != 24576-2457 || c.memoryMB != 33178 ||
		c.diskMB != 4*250<<10 || c.maxPids != 32768-2048 {
		t.Errorf("capacity %+v", c)
	}
	if mem, pids := HostShare(host, Admission{}); mem != 24576-2457 || pids != 30720 {
		t.Errorf("HostShare = %d MiB, %d pids", mem, pids)
	}
	// The disk reserve is a twentieth of the filesystem between 2 and
	// 10 GiB: CI's 1 TiB disk with 51 GiB free refused every create when
	// it was a twentieth alone.
	for diskMB, want := range map[int64]int64{20 << 10: 2048, 100 << 10: 5120, 1 << 20: 10240} {
		if _, a := newCapacity(HostCapacity{CPUs: 2, MemoryMB: 4096, DiskMB: diskMB, PidMax: 32768}, Admission{}); a.ReserveDiskMB != want {
			t.Errorf("disk %d MiB: reserve %d MiB, want %d", diskMB, a.ReserveDiskMB, want)
		}
	}
}

// TestAdmission replays issue 13, item 4: what one tenant got the node to
// promise, now refused with the code and the shortfall named.
func TestAdmission(t *testing.T) {
	cases := []struct {
		name   string
		adm    Admission
		claims []claim // admitted one at a time until one fails
		n      int     // sandboxes per admit
		want   int     // how many admits succeed
		code   string
		msg    string
	}{
		{"256 GiB disks", Admission{TenantShare: 1}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 256 << 10}, 30), 1, 3,
			api.CodeInsufficientStorage, "cannot hold a sandbox of 262144 MiB disk"},
		{"memory", Admission{TenantShare: 1}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 8 << 10, diskMB: 1}, 10), 1, 4,
			api.CodeConflict, "MiB memory"},
		{"cpus", Admission{CPUOvercommit: 4, TenantShare: 1}, repeat(claim{tenant: "t", cpus: 2, memoryMB: 64, diskMB: 1}, 10), 1, 4,
			api.CodeConflict, "of 2 vCPUs: 8 of its 8 are promised"},
		{"a restore of 256 at once", Admission{TenantShare: 1}, []claim{{tenant: "t", cpus: 1, memoryMB: 512, diskMB: 2048}}, 256, 0,
			api.CodeConflict, "cannot hold 256 sandboxes"},
		{"tenant sandboxes", Admission{Tenant: TenantLimits{Sandboxes: 3}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 1}, 5), 1, 3,
			api.CodeTooMany, "at most 3 sandboxes"},
		{"tenant memory", Admission{Tenant: TenantLimits{MemoryMB: 1000}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 400, diskMB: 1}, 5), 1, 2,
			api.CodeTooMany, "at most 1000 MiB of memory"},
		{"tenant cpus", Admission{Tenant: TenantLimits{CPUs: 1}}, repeat(claim{tenant: "t", cpus: 0.5, memoryMB: 64, diskMB: 1}, 5), 1, 2,
			api.CodeTooMany, "at most 1 vCPUs"},
		{"tenant disk", Admission{Tenant: TenantLimits{DiskMB: 5000}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 2048}, 5), 1, 2,
			api.CodeTooMany, "at most 5000 MiB of disk"},
		{"tenant share of memory", Admission{}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 8 << 10, diskMB: 1}, 10), 1, 2,
			api.CodeTooMany, "tenant share (--tenant-share): at most 16589 MiB of memory"},
		{"tenant share of cpus", Admission{CPUOvercommit: 4}, repeat(claim{tenant: "t", cpus: 2, memoryMB: 64, diskMB: 1}, 10), 1, 2,
			api.CodeTooMany, "at most 4 vCPUs"},
		{"the operator bounded by the node only", Admission{}, repeat(claim{tenant: api.AdminTenant, cpus: 0.1, memoryMB: 8 << 10, diskMB: 1}, 10), 1, 4,
			api.CodeConflict, "MiB memory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cap, adm := newCapacity(host, c.adm)
			l := newLedger(cap, adm.Tenant)
			ok := 0
			for i, cl := range c.claims {
				ids := make([]string, c.n)
				for j := range ids {
					ids[j] = fmt.Sprintf("sb-%d-%d", i, j)
				}
				err := l.admit(ids, cl)
				if err == nil {
					ok++
					continue
				}
				if !api.IsCode(err, c.code) || !strings.Contains(err.Error(), c.msg) {
					t.Errorf("admit %d: %v, want %s naming %q", i, err, c.code, c.msg)
				}
				break
			}
			if ok != c.want {
				t.Errorf("%d admitted, want %d", ok, c.want)
			}
		})
	}
}

func repeat(c claim, n int) []claim {
	out := make([]claim, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// TestTenantShare replays issue 35, row 8: tenant A's five large
// sandboxes took the whole node and B's default create was refused (409,
// node memory promised). A tenant now holds at most half the node unless
// the operator says otherwise.
func TestTenantShare(t *testing.T) {
	cap, adm := newCapacity(host, Admission{})
	l := newLedger(cap, adm.Tenant)
	large := claim{tenant: "a", cpus: 4, memoryMB: 6600, diskMB: 10 << 10}
	admitted := 0
	for i := range 5 {
		if err := l.admit([]string{fmt.Sprint("a", i)}, large); err != nil {
			if !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "tenant share") {
				t.Fatalf("a's sandbox %d: %v, want the tenant's share", i, err)
			}
			break
		}
		admitted++
	}
	if admitted != 2 {
		t.Errorf("a got %d sandboxes of 6600 MiB, want 2 (half of %d MiB)", admitted, cap.memoryMB)
	}
	if err := l.admit([]string{"b1"}, claim{tenant: "b", cpus: 1, memoryMB: 512 + 64, diskMB: 2 << 10}); err != nil {
		t.Errorf("b's default create beside a at its share: %v", err)
	}
	if c, _ := newCapacity(host, Admission{TenantShare: 1}); c.share != (TenantLimits{}) {
		t.Errorf("share 1: a tenant is bounded by %+v, want the node only", c.share)
	}
	// An explicit bound holds the operator too (e2e TestTenantQuota, with
	// --tenant-max-sandboxes 2 and the admin key, took a third sandbox
	// when the operator was exempt from every bound).
	cap, adm = newCapacity(host, Admission{Tenant: TenantLimits{Sandboxes: 1}})
	l = newLedger(cap, adm.Tenant)
	op := claim{tenant: api.AdminTenant, cpus: 1, memoryMB: 64, diskMB: 1}
	if err := l.admit([]string{"o1"}, op); err != nil {
		t.Fatal(err)
	}
	if err := l.admit([]string{"o2"}, op); !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "at most 1 sandboxes") {
		t.Errorf("the operator's second past --tenant-max-sandboxes 1: %v", err)
	}
}

// TestScratchHolds: builds and imports hold the free disk their scratch
// may take, so that all of them at once still leave the reserve (issue
// 35, row 6: four OCI imports of 16 GiB each could run beyond the host's
// free space).
func TestScratchHolds(t *testing.T) {
	cap, adm := newCapacity(host, Admission{})
	l := newLedger(cap, adm.Tenant)
	const free = 20 << 10 // MiB; the reserve is 10 GiB
	r1, err := l.holdScratch(free, 6<<10, "imports are")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.holdScratch(free, 6<<10, "imports are"); !api.IsCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "may still take 12288 MiB") {
		t.Errorf("a second hold of 6 GiB with 20 GiB free: %v", err)
	}
	if err := l.diskFree(free-6<<10+100, "creates are"); !api.IsCode(err, api.CodeInsufficientStorage) {
		t.Errorf("a create once scratch may take the room above the reserve: %v", err)
	}
	r1()
	r1()
	r2, err := l.holdScratch(free, 6<<10, "imports are")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	r2()
	if l.scratchMB != 0 {
		t.Errorf("%d MiB held after every release", l.scratchMB)
	}
}

// TestAdmissionOthersUnaffected: one tenant at its quota leaves room for
// another, and released claims make room again.
func TestAdmissionOthersUnaffected(t *testing.T) {
	cap, adm := newCapacity(host, Admission{Tenant: TenantLimits{Sandboxes: 2}})
	l := newLedger(cap, adm.Tenant)
	small := func(tenant string) claim { return claim{tenant: tenant, cpus: 0.1, memoryMB: 64, diskMB: 1} }
	for _, id := range []string{"a1", "a2"} {
		if err := l.admit([]string{id}, small("a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.admit([]string{"a3"}, small("a")); !api.IsCode(err, api.CodeTooMany) {
		t.Errorf("a's third: %v, want too_many_requests", err)
	}
	if err := l.admit([]string{"b1"}, small("b")); err != nil {
		t.Errorf("b while a is at its quota: %v", err)
	}
	l.release("a1")
	l.release("a1")
	if err := l.admit([]string{"a3"}, small("a")); err != nil {
		t.Errorf("a after a release: %v", err)
	}
	// A restored claim counts even over the quota: it already runs.
	l.restore("a4", small("a"))
	if err := l.admit([]string{"a5"}, small("a")); !api.IsCode(err, api.CodeTooMany) {
		t.Errorf("over the quota after a restore: %v", err)
	}
}

func TestAdmissionFitsHost(t *testing.T) {
	cap, adm := newCapacity(host, Admission{})
	l := newLedger(cap, adm.Tenant)
	if err := l.fits(65536, 1024); !api.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "memory_mb 65536") {
		t.Errorf("65536 MiB on a 24 GiB host: %v", err)
	}
	if err := l.fits(512, 65536); !api.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "pids 65536") {
		t.Errorf("65536 pids with pid_max 32768: %v", err)
	}
	if err := l.fits(512, 1024); err != nil {
		t.Errorf("a default sandbox: %v", err)
	}
	if err := l.diskFree(1000, "creates are"); !api.IsCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "below its reserve of 10240 MiB") {
		t.Errorf("1000 MiB free: %v", err)
	}
}

// TestAdmissionConcurrent: admits racing for the last room never promise
// more than the node holds.
func TestAdmissionConcurrent(t *testing.T) {
	cap, adm := newCapacity(host, Admission{CPUOvercommit: 4})
	l := newLedger(cap, adm.Tenant)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 64 {
		wg.Go(func() {
			if l.admit([]string{fmt.Sprint(i)}, claim{tenant: fmt.Sprint(i % 4), cpus: 0.5, memoryMB: 64, diskMB: 1}) == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 16 { // 8 vCPUs of 0.5
		t.Errorf("%d admitted, want 16", admitted)
	}
}
