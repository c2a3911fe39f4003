//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// Run with (docs/BENCHMARKS.md has the figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test WARREN_BIN=$PWD/bin \
//     go test ./e2e -run '^$' -bench 'Snapshot|Restore|Fork' -benchtime 20x

// BenchmarkSnapshotAck: the latency of POST /v1/sandboxes/{id}/snapshots
// (quiesce, reflink clone, answer; the upload goes on afterwards) on
// sandboxes with the same 64 MiB of data on a 4 GiB disk (the smallest the
// default template allows) and on a 16 GiB disk, while a process in the
// sandbox writes 64 KiB at a time without pause. The uploads of earlier
// iterations run in the background, as they would in use.
//
// Besides the call's percentiles and the node's ack_ms it reports what the
// writer felt: its longest gap between two writes that overlapped a
// snapshot call, against its longest gap that did not, in the same run (a
// frozen filesystem would show as the first).
func BenchmarkSnapshotAck(b *testing.B) {
	for _, gib := range []int64{4, 16} {
		b.Run(fmt.Sprintf("disk=%dGiB", gib), func(b *testing.B) {
			need(b)
			ctx := context.Background()
			c := shared.client()
			id := shared.newSandbox(b, "--disk", fmt.Sprint(gib<<10))
			shared.sh(b, id, `head -c 67108864 /dev/urandom > /root/data && sync`)
			// The writer stamps the time after each write; it stops when
			// /root/writing goes, and overwrites its file every 64 MiB.
			shared.sh(b, id, `touch /root/writing`)
			if _, err := c.StartProcess(ctx, id, api.ExecRequest{Shell: `i=0
				while [ -e /root/writing ]; do
					head -c 65536 /dev/urandom | dd of=/root/w bs=65536 seek=$((i % 1024)) conv=notrunc 2>/dev/null
					date +%s%N >> /root/ticks; i=$((i+1))
				done`}); err != nil {
				b.Fatal(err)
			}
			var calls, acks []time.Duration
			var during [][2]int64 // each call's start and end, in Unix ns
			for b.Loop() {
				b.StopTimer()
				time.Sleep(50 * time.Millisecond) // writes outside snapshots
				b.StartTimer()
				start := time.Now()
				sn, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{})
				if err != nil {
					b.Fatal(err)
				}
				calls = append(calls, time.Since(start))
				during = append(during, [2]int64{start.UnixNano(), time.Now().UnixNano()})
				acks = append(acks, time.Duration(sn.AckMs*float64(time.Millisecond)))
			}
			b.StopTimer()
			time.Sleep(50 * time.Millisecond)
			ticks := strings.Fields(shared.sh(b, id, `rm /root/writing && sleep 0.2 && cat /root/ticks`))
			reportPercentiles(b, calls)
			slices.Sort(acks)
			b.ReportMetric(float64(acks[len(acks)/2])/1e6, "ack-p50-ms")
			var inGap, outGap int64
			for i := 1; i < len(ticks); i++ {
				t0, err0 := strconv.ParseInt(ticks[i-1], 10, 64)
				t1, err1 := strconv.ParseInt(ticks[i], 10, 64)
				if err0 != nil || err1 != nil {
					b.Fatalf("writer stamps %q %q", ticks[i-1], ticks[i])
				}
				overlaps := slices.ContainsFunc(during, func(d [2]int64) bool { return t0 < d[1] && t1 > d[0] })
				if gap := t1 - t0; overlaps {
					inGap = max(inGap, gap)
				} else if t0 > during[0][0]-int64(50*time.Millisecond) {
					outGap = max(outGap, gap)
				}
			}
			b.ReportMetric(float64(inGap)/1e6, "write-gap-snapshot-ms")
			b.ReportMetric(float64(outGap)/1e6, "write-gap-other-ms")
			deleteSnapshotsOf(b, id)
		})
	}
}

// deleteSnapshotsOf deletes sandbox id's snapshots (after their uploads)
// and collects their data, so benchmarks do not fill the blob store.
func deleteSnapshotsOf(b *testing.B, id string) {
	ctx := context.Background()
	c := shared.client()
	list, err := c.ListSnapshots(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	for _, sn := range list {
		if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
			b.Fatal(err)
		}
	}
	zero := int64(0)
	if _, err := c.GC(ctx, api.GCRequest{GraceSeconds: &zero}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRestore compares three ways to get a sandbox's 4 GiB disk with
// 64 MiB of changes back: a restore on the node that took the snapshot (a
// reflink clone of its cache), a restore on a fresh node that fetches every
// layer from the blob store (the crash-recovery path), and a plain full copy
// of the image (cp --sparse=always, no reflink) as the baseline. The first
// two include starting the sandbox and its first exec.
func BenchmarkRestore(b *testing.B) {
	need(b)
	ctx := context.Background()
	id := shared.newSandbox(b)
	shared.sh(b, id, `head -c 67108864 /dev/urandom > /root/data && sync`)
	sn := shared.snapshot(b, id)
	b.Cleanup(func() { deleteSnapshotsOf(b, id) })
	restoreOnce := func(b *testing.B, d *daemon) {
		sbs, err := d.client().Restore(ctx, sn, api.RestoreRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.client().Exec(ctx, sbs[0].ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		d.client().DeleteSandbox(ctx, sbs[0].ID)
		b.StartTimer()
	}
	b.Run("node-cache", func(b *testing.B) {
		for b.Loop() {
			restoreOnce(b, shared)
		}
	})
	b.Run("blob-store", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node := startNode(b, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"))
			b.StartTimer()
			restoreOnce(b, node)
		}
	})
	b.Run("full-copy", func(b *testing.B) {
		img := filepath.Join(shared.dataDir, "disks", "snapshots", sn+".img")
		dst := filepath.Join(shared.dataDir, "disks", "bench-copy.img")
		for b.Loop() {
			if out, err := exec.Command("cp", "--sparse=always", "--reflink=never", img, dst).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v: %s", err, out)
			}
			b.StopTimer()
			os.Remove(dst)
			b.StartTimer()
		}
	})
}

// BenchmarkFork100: restore 100 sandboxes from one snapshot in one call, all
// running when it returns (the goal: under 2 s).
func BenchmarkFork100(b *testing.B) {
	need(b)
	ctx := context.Background()
	c := shared.client()
	id := shared.newSandbox(b)
	sn := shared.snapshot(b, id)
	b.Cleanup(func() { deleteSnapshotsOf(b, id) })
	for b.Loop() {
		// 128 MiB and a quarter of a CPU each: 100 of the defaults are
		// more than the node may promise (admission).
		sbs, err := c.Restore(ctx, sn, api.RestoreRequest{Count: 100, SandboxSpec: api.SandboxSpec{MemoryMB: 128, CPUs: 0.25}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, sb := range sbs {
			c.DeleteSandbox(ctx, sb.ID)
		}
		// Let the warm pool refill, as between a harness's rounds.
		time.Sleep(time.Second)
		b.StartTimer()
	}
}

// BenchmarkFork100Baseline: 100 runs of /bin/true in fresh namespaces
// chrooted into the template (unshare + chroot), as many at once as a
// restore starts: the floor BenchmarkFork100 is compared with.
func BenchmarkFork100Baseline(b *testing.B) {
	need(b)
	root := mountTemplate(b)
	for b.Loop() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4*runtime.NumCPU())
		for range 100 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := unshareChroot(root); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}
