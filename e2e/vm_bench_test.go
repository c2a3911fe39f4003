//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// Run with (docs/BENCHMARKS.md records the figures; under TCG here):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test \
//     go test ./e2e -run '^$' -bench IdleVMs -benchtime 1x -count 2 -v

// idleVMs is how many idle sandboxes of each kind BenchmarkIdleVMs keeps
// alive at once: each vm boot takes seconds under TCG.
const idleVMs = 4

// BenchmarkIdleVMs boots idleVMs idle vm sandboxes of 256 MiB, then of
// 512 MiB, and reports what each costs the host once settled: the drop in
// MemAvailable per VM and the charge of each QEMU's memory cgroup, split
// into anonymous memory (guest RAM the guest touched, QEMU's heap, TCG's
// code buffer), page cache and kernel memory. The baseline, in the same
// run: as many idle container sandboxes.
func BenchmarkIdleVMs(b *testing.B) {
	rt := needVM(b)
	b.Logf("accel %s", rt.Accel)
	for _, mib := range []int64{256, 512} {
		b.Run(fmt.Sprintf("vm-%dMiB", mib), func(b *testing.B) {
			for b.Loop() {
				idleSandboxes(b, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "vm", MemoryMB: mib, CPUs: 1}}, idleVMs)
			}
		})
	}
	b.Run("container", func(b *testing.B) {
		for b.Loop() {
			idleSandboxes(b, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "container", MemoryMB: 512, CPUs: 1}}, idleVMs)
		}
	})
}

