//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// pct is the p-quantile of ds, sorted here, as reportPercentiles has it.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(p*float64(len(ds)-1))]
}

// chunkHolder holds %d MiB of random bytes, made 16 MiB at a time: at no
// moment does it hold twice that (memoryHolder's copy would pass a
// container's limit of 512 MiB at 256 MiB held).
const chunkHolder = `
import os, time
held = [os.urandom(16 << 20) for _ in range(%d // 16)]
open('/tmp/holder.pid', 'w').write(str(os.getpid()))
while True:
    time.sleep(1)
`

// BenchmarkSleepWake: a durable pause and its wake per runtime (container
// the baseline), of a sandbox of 512 MiB in which a process holds 256 MiB
// and 100 MiB of its disk changed since its last pause. Each iteration
// writes the 100 MiB, pauses (timed: to its disk snapshot durable and the
// sandbox paused), then makes one exec, which wakes it (auto_resume),
// timed against an exec of `true` in the running sandbox just before the
// pause (the baseline of the same iteration): the first call's extra
// latency is the difference. A container's holder is gone after the wake
// and is started again; gvisor's and a vm's go on.
func BenchmarkSleepWake(b *testing.B) {
	need(b)
	runtimes := slices.Clone(benchRuntimes)
	if os.Getenv("WARREN_BENCH_VM") == "1" {
		runtimes = append(runtimes, "vm")
	}
	compareRuntimes(b, runtimes, func(b *testing.B, rt string) map[string]float64 {
		cl := shared.client()
		ctx := context.Background()
		id := shared.newSandbox(b, "--runtime", rt, "--memory", "512", "--auto-resume", "--disk", "5120")
		hold := func() {
			if _, err := cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", fmt.Sprintf(chunkHolder, 256)}}); err != nil {
				b.Fatal(err)
			}
			wait.For(b, 2*time.Minute, "the holder to hold its memory", func() bool {
				res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "test -s /tmp/holder.pid"})
				return err == nil && res.ExitCode == 0
			})
		}
		hold()
		var pauses, wakes, warm []time.Duration
		for b.Loop() {
			shared.sh(b, id, "head -c 100M /dev/urandom > /root/changed && sync")
			t0 := time.Now()
			if res, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v %v", res, err)
			}
			warm = append(warm, time.Since(t0))
			t1 := time.Now()
			p, err := cl.PauseSandbox(ctx, id)
			if err != nil {
				b.Fatalf("pause: %v\ndaemon log:\n%s", err, shared.log.tail(30))
			}
			pauses = append(pauses, time.Since(t1))
			t2 := time.Now()
			if res, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("the exec that wakes it: %+v %v\ndaemon log:\n%s", res, err, shared.log.tail(30))
			}
			wakes = append(wakes, time.Since(t2))
			if !p.Paused.Memory {
				shared.sh(b, id, "rm -f /tmp/holder.pid")
				hold()
			}
		}
		figs := map[string]float64{
			"pause-p50-ms": ms(pct(pauses, 0.5)), "pause-p99-ms": ms(pct(pauses, 0.99)),
			"wake-exec-p50-ms": ms(pct(wakes, 0.5)), "wake-exec-p99-ms": ms(pct(wakes, 0.99)),
			"warm-exec-p50-ms": ms(pct(warm, 0.5)),
		}
		figs["wake-extra-p50-ms"] = figs["wake-exec-p50-ms"] - figs["warm-exec-p50-ms"]
		for unit, v := range figs {
			b.ReportMetric(v, unit)
		}
		return figs
	})
}

