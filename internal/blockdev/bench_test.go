package blockdev

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"
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
