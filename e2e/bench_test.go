//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// Run with (see docs/BENCHMARKS.md for the exact commands and figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test \
//     go test ./e2e -run '^$' -bench 'Create|Unshare|Exec' -benchtime 100x
// Each benchmark pairs with its baseline in the same run; docs/BENCHMARKS.md
// records the figures as ratios.

// reportPercentiles adds p50 and p99 of ds (in ms) to b's metrics, and
// returns the p50.
func reportPercentiles(b *testing.B, ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	pct := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	b.ReportMetric(ms(pct(0.50)), "p50-ms")
	b.ReportMetric(ms(pct(0.99)), "p99-ms")
	return pct(0.50)
}

// benchRuntimes are the runtimes the benchmarks compare, the baseline
// (container) first; vm runs where the daemon has it (under TCG here, so
// only the benchmarks that ask for it).
var benchRuntimes = []string{"container", "gvisor"}

// compareRuntimes runs f as a sub-benchmark per runtime of runtimes, each
// skipped when the daemon lacks it or says it is unavailable. f returns
// its figures by unit; every runtime after the first reports each figure
// the first also had as a ratio to the first's in the same run (unit
// "FIGURE-x-FIRST", "-ms" trimmed: p50-x-container).
func compareRuntimes(b *testing.B, runtimes []string, f func(b *testing.B, rt string) map[string]float64) {
	var base map[string]float64
	for i, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			runtimeInfo(b, rt)
			figs := f(b, rt)
			if i == 0 {
				base = figs
				return
			}
			for unit, v := range figs {
				if bv := base[unit]; bv > 0 {
					b.ReportMetric(v/bv, strings.TrimSuffix(unit, "-ms")+"-x-"+runtimes[0])
				}
			}
		})
	}
}

// median is the p50 of ds, as reportPercentiles has it (ds is sorted).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

// ms is d in milliseconds, as figures are reported.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkCreateToFirstExec: create a sandbox of the default template
// and run `true` in it, with a pause between creates (outside the timing)
// in which the daemon refills what it keeps warm: what a harness that
// creates now and then sees. Per runtime, container (the baseline) first,
// then gvisor and vm, and two ways:
//   - cold: each create a shape (memory) of its own, which no memory
//     image has: gvisor and vm boot; the container runtime takes one of
//     its warm inits, as every create of it does;
//   - memory: a shape whose memory image is ready (two boots make it):
//     gvisor and vm restore it; the container runtime has no images, and
//     its create is as in cold.
//
// No sandbox pool here: BenchmarkCreateToFirstExecPool.
func BenchmarkCreateToFirstExec(b *testing.B) {
	need(b)
	shape := int64(600) // cold shapes, one per create of the whole run
	for _, start := range []string{"cold", "memory"} {
		b.Run(start, func(b *testing.B) {
			compareRuntimes(b, slices.Concat(benchRuntimes, []string{"vm"}), func(b *testing.B, rt string) map[string]float64 {
				// Each runtime's memory shape is its own: no runtime meets
				// another's image.
				spec := api.SandboxSpec{Runtime: rt, CPUs: 1, MemoryMB: memoryStartMB - 32}
				if rt == "vm" {
					spec.MemoryMB = memoryStartMB
				}
				if start == "memory" && rt != "container" {
					primeImage(b, spec)
				}
				p50 := createToFirstExec(b, func() api.SandboxSpec {
					if start == "cold" {
						shape++
						spec.MemoryMB = shape
					}
					return spec
				}, 300*time.Millisecond)
				return map[string]float64{"p50-ms": ms(p50)}
			})
		})
	}
}

// BenchmarkCreateToFirstExecBackToBack: container sandboxes of the default
// shape without pauses, so once the daemon's warm inits are drained every
// create starts its init on the spot.
func BenchmarkCreateToFirstExecBackToBack(b *testing.B) {
	need(b)
	createToFirstExec(b, func() api.SandboxSpec { return api.SandboxSpec{Runtime: "container"} }, 0)
}

// createToFirstExec times, per iteration, the create of a sandbox of
// spec() and its first exec of `true`; it deletes the sandbox and waits
// pause outside the timing, and reports and returns the p50.
func createToFirstExec(b *testing.B, spec func() api.SandboxSpec, pause time.Duration) time.Duration {
	c := shared.client()
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		req := api.CreateSandboxRequest{SandboxSpec: spec()}
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		time.Sleep(pause) // the pause between creates the benchmark is about
		b.StartTimer()
	}
	return reportPercentiles(b, ds)
}

