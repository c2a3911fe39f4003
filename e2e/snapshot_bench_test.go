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
	"sync"
	"testing"
	"time"

	"warren/api"
)

// Run with (docs/BENCHMARKS.md has the figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test WARREN_BIN=$PWD/bin \
//     go test ./e2e -run '^$' -bench 'Snapshot|Restore|Fork' -benchtime 20x

// BenchmarkSnapshotAck: the latency of POST /v1/sandboxes/{id}/snapshots
// (freeze, reflink clone, thaw, answer; the upload goes on afterwards) on
// sandboxes with the same 64 MiB of data on a 4 GiB disk (the smallest the
// default template allows) and on a 16 GiB disk. Each iteration changes a
// file first, so every snapshot has something to upload; the uploads of
// earlier iterations run in the background, as they would in use.
func BenchmarkSnapshotAck(b *testing.B) {
	for _, gib := range []int64{4, 16} {
		b.Run(fmt.Sprintf("disk=%dGiB", gib), func(b *testing.B) {
			need(b)
			ctx := context.Background()
			c := shared.client()
			id := shared.newSandbox(b, "--disk", fmt.Sprint(gib<<10))
			shared.sh(b, id, `head -c 67108864 /dev/urandom > /root/data && sync`)
			var calls, acks []time.Duration
			for b.Loop() {
				b.StopTimer()
				shared.sh(b, id, `date > /root/stamp`)
				b.StartTimer()
				start := time.Now()
				sn, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{})
				if err != nil {
					b.Fatal(err)
				}
				calls = append(calls, time.Since(start))
				acks = append(acks, time.Duration(sn.AckMs*float64(time.Millisecond)))
			}
			reportPercentiles(b, calls)
			slices.Sort(acks)
			b.ReportMetric(float64(acks[len(acks)/2])/1e6, "frozen-p50-ms")
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
