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
		{"256 GiB disks", Admission{}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 256 << 10}, 30), 1, 3,
			api.CodeInsufficientStorage, "cannot hold a sandbox of 262144 MiB disk"},
		{"memory", Admission{}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 8 << 10, diskMB: 1}, 10), 1, 4,
			api.CodeConflict, "MiB memory"},
		{"cpus", Admission{CPUOvercommit: 4}, repeat(claim{tenant: "t", cpus: 2, memoryMB: 64, diskMB: 1}, 10), 1, 4,
			api.CodeConflict, "of 2 vCPUs: 8 of its 8 are promised"},
		{"a restore of 256 at once", Admission{}, []claim{{tenant: "t", cpus: 1, memoryMB: 512, diskMB: 2048}}, 256, 0,
			api.CodeConflict, "cannot hold 256 sandboxes"},
		{"tenant sandboxes", Admission{Tenant: TenantLimits{Sandboxes: 3}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 1}, 5), 1, 3,
			api.CodeTooMany, "at most 3 sandboxes"},
		{"tenant memory", Admission{Tenant: TenantLimits{MemoryMB: 1000}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 400, diskMB: 1}, 5), 1, 2,
			api.CodeTooMany, "at most 1000 MiB of memory"},
		{"tenant cpus", Admission{Tenant: TenantLimits{CPUs: 1}}, repeat(claim{tenant: "t", cpus: 0.5, memoryMB: 64, diskMB: 1}, 5), 1, 2,
			api.CodeTooMany, "at most 1 vCPUs"},
		{"tenant disk", Admission{Tenant: TenantLimits{DiskMB: 5000}}, repeat(claim{tenant: "t", cpus: 0.1, memoryMB: 64, diskMB: 2048}, 5), 1, 2,
			api.CodeTooMany, "at most 5000 MiB of disk"},
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
