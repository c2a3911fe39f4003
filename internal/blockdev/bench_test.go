package blockdev

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"warren/internal/wait"
)

// BenchmarkWriteBackLag: a writer writes 4 KiB at random offsets of a
// 256 MiB volume without pause and flushes every 64 writes (an fsync-heavy
// program), for 5 s per iteration, with a cluster tier and object storage
// (file stores on this machine's disk). Sampled every 10 ms: how far object
// storage is behind (now minus the volume's recovery point), at p50 and at
// most, against the time a flush takes to return (the cluster tier's
// durability), p50.
//
//	go test ./internal/blockdev -run '^$' -bench WriteBackLag -benchtime 1x -count 3
func BenchmarkWriteBackLag(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		cluster, _ := tierOf(b)
		object, _ := tierOf(b)
		v, err := Create(ctx, filepath.Join(b.TempDir(), "v"), Config{ID: "lag", Size: 256 << 20},
			Tiers{Cluster: &cluster, Object: object}, Options{WritebackEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		r := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 4096)
		fill(r, buf)
		var lags, flushes []time.Duration
		stop := time.Now().Add(5 * time.Second)
		next := time.Now()
		writes := 0
		for time.Now().Before(stop) {
			if _, err := v.WriteAt(buf, r.Int64N(v.Size()/4096)*4096); err != nil {
				b.Fatal(err)
			}
			if writes++; writes%64 == 0 {
				t0 := time.Now()
				if err := v.Flush(); err != nil {
					b.Fatal(err)
				}
				flushes = append(flushes, time.Since(t0))
			}
			if now := time.Now(); now.After(next) {
				var lag time.Duration
				if rp := v.Status().RecoveryPoint; !rp.IsZero() {
					lag = now.Sub(rp)
				}
				lags = append(lags, lag)
				next = now.Add(10 * time.Millisecond)
			}
		}
		b.StopTimer()
		slices.Sort(lags)
		slices.Sort(flushes)
		b.ReportMetric(float64(lags[len(lags)/2])/1e6, "lag-p50-ms")
		b.ReportMetric(float64(lags[len(lags)-1])/1e6, "lag-max-ms")
		b.ReportMetric(float64(flushes[len(flushes)/2])/1e6, "flush-p50-ms")
		b.ReportMetric(float64(writes)/5, "writes/s")
		if err := v.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkRewrites is issue 35's figure for row 4: a 128 MiB file of
// random bytes rewritten in place 20 times on a 256 MiB volume, flushed
// every 16 MiB (as write-back would), over a file blob store with the
// default options. It reports the blob store's chunk bytes once the
// reclaimer is idle, the bytes the disk's own cells take stored, and
// their ratio (goal: at most 2).
//
//	go test ./internal/blockdev -run '^$' -bench Rewrites -benchtime 1x
func BenchmarkRewrites(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		object, _ := tierOf(b)
		v, err := Create(ctx, filepath.Join(b.TempDir(), "v"), Config{ID: "rewrites", Size: 256 << 20},
			Tiers{Object: object}, Options{WritebackEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(35, 4))
		buf := make([]byte, 1<<20)
		for range 20 {
			for off := int64(0); off < 128<<20; off += int64(len(buf)) {
				fill(r, buf)
				if _, err := v.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if (off+int64(len(buf)))%(16<<20) == 0 {
					if err := v.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		wait.For(b, time.Minute, "the reclaimer to be idle", func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			return len(v.pending) == 0
		})
		blobs, used := storedChunks(b, object), v.Status().Used
		b.ReportMetric(float64(blobs)/(1<<20), "blob-MiB")
		b.ReportMetric(float64(used)/(1<<20), "used-MiB")
		b.ReportMetric(float64(blobs)/float64(used), "blob/used")
		if err := v.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