// BenchmarkPausedDensity: what a paused sandbox costs the node, per
// runtime. Each iteration makes 10 sandboxes of 512 MiB in which a process
// holds 64 MiB, pauses them all, waits for a gvisor sandbox's memory to be
// saved (--pause-spill-after), and measures the host's available memory
// and the data directory's disk use against before they were made; then
// deletes them. Figures per paused sandbox; how many one node keeps is
// the node's memory (or free disk) over that.
func BenchmarkPausedDensity(b *testing.B) {
	need(b)
	const n = 10
	compareRuntimes(b, benchRuntimes, func(b *testing.B, rt string) map[string]float64 {
		cl := shared.client()
		ctx := context.Background()
		var memMiB, diskMiB []float64
		for b.Loop() {
			dropCaches()
			avail0, disk0 := memAvailable(b), nodeDiskMiB(b)
			var ids []string
			for range n {
				sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, MemoryMB: 512}})
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, sb.ID)
				if _, err := cl.StartProcess(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", fmt.Sprintf(chunkHolder, 64)}}); err != nil {
					b.Fatal(err)
				}
			}
			for _, id := range ids {
				wait.For(b, 2*time.Minute, "the holder to hold its memory", func() bool {
					res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "test -s /tmp/holder.pid"})
					return err == nil && res.ExitCode == 0
				})
				if _, err := cl.PauseSandbox(ctx, id); err != nil {
					b.Fatalf("pause: %v", err)
				}
			}
			if rt == "gvisor" {
				for _, id := range ids {
					wait.For(b, spillAfter+time.Minute, "the paused sandbox's process to end", func() bool { return processEnded(id) > 0 })
				}
			}
			dropCaches()
			memMiB = append(memMiB, float64(avail0-memAvailable(b))/(1<<20)/n)
			diskMiB = append(diskMiB, (nodeDiskMiB(b)-disk0)/n)
			for _, id := range ids {
				if err := cl.DeleteSandbox(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		}
		slices.Sort(memMiB)
		slices.Sort(diskMiB)
		figs := map[string]float64{"host-MiB-per-paused": max(0, memMiB[len(memMiB)/2]), "disk-MiB-per-paused": diskMiB[len(diskMiB)/2]}
		for unit, v := range figs {
			b.ReportMetric(v, unit)
		}
		return figs
	})
}

// nodeDiskMiB is the disk the shared daemon's data uses, in MiB: its disk
// pool (an XFS filesystem, whose reflinked clones share their blocks,
// counted once), its blob store's files and its sandboxes' directories (a
// saved memory image among them).
func nodeDiskMiB(b *testing.B) float64 {
	b.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(shared.dataDir, "disks"), &st); err != nil {
		b.Fatal(err)
	}
	pool := float64((st.Blocks-st.Bfree)*uint64(st.Bsize)) / (1 << 20)
	return pool + dirMiB(filepath.Join(shared.dataDir, "blobs")) + dirMiB(filepath.Join(shared.dataDir, "sandboxes"))
}

// dirMiB is the disk the files under dir take (their allocated blocks),
// in MiB.
func dirMiB(dir string) float64 {
	var blocks int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			blocks += st.Blocks
		}
		return nil
	})
	return float64(blocks*512) / (1 << 20)
}

// BenchmarkFleetWake: a paused sandbox woken on another node of a fleet of
// two, per runtime. Each iteration restores a sandbox, changes 100 MiB of
// its disk, pauses it, drains its node (which lets go of it: held by
// none), and at once times the exec through a control replica that wakes
// it on the other node (wake-exec: the placement, the pause snapshot's
// layers fetched from the fleet's S3, the start, the exec); against, in
// the same iteration, a plain restore of that pause snapshot where it is
// cached and its first exec (restore-exec). The drain comes right after
// the pause: the other node, the paused sandbox's standby, has had no time
// to fetch what it wakes from. Then it does the same the other way, but
// drains prefetchWait after the pause (standby-wake-exec): the standby
// has fetched its pause snapshot and memory image meanwhile, as it has
// for a sandbox that slept a while before its node was lost.
//
//	go test ./e2e -run '^$' -bench FleetWake -benchtime 5x
func BenchmarkFleetWake(b *testing.B) {
	need(b)
	f := newFleet(b)
	snaps := f.snapshots(map[string]string{api.AdminTenant: ""})
	clusters := map[string]string{"w1": "r1-a", "w2": "r1-b"}
	for id, cluster := range clusters {
		f.startNode(id, "r1", cluster)
	}
	admin := f.startControl("c1").client()
	// Not compareRuntimes: the shared daemon it asks is the fleet's
	// snapshot maker's, stopped by now; the fleet's nodes have both.
	for _, rt := range benchRuntimes {
		b.Run(rt, func(b *testing.B) { fleetWake(b, f, admin, snaps[api.AdminTenant], rt) })
	}
}

