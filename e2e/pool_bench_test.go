//go:build linux

package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// Run with (docs/BENCHMARKS.md has the figures), beside its baseline:
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test WARREN_BIN=$PWD/bin \
//     go test ./e2e -run '^$' -bench 'Pool|UnshareChroot' -benchtime 10x

// BenchmarkCreateToFirstExecPool: create a container sandbox that a warm
// pool has booted, and run `true` in it, at 1 and at 20 creates at once
// (each iteration a round of that many); the pool refills between rounds,
// outside the timing. burst=100 is one round of 100 creates at once from
// a pool of 100 (members of 128 MiB, so that the node holds them).
func BenchmarkCreateToFirstExecPool(b *testing.B) {
	for _, c := range []struct {
		name     string
		n        int
		memoryMB int64
	}{{"concurrent=1", 1, poolMemoryMB}, {"concurrent=20", 20, poolMemoryMB}, {"burst=100", 100, 128}} {
		b.Run(c.name, func(b *testing.B) {
			need(b)
			setPool(b, c.n, c.memoryMB)
			cl := shared.client()
			ctx := context.Background()
			var ds []time.Duration
			var round time.Duration
			for b.Loop() {
				b.StopTimer()
				waitReady(b, c.n)
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
							Runtime: "container", CPUs: 0.5, MemoryMB: c.memoryMB}})
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
			reportPercentiles(b, ds)
			b.ReportMetric(float64(round)/float64(time.Millisecond), "slowest-round-ms")
			if p := containerPool(b); p.Misses != 0 {
				b.Logf("%d creates missed the pool", p.Misses)
			}
		})
	}
}

// BenchmarkVMCreateToFirstExec: a vm sandbox's create to its first exec
// of `true`, in the same run: taken from a warm pool of one booted member
// (pool), restored from the node's memory image of its shape (memory), and
// booted (cold: each iteration a shape of its own, which no image has);
// accel is the machine's (TCG here: each cold boot takes seconds).
func BenchmarkVMCreateToFirstExec(b *testing.B) {
	rt := needVM(b)
	b.Logf("accel %s", rt.Accel)
	ctx := context.Background()
	cl := shared.client()
	spec := api.SandboxSpec{Runtime: "vm", CPUs: 1, MemoryMB: poolMemoryMB}
	firstExec := func(spec api.SandboxSpec) time.Duration {
		t0 := time.Now()
		sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: spec})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		b.StopTimer()
		if err := cl.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return took
	}
	b.Run("pool", func(b *testing.B) {
		if _, err := cl.SetPool(ctx, "default", api.PoolSpec{Runtime: "vm", Min: 1, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.DeletePool(context.Background(), "default", "vm") })
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			wait.For(b, 5*time.Minute, "the vm member ready", func() bool { return vmPool(b).Ready == 1 })
			b.StartTimer()
			ds = append(ds, firstExec(spec))
		}
		reportPercentiles(b, ds)
		if p := vmPool(b); p.Misses != 0 {
			b.Logf("%d creates missed the pool", p.Misses)
		}
	})
	b.Run("memory", func(b *testing.B) {
		mem := spec
		mem.MemoryMB = memoryStartMB
		if _, ok := memoryImage(b, mem.MemoryMB); !ok {
			firstExec(mem) // two boots of the shape make its image
			firstExec(mem)
		}
		wait.For(b, 2*time.Minute, "the memory image ready", func() bool {
			img, ok := memoryImage(b, mem.MemoryMB)
			return ok && img.State == "ready"
		})
		var ds []time.Duration
		for b.Loop() {
			ds = append(ds, firstExec(mem))
		}
		reportPercentiles(b, ds)
	})
	b.Run("cold", func(b *testing.B) {
		var ds []time.Duration
		cold := spec
		for b.Loop() {
			cold.MemoryMB = poolMemoryMB + 1 + int64(len(ds))
			ds = append(ds, firstExec(cold))
		}
		reportPercentiles(b, ds)
	})
}

// vmPool is the default template's vm pool on the shared daemon (zero
// when there is none).
func vmPool(t testing.TB) api.Pool {
	t.Helper()
	pools, err := shared.client().Pools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if p.Template == "default" && p.Runtime == "vm" {
			return p
		}
	}
	return api.Pool{}
}
