//go:build linux

package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// execLatencies runs `true` n times in sandbox id and returns the sorted
// round trips.
func execLatencies(t *testing.T, id string, n int) []time.Duration {
	t.Helper()
	c := shared.client()
	var ds []time.Duration
	for range n {
		start := time.Now()
		if _, err := c.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Fatalf("exec in the quiet sandbox: %v", err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds
}

// p95 is the 95th percentile of sorted ds: of 100 samples, what the five
// slowest exceed. One stall of a shared 2-core machine is not what a
// neighbour does to a sandbox; a shift of its latencies is.
func p95(ds []time.Duration) time.Duration { return ds[len(ds)*95/100] }

// A sandbox that spins every CPU, fork-bombs, memory-bombs or fills its disk
// hits its own limit, inside itself; a quiet sandbox beside it keeps its
// exec latency (p95) within 2x of its idle p95, and the daemon keeps serving. The
// offender gets half a core: on this 2-core node a full core is half the
// machine, which is capacity planning, not isolation.
//
// It runs on the container runtime. On gvisor the fork bomb's subtest
// fails: while the bomb's processes hold every pid of the limit, a new
// exec in that sandbox waits instead of failing, and the sandbox is
// marked failed (docs/SECURITY.md, "The gVisor runtime", open items).
func TestNoisyNeighbours(t *testing.T) {
	need(t)
	quiet := shared.newSandbox(t, "--runtime", "container")
	execLatencies(t, quiet, 10) // warm its page cache
	idle := p95(execLatencies(t, quiet, 100))
	// On 2 cores a p95 of a few milliseconds moves by a few milliseconds
	// with any background work: allow that much absolute slack too.
	budget := max(2*idle, idle+5*time.Millisecond)
	t.Logf("quiet sandbox idle exec p95 %v, budget %v", idle, budget)

	attacks := []struct {
		name   string
		script string
		// inside checks the attack's own result: it must have hit its limit.
		inside func(res *api.ExecResult) bool
	}{
		{"spin every cpu", "for i in 1 2 3 4; do (while :; do :; done) & done; sleep 8; kill 0",
			func(*api.ExecResult) bool { return true }},
		{"fork bomb", "bomb() { bomb | bomb & }; bomb; sleep 8; echo survived",
			func(res *api.ExecResult) bool { return strings.Contains(res.Stderr, "fork") }},
		{"memory bomb", "python3 -c 'x = bytearray(4 << 30)'",
			func(res *api.ExecResult) bool {
				return res.ExitCode == 137 || strings.Contains(res.Stderr, "MemoryError")
			}},
		// fallocate reserves most of the disk without writing it, then dd
		// writes the rest until the filesystem is full.
		{"fill the disk", "i=0; while fallocate -l 256M /root/fill$i 2>/dev/null; do i=$((i+1)); done; dd if=/dev/zero of=/root/last bs=1M 2>&1; df -h /",
			func(res *api.ExecResult) bool {
				return strings.Contains(res.Stderr+res.Stdout, "No space left on device")
			}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			bully := shared.newSandbox(t, "--runtime", "container", "--cpus", "0.5", "--memory", "256", "--pids", "64")
			c := shared.client()
			ctx := context.Background()
			p, err := c.StartProcess(ctx, bully, api.ExecRequest{Shell: a.script, TimeoutMs: 60000})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // let it get going
			during := execLatencies(t, quiet, 100)
			if p95(during) > budget {
				// A shared 2-core machine can stall for reasons of its own:
				// a second sample must confirm it.
				during = execLatencies(t, quiet, 100)
			}
			if got := p95(during); got > budget {
				t.Errorf("quiet sandbox exec p95 %v while its neighbour attacks (twice), budget %v (idle p95 %v)", got, budget, idle)
			}
			resp, err := http.Get(shared.url + "/healthz")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("daemon health during the attack: %v %v", resp, err)
			}
			if resp != nil {
				resp.Body.Close()
			}
			res, err := c.WaitProcess(ctx, bully, p.PID, 90*time.Second)
			if err != nil {
				t.Fatalf("wait for the attack: %v", err)
			}
			s, err := c.AttachProcess(ctx, bully, p.PID, true)
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut strings.Builder
			s.Copy(&out, &errOut)
			s.Close()
			res.Stdout, res.Stderr = out.String(), errOut.String()
			if !a.inside(res) {
				t.Errorf("the attack did not hit its own limit: exit %d, stdout %q, stderr %q", res.ExitCode, trim(res.Stdout), trim(res.Stderr))
			}
			t.Logf("quiet sandbox exec p95 during: %v, slowest %v", p95(during), during[len(during)-1])
		})
	}
}

// trim keeps the last 300 bytes of s, for messages.
func trim(s string) string {
	if len(s) > 300 {
		return "…" + s[len(s)-300:]
	}
	return s
}
