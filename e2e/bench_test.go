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
)

// Run with (see docs/BENCHMARKS.md for the exact commands and figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test \
//     go test ./e2e -run '^$' -bench 'Create|Unshare|Exec' -benchtime 100x
// Each benchmark pairs with its baseline in the same run; docs/BENCHMARKS.md
// records the figures as ratios.

// reportPercentiles adds p50 and p99 of ds (in ms) to b's metrics.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 {
		return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkCreateToFirstExec: create a container sandbox from the default
// template and run `true` in it, with a pause between creates (outside the
// timing) in which the daemon refills its pool of warm inits: what a
// harness that creates now and then sees.
func BenchmarkCreateToFirstExec(b *testing.B) {
	benchCreate(b, 300*time.Millisecond)
}

// BenchmarkCreateToFirstExecBackToBack: the same without pauses, so once the
// pool is drained every create starts its init on the spot (cold).
func BenchmarkCreateToFirstExecBackToBack(b *testing.B) {
	benchCreate(b, 0)
}

func benchCreate(b *testing.B, pause time.Duration) {
	need(b)
	c := shared.client()
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
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
	reportPercentiles(b, ds)
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
// server, the agent and back.
func BenchmarkExecTrueAPI(b *testing.B) {
	need(b)
	id := shared.newSandbox(b)
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
	reportPercentiles(b, ds)
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

// BenchmarkIdleSandboxes keeps 100 sandboxes alive at once and reports what
// each idle one costs the host: the drop in MemAvailable per sandbox, and
// the mean memory its cgroup is charged.
func BenchmarkIdleSandboxes(b *testing.B) {
	need(b)
	const n = 100
	c := shared.client()
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		dropCaches()
		before := memAvailable(b)
		b.StartTimer()
		var ids []string
		for i := 0; i < n; i++ {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			if err != nil {
				b.Fatalf("sandbox %d: %v", i, err)
			}
			ids = append(ids, sb.ID)
		}
		b.StopTimer()
		for _, id := range ids {
			if _, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
				b.Fatalf("exec in %s with %d alive: %v", id, n, err)
			}
		}
		time.Sleep(2 * time.Second) // let the agents go idle
		dropCaches()
		after := memAvailable(b)
		var charged int64
		for _, id := range ids {
			charged += cgroupMemory(id)
		}
		b.ReportMetric(float64(before-after)/n/(1<<20), "host-MiB/sandbox")
		b.ReportMetric(float64(charged)/n/(1<<20), "cgroup-MiB/sandbox")
		for _, id := range ids {
			if err := c.DeleteSandbox(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
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