// idleSandboxes creates n sandboxes of req, lets them settle, reports
// their memory per sandbox, and deletes them; only the creates are timed.
// It returns two of the figures, host-MiB/sandbox and cgroup-MiB/sandbox.
func idleSandboxes(b *testing.B, req api.CreateSandboxRequest, n int) map[string]float64 {
	c := shared.client()
	ctx := context.Background()
	b.StopTimer()
	dropCaches()
	before := memAvailable(b)
	var ids []string
	b.Cleanup(func() {
		for _, id := range ids {
			c.DeleteSandbox(ctx, id)
		}
	})
	var boot time.Duration
	for i := range n {
		t0 := time.Now()
		b.StartTimer()
		sb, err := c.CreateSandbox(ctx, req)
		b.StopTimer()
		if err != nil {
			b.Fatalf("sandbox %d: %v\ndaemon log:\n%s", i, err, shared.log.tail(30))
		}
		boot += time.Since(t0)
		ids = append(ids, sb.ID)
		if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec in %s: %+v %v", sb.ID, res, err)
		}
	}
	settle := settleMemory(ids)
	dropCaches()
	after := memAvailable(b)
	cpu := func() (d time.Duration) {
		for _, id := range ids {
			d += cgroupCPU(id)
		}
		return d
	}
	const idleFor = 10 * time.Second
	cpu0 := cpu()
	time.Sleep(idleFor)
	idleCPU := cpu() - cpu0

	var charged, anon, cache, kmem, qemuRSS, guestRAM, tcgCode, thp, guestUsed int64
	for _, id := range ids {
		charged += cgroupMemory(id)
		st := memStat(id)
		anon += st["rss"] + st["anon"] // v1 rss, v2 anon
		cache += st["cache"] + st["file"]
		kmem += cgroupKmem(id)
		if req.Runtime == "vm" {
			if pids := qemuOf(id); len(pids) == 1 {
				qemuRSS += statusBytes(pids[0], "VmRSS")
				m := qemuMappings(pids[0], req.MemoryMB)
				guestRAM += m.guestRAM
				tcgCode += m.tcgCode
				thp += m.thp
			}
			res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "grep -E '^(MemTotal|MemFree):' /proc/meminfo"})
			if err == nil {
				m := meminfo(res.Stdout)
				guestUsed += m["MemTotal"] - m["MemFree"]
			}
		}
	}
	mib := func(v int64) float64 { return float64(v) / float64(len(ids)) / (1 << 20) }
	b.ReportMetric(boot.Seconds()/float64(len(ids)), "create-s/op")
	figs := map[string]float64{"host-MiB/sandbox": mib(before - after), "cgroup-MiB/sandbox": mib(charged),
		"idle-CPU-ms/s/sandbox": idleCPU.Seconds() * 1000 / idleFor.Seconds() / float64(len(ids))}
	for unit, v := range figs {
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(mib(anon), "rss-MiB/sandbox")
	b.ReportMetric(mib(cache), "cache-MiB/sandbox")
	b.ReportMetric(mib(kmem), "kmem-MiB/sandbox")
	if req.Runtime == "vm" {
		b.ReportMetric(mib(qemuRSS), "qemu-VmRSS-MiB/sandbox")
		b.ReportMetric(mib(guestRAM), "guest-RAM-resident-MiB/sandbox")
		b.ReportMetric(mib(tcgCode), "tcg-code-MiB/sandbox")
		b.ReportMetric(mib(thp), "THP-MiB/sandbox")
		b.ReportMetric(mib(guestUsed), "guest-used-MiB/sandbox")
		b.ReportMetric(mib(charged)/float64(req.MemoryMB), "cgroup/guest-memory")
	}
	b.Logf("%d %s sandboxes (%d MiB): settled after %v", len(ids), req.Runtime, req.MemoryMB, settle.Round(time.Second))

	for _, id := range ids {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	for _, id := range ids {
		wait.For(b, 30*time.Second, "the sandbox's processes to be gone", func() bool {
			return len(qemuOf(id)) == 0 && countInCgroup(id) == 0
		})
	}
	ids = nil
	b.StartTimer()
	return figs
}

// settleMemory waits, up to a minute, until the sandboxes' cgroups together
// change by less than 1 MiB a sandbox over 3 s, and returns how long that
// took. A guest goes on touching memory for a while after its agent answers.
func settleMemory(ids []string) time.Duration {
	t0 := time.Now()
	total := func() int64 {
		var s int64
		for _, id := range ids {
			s += cgroupMemory(id)
		}
		return s
	}
	last, stable := total(), 0
	for stable < 3 && time.Since(t0) < time.Minute {
		time.Sleep(time.Second) // the sampling period of what is measured: stable for 3 s
		now := total()
		if d := now - last; d < int64(len(ids))<<20 && d > -int64(len(ids))<<20 {
			stable++
		} else {
			stable = 0
		}
		last = now
	}
	return time.Since(t0)
}

// qemuMemory is where a QEMU's resident memory is, from its smaps.
type qemuMemory struct {
	// guestRAM is the resident part of the anonymous mapping exactly the
	// size of the guest's memory: guest RAM the guest (or QEMU, loading the
	// kernel and initrd) touched. Freed guest pages stay resident: nothing
	// tells the host (no balloon, no free page reporting).
	guestRAM int64
	// tcgCode is the resident part of anonymous rwx mappings: TCG's
	// translated-code buffer (tb-size).
	tcgCode int64
	// thp is the anonymous memory in transparent huge pages (QEMU asks for
	// them on guest RAM and on the code buffer): a guest that touches one
	// 4 KiB page makes 2 MiB resident.
	thp int64
}

func qemuMappings(pid string, guestMiB int64) qemuMemory {
	var m qemuMemory
	f, err := os.Open(filepath.Join("/proc", pid, "smaps"))
	if err != nil {
		return m
	}
	defer f.Close()
	var size int64
	var perms string
	var anon bool // no backing file
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, _ := strings.Cut(fields[0], "-")
			a, _ := strconv.ParseUint(lo, 16, 64)
			z, _ := strconv.ParseUint(hi, 16, 64)
			size, perms, anon = int64(z-a), fields[1], len(fields) == 5
			continue
		}
		if len(fields) != 3 || fields[2] != "kB" {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch {
		case fields[0] == "Rss:" && anon && size == guestMiB<<20:
			m.guestRAM += kb << 10
		case fields[0] == "Rss:" && anon && perms == "rwxp":
			m.tcgCode += kb << 10
		case fields[0] == "AnonHugePages:":
			m.thp += kb << 10
		}
	}
	return m
}

