package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"warren/api"
)

// BenchmarkLazyRestore: a restore of a snapshot on a fresh node (its own
// data directory, sharing only the blob store) to the first exec of true,
// always-on (its blocks fetched as they are read) against a restore in
// snapshot mode (the lineage fetched and applied first), for a 4 GiB and a
// 16 GiB disk holding 64 MiB written over the template. Each iteration
// starts a new node, outside the timing; an always-on restore's time
// includes the start of the node's block server, its first.
//
//	go test ./e2e -run '^$' -bench LazyRestore -benchtime 5x
func BenchmarkLazyRestore(b *testing.B) {
	for _, gib := range []int64{4, 16} {
		b.Run(fmt.Sprintf("%dGiB", gib), func(b *testing.B) { // short: sockets go under the temp dir named for it
			need(b)
			ctx := context.Background()
			id := shared.newSandbox(b, "--disk", fmt.Sprint(gib<<10))
			shared.sh(b, id, `head -c 67108864 /dev/urandom > /root/data && sync`)
			sn := shared.snapshot(b, id)
			b.Cleanup(func() { deleteSnapshotsOf(b, id) })
			for _, mode := range []string{api.PersistenceSnapshot, api.PersistenceAlways} {
				b.Run(mode, func(b *testing.B) {
					var ds []time.Duration
					for b.Loop() {
						b.StopTimer()
						node := startNode(b, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"))
						b.StartTimer()
						start := time.Now()
						sbs, err := node.client().Restore(ctx, sn, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Persistence: mode}})
						if err != nil {
							b.Fatalf("restore: %v\n%s", err, node.log.tail(20))
						}
						if _, err := node.client().Exec(ctx, sbs[0].ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
							b.Fatal(err)
						}
						ds = append(ds, time.Since(start))
						b.StopTimer()
						node.client().DeleteSandbox(ctx, sbs[0].ID)
						b.StartTimer()
					}
					reportPercentiles(b, ds)
				})
			}
		})
	}
}

// BenchmarkAlwaysOnSnapshot: the acknowledgement of a snapshot of an
// always-on disk (the filesystem synced, which flushes the volume, then
// one manifest of the volume's cells: durable when it answers) against a
// snapshot in snapshot mode (sync and a reflink clone, durable later),
// each after 1 MiB written at random in a 64 MiB file: just written
// (written=dirty), or written and synced by the sandbox before, as a
// program that fsyncs its work does (written=synced).
//
//	go test ./e2e -run '^$' -bench AlwaysOnSnapshot -benchtime 20x
func BenchmarkAlwaysOnSnapshot(b *testing.B) {
	const write = `for i in 1 2 3 4; do head -c 262144 /dev/urandom | dd of=/root/data bs=4096 seek=$(shuf -i 0-16000 -n 1) conv=notrunc 2>/dev/null; done`
	for _, mode := range []string{api.PersistenceSnapshot, api.PersistenceAlways} {
		for _, written := range []string{"dirty", "synced"} {
			b.Run(mode+"/written="+written, func(b *testing.B) {
				need(b)
				ctx := context.Background()
				c := shared.client()
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Persistence: mode}})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.DeleteSandbox(ctx, sb.ID) })
				shared.sh(b, sb.ID, `head -c 67108864 /dev/urandom > /root/data && sync`)
				before := write
				if written == "synced" {
					before += " && sync"
				}
				var ds []time.Duration
				for b.Loop() {
					b.StopTimer()
					shared.sh(b, sb.ID, before)
					b.StartTimer()
					start := time.Now()
					if _, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{}); err != nil {
						b.Fatal(err)
					}
					ds = append(ds, time.Since(start))
				}
				b.StopTimer()
				reportPercentiles(b, ds)
				deleteSnapshotsOf(b, sb.ID)
			})
		}
	}
}