// primeImage makes sure the default template's memory image of spec's
// shape is ready on the shared daemon: two creates of the shape boot, and
// the daemon prepares the image after the second.
func primeImage(b *testing.B, spec api.SandboxSpec) {
	b.Helper()
	ctx := context.Background()
	c := shared.client()
	if _, ok := memoryImage(b, spec.Runtime, spec.MemoryMB); !ok {
		for range 2 {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: spec})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	wait.For(b, 3*time.Minute, "the memory image ready", func() bool {
		img, ok := memoryImage(b, spec.Runtime, spec.MemoryMB)
		return ok && img.State == "ready"
	})
}

// BenchmarkUnshareChrootBaseline: the floor for a container start on the
// same image: unshare the same namespaces and chroot into the template's
// (read-only mounted) root to run `true`.
func BenchmarkUnshareChrootBaseline(b *testing.B) {
	need(b)
	root := mountTemplate(b)
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := unshareChroot(root); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
}

// unshareChroot runs /bin/true in fresh namespaces chrooted into root: the
// floor of starting any container.
func unshareChroot(root string) error {
	cmd := exec.Command("unshare", "--pid", "--mount", "--uts", "--ipc", "--net", "--user", "--map-root-user", "--fork",
		"chroot", root, "/bin/true")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unshare: %v: %s", err, out)
	}
	return nil
}

// mountTemplate mounts the shared daemon's default template read-only.
func mountTemplate(b *testing.B) string {
	img := filepath.Join(shared.dataDir, "disks", "templates", "default.img")
	dir := b.TempDir()
	if out, err := exec.Command("mount", "-o", "loop,ro", img, dir).CombinedOutput(); err != nil {
		b.Fatalf("mount template: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// BenchmarkExecTrueAPI: the round trip of `true` through the HTTP API, the
// server, the agent and back, per runtime (container, the baseline, then
// gvisor).
func BenchmarkExecTrueAPI(b *testing.B) {
	need(b)
	compareRuntimes(b, benchRuntimes, func(b *testing.B, rt string) map[string]float64 {
		id := shared.newSandbox(b, "--runtime", rt)
		c := shared.client()
		ctx := context.Background()
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
			ds = append(ds, time.Since(start))
		}
		return map[string]float64{"p50-ms": ms(reportPercentiles(b, ds))}
	})
}

// BenchmarkForkExecTrue: a bare fork/exec of `true` on the host, the floor of
// any exec.
func BenchmarkForkExecTrue(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
}

// BenchmarkIdleSandboxes keeps 40 sandboxes of 128 MiB and half a CPU alive
// at once, per runtime (container, the baseline, then gvisor), and reports
// what each idle one costs the host (idleSandboxes): the drop in
// MemAvailable per sandbox, the memory its cgroup is charged (for gvisor,
// the Sentry's too: runsc joins the sandbox's cgroup), and the CPU it
// takes while idle. 40, not 100: idle gvisor sandboxes take the CPU of
// this 2-core machine well before 100.
func BenchmarkIdleSandboxes(b *testing.B) {
	need(b)
	compareRuntimes(b, benchRuntimes, func(b *testing.B, rt string) map[string]float64 {
		var figs map[string]float64
		for b.Loop() {
			figs = idleSandboxes(b, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, MemoryMB: 128, CPUs: 0.5}}, 40)
		}
		return figs
	})
}

// cgroupCPU is the CPU time the sandbox's cgroup has used (v1 or v2).
func cgroupCPU(id string) time.Duration {
	if b, err := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/cpuacct/warren/%s/cpuacct.usage", id)); err == nil {
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/warren/%s/cpu.stat", id))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond
		}
	}
	return 0
}

// dropCaches drops clean page cache, so MemAvailable compares like with like.
func dropCaches() {
	exec.Command("sync").Run()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
}

func memAvailable(b *testing.B) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// cgroupMemory is what the sandbox's memory cgroup is charged (v1 or v2).
func cgroupMemory(id string) int64 {
	for _, p := range []string{
		fmt.Sprintf("/sys/fs/cgroup/memory/warren/%s/memory.usage_in_bytes", id),
		fmt.Sprintf("/sys/fs/cgroup/warren/%s/memory.current", id),
	} {
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	return 0
}
