//go:build linux

package network

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"warren/internal/netnsfile"
	"warren/internal/network/policy"
	"warren/internal/wait"
)

// Run with (docs/BENCHMARKS.md records the figures):
//   sudo go test ./internal/network -run '^$' -bench 'SandboxNetwork' -benchtime 200x

// BenchmarkSandboxNetwork is one sandbox's network setup, what a create
// waits for: its router (namespace, uplink veth, addresses, route, rate
// limit, rules) and the link into the sandbox's namespace; setup-warm takes
// a router the node made ready beforehand (the pool refills outside the
// timing). The teardown is outside the timing. The baseline is the
// kernel's floor: one bare network namespace made and bound.
func BenchmarkSandboxNetwork(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	runDir := b.TempDir()
	n, err := New(Config{Pool: testPool(), RunDir: runDir, Upstreams: testUpstreams, Warm: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cleanupNode(n) })
	ctx := context.Background()
	i := 0
	setup := func(b *testing.B, warm bool) {
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			if warm {
				wait.For(b, 10*time.Second, "a warm router", func() bool { return len(n.pool.Ready()) > 0 })
			}
			target := filepath.Join(runDir, fmt.Sprintf("target-%d", i))
			if err := netnsfile.Make(target, routerSysctls); err != nil {
				b.Fatal(err)
			}
			id := fmt.Sprintf("sb-bench%012d", i)
			i++
			b.StartTimer()
			t0 := time.Now()
			s, err := n.Attach(ctx, id, policy.Policy{}, Egress{})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.PlugNetNS(target); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			b.StopTimer()
			n.Detach(s)
			netnsfile.Remove(target)
			b.StartTimer()
		}
		reportP50(b, ds)
	}
	b.Run("setup", func(b *testing.B) { setup(b, false) })
	n.StartWarm()
	b.Run("setup-warm", func(b *testing.B) { setup(b, true) })
	b.Run("baseline-netns", func(b *testing.B) {
		var ds []time.Duration
		path := filepath.Join(runDir, "baseline")
		for b.Loop() {
			t0 := time.Now()
			if err := netnsfile.Make(path, routerSysctls); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			b.StopTimer()
			netnsfile.Remove(path)
			b.StartTimer()
		}
		reportP50(b, ds)
	})
}

func reportP50(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100])/float64(time.Millisecond), "p99-ms")
}
