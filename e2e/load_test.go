//go:build linux

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// 100 sandboxes created at once all start, each answers an exec, and once
// deleted nothing of them is left on the host.
//
// It runs on the container runtime. An idle gvisor sandbox costs the host
// some 30 ms of CPU a second (docs/BENCHMARKS.md), so 100 of them want
// more than this 2-core machine has, and their starts time out.
func TestLoadConcurrentCreates(t *testing.T) {
	need(t)
	const n = 100
	before := leaks(t)
	c := shared.client()
	ctx := context.Background()
	ids := make([]string, n)
	errs := make([]error, n)
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			// 128 MiB and a quarter of a CPU each: the node admits 100 of
			// them whatever else runs (100 of the default 512 MiB and one
			// CPU would be more than it may promise on 2 cores).
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "container", MemoryMB: 128, CPUs: 0.25}})
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = sb.ID
			res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", fmt.Sprint(i)}})
			if err == nil && res.Stdout != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("exec printed %q", res.Stdout)
			}
			errs[i] = err
			lat[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("sandbox %d: %v", i, err)
		}
	}
	slices.Sort(lat)
	t.Logf("%d concurrent creates + exec: p50 %v, max %v", n, lat[n/2], lat[n-1])
	if lat[n-1] > 2*time.Minute {
		t.Errorf("slowest create took %v", lat[n-1])
	}
	for _, id := range ids {
		if id != "" {
			if err := c.DeleteSandbox(ctx, id); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		}
	}
	wait.For(t, 20*time.Second, "every sandbox's cgroup, loop device and mount to go", func() bool {
		return leaks(t) == before
	})
}

// 1,000 execs at once across 10 sandboxes all complete, with their own
// output.
func TestLoadConcurrentExecs(t *testing.T) {
	need(t)
	const sandboxes, perSandbox = 10, 100
	var ids []string
	for range sandboxes {
		ids = append(ids, shared.newSandbox(t))
	}
	c := shared.client()
	ctx := context.Background()
	var mu sync.Mutex // guards failures and lat
	var failures []string
	var lat []time.Duration
	var wg sync.WaitGroup
	for s, id := range ids {
		for i := range perSandbox {
			wg.Go(func() {
				start := time.Now()
				want := fmt.Sprintf("%d-%d", s, i)
				res, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"echo", want}})
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				lat = append(lat, d)
				if err != nil || strings.TrimSpace(res.Stdout) != want || res.ExitCode != 0 {
					failures = append(failures, fmt.Sprintf("%s: %+v %v", want, res, err))
				}
			})
		}
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d execs failed, e.g. %s", len(failures), sandboxes*perSandbox, failures[0])
	}
	slices.Sort(lat)
	t.Logf("%d concurrent execs: p50 %v, p99 %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}