// fleetWake is BenchmarkFleetWake's iterations on runtime rt.
func fleetWake(b *testing.B, f *fleet, admin *client.Client, snap, rt string) {
	ctx := context.Background()
	exec := func(id string) {
		if res, err := admin.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec in %s: %+v %v", id, res, err)
		}
	}
	// away changes 100 MiB of sandbox id's disk, pauses it, waits for
	// asleep, drains its node until that lets go of it, and times the exec
	// that wakes it on the other node. It answers the pause snapshot.
	away := func(id string, asleep time.Duration) (string, time.Duration) {
		home := f.node(id)
		if res, err := admin.Exec(ctx, id, api.ExecRequest{Shell: "head -c 100M /dev/urandom > /root/changed && sync"}); err != nil || res.ExitCode != 0 {
			b.Fatalf("write: %+v %v", res, err)
		}
		p, err := admin.PauseSandbox(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(asleep)
		if out, errOut, code := f.controls[0].cli(b, nil, "node", "drain", home); code != 0 {
			b.Fatalf("warren node drain: exit %d %q %s", code, out, errOut)
		}
		waitSandbox(b, admin, id, time.Minute, "its node to let go of it", func(sb *api.Sandbox) bool { return f.node(id) != home })
		t0 := time.Now()
		exec(id)
		took := time.Since(t0)
		if got := f.node(id); got == home {
			b.Fatalf("woken on the drained node %s", home)
		}
		if out, errOut, code := f.controls[0].cli(b, nil, "node", "uncordon", home); code != 0 {
			b.Fatalf("warren node uncordon: exit %d %q %s", code, out, errOut)
		}
		f.settle()
		return p.Paused.Snapshot, took
	}
	var wakes, standby, restores []time.Duration
	for b.Loop() {
		sbs, err := admin.Restore(ctx, snap, api.RestoreRequest{SandboxSpec: api.SandboxSpec{
			Runtime: rt, Lifecycle: api.Lifecycle{AutoResume: true},
		}})
		if err != nil {
			b.Fatal(err)
		}
		id := sbs[0].ID
		sn, took := away(id, 0)
		wakes = append(wakes, took)
		t1 := time.Now()
		plain, err := admin.Restore(ctx, sn, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, Region: "r1"}})
		if err != nil {
			b.Fatal(err)
		}
		exec(plain[0].ID)
		restores = append(restores, time.Since(t1))
		if err := admin.DeleteSandbox(ctx, plain[0].ID); err != nil {
			b.Fatal(err)
		}
		_, took = away(id, prefetchWait)
		standby = append(standby, took)
		if err := admin.DeleteSandbox(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(ms(pct(wakes, 0.5)), "wake-exec-p50-ms")
	b.ReportMetric(ms(pct(wakes, 0.99)), "wake-exec-p99-ms")
	b.ReportMetric(ms(pct(standby, 0.5)), "standby-wake-exec-p50-ms")
	b.ReportMetric(ms(pct(standby, 0.99)), "standby-wake-exec-p99-ms")
	b.ReportMetric(ms(pct(restores, 0.5)), "restore-exec-p50-ms")
}

// prefetchWait is how long a sandbox sleeps before its node is drained in
// BenchmarkFleetWake's second wake: time for its standby to fetch its
// pause snapshot (a control replica places the standby within a second;
// 100 MiB take about 2 s here).
const prefetchWait = 5 * time.Second
