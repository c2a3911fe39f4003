//go:build linux

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// Run with (docs/BENCHMARKS.md has the figures), beside its baseline:
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test WARREN_BIN=$PWD/bin \
//     go test ./e2e -run '^$' -bench 'Pool|UnshareChroot' -benchtime 10x

// BenchmarkCreateToFirstExecPool: create a sandbox that a warm pool has
// booted, and run `true` in it, at 1 and at 20 creates at once (each
// iteration a round of that many); the pool refills between rounds,
// outside the timing. burst=100 is one round of 100 creates at once from
// a pool of 100 (members of 128 MiB, so that the node holds them). Per
// runtime: container (the baseline), gvisor, and vm at 1 only (a member
// boots for seconds under TCG); each reports its p50's ratio to
// container's in the same run.
func BenchmarkCreateToFirstExecPool(b *testing.B) {
	for _, c := range []struct {
		name     string
		n        int
		memoryMB int64
		runtimes []string
	}{
		{"concurrent=1", 1, poolMemoryMB, []string{"container", "gvisor", "vm"}},
		{"concurrent=20", 20, poolMemoryMB, benchRuntimes},
		{"burst=100", 100, 128, benchRuntimes},
	} {
		b.Run(c.name, func(b *testing.B) {
			need(b)
			compareRuntimes(b, c.runtimes, func(b *testing.B, rt string) map[string]float64 {
				setPool(b, rt, c.n, c.memoryMB)
				cl := shared.client()
				ctx := context.Background()
				var ds []time.Duration
				var round time.Duration
				for b.Loop() {
					b.StopTimer()
					waitReady(b, rt, c.n)
					b.StartTimer()
					ids := make([]string, c.n)
					took := make([]time.Duration, c.n)
					errs := make([]error, c.n)
					var wg sync.WaitGroup
					start := time.Now()
					for i := range c.n {
						wg.Go(func() {
							t0 := time.Now()
							sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
								Runtime: rt, CPUs: 0.5, MemoryMB: c.memoryMB}})
							if err != nil {
								errs[i] = err
								return
							}
							ids[i] = sb.ID
							if _, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
								errs[i] = err
								return
							}
							took[i] = time.Since(t0)
						})
					}
					wg.Wait()
					round = max(round, time.Since(start))
					b.StopTimer()
					for i, id := range ids {
						if errs[i] != nil {
							b.Fatal(errs[i])
						}
						if err := cl.DeleteSandbox(ctx, id); err != nil {
							b.Fatal(err)
						}
					}
					ds = append(ds, took...)
					b.StartTimer()
				}
				p50 := reportPercentiles(b, ds)
				b.ReportMetric(ms(round), "slowest-round-ms")
				if p := runtimePool(b, rt); p.Misses != 0 {
					b.Logf("%d creates missed the pool", p.Misses)
				}
				return map[string]float64{"p50-ms": ms(p50), "slowest-round-ms": ms(round)}
			})
		})
	}
}