// memStat is the sandbox's cgroup memory.stat (v1: rss, cache, ...; v2:
// anon, file, kernel, ...), in bytes.
func memStat(id string) map[string]int64 {
	st := map[string]int64{}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/memory/warren", id, "memory.stat"),
		filepath.Join("/sys/fs/cgroup/warren", id, "memory.stat"),
	} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok {
				st[k], _ = strconv.ParseInt(v, 10, 64)
			}
		}
		f.Close()
		break
	}
	return st
}

// cgroupKmem is the kernel memory charged to the sandbox's cgroup: v1's
// memory.kmem.usage_in_bytes, v2's "kernel" of memory.stat.
func cgroupKmem(id string) int64 {
	if s := cgroupValue(id, "memory", "memory.kmem.usage_in_bytes", ""); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	return memStat(id)["kernel"]
}

// statusBytes is a "kB" field of /proc/PID/status, in bytes.
func statusBytes(pid, field string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	return meminfo(string(b))[field]
}

// meminfo parses "Name:   N kB" lines into bytes.
func meminfo(s string) map[string]int64 {
	m := map[string]int64{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			if f := strings.Fields(v); len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				m[k] = n << 10
			}
		}
	}
	return m
}

// BenchmarkLiveFork: forks of N = 1, 8 and 32 children of a running
// sandbox of 256 MiB or a little more, each iteration from a new parent,
// per runtime: container (the baseline: its fork is of the disk alone, the
// children starting afresh), then gvisor and vm (memory and disk). It
// reports how long the parent stopped (paused-ms, the server's figure:
// the container runtime's is how long its writes waited), the time from
// the fork's request to every child's first exec of `true`
// (first-exec-ms), and the cold create of its parent, one sandbox of the
// same shape, to its first exec (cold-ms); each as a p50, and its ratio to
// container's in the same run. vm's accel is the machine's (TCG here).
func BenchmarkLiveFork(b *testing.B) {
	need(b)
	ctx := context.Background()
	cl := shared.client()
	// Each parent a shape of its own (256 MiB and up), which no memory image
	// has: its create is a cold start.
	shape := int64(255)
	firstExec := func(id string) error {
		_, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
		return err
	}
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("children=%d", n), func(b *testing.B) {
			compareRuntimes(b, []string{"container", "gvisor", "vm"}, func(b *testing.B, rt string) map[string]float64 {
				var pauses, firsts, colds []time.Duration
				for b.Loop() {
					b.StopTimer()
					shape++
					t0 := time.Now()
					parent, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
						Runtime: rt, MemoryMB: shape, TimeoutSeconds: 600}})
					if err != nil {
						b.Fatal(err)
					}
					if err := firstExec(parent.ID); err != nil {
						b.Fatal(err)
					}
					colds = append(colds, time.Since(t0))
					b.StartTimer()
					t1 := time.Now()
					res, err := cl.Fork(ctx, parent.ID, api.ForkRequest{Count: n})
					if err != nil {
						b.Fatal(err)
					}
					var wg sync.WaitGroup
					for _, kid := range res.Sandboxes {
						wg.Go(func() {
							if err := firstExec(kid.ID); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
					firsts = append(firsts, time.Since(t1))
					pauses = append(pauses, time.Duration(res.PausedMs*float64(time.Millisecond)))
					b.StopTimer()
					for _, sb := range append(res.Sandboxes, *parent) {
						cl.DeleteSandbox(ctx, sb.ID)
					}
					cl.DeleteSnapshot(ctx, res.Snapshot.ID)
					b.StartTimer()
				}
				figs := map[string]float64{"paused-ms": ms(median(pauses)), "first-exec-ms": ms(median(firsts)), "cold-ms": ms(median(colds))}
				for unit, v := range figs {
					b.ReportMetric(v, unit)
				}
				return figs
			})
		})
	}
}
