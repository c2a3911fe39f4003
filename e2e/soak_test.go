package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// footprint is what the daemon and its sandboxes hold: it must come back to
// the same after any number of create/exec/delete cycles.
type footprint struct {
	vars      api.DebugVars
	host      resources
	diskFiles int // sandbox disk images
	dirs      int // sandbox private directories
}

func measure(t *testing.T) footprint {
	t.Helper()
	v, err := shared.client().DebugVars(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	count := func(dir string) int {
		entries, _ := os.ReadDir(dir)
		return len(entries)
	}
	return footprint{
		vars: *v, host: leaks(t),
		diskFiles: count(filepath.Join(shared.dataDir, "disks", "sandboxes")),
		dirs:      count(filepath.Join(shared.dataDir, "sandboxes")),
	}
}

// settled measures once the daemon has stopped changing: after a burst of
// creates the container runtime refills its warm inits in the background,
// each holding descriptors and goroutines, and a footprint taken mid-refill
// would make the full pool look like a leak.
func settled(t *testing.T) footprint {
	t.Helper()
	last := measure(t)
	var now footprint
	wait.For(t, 15*time.Second, "the daemon to settle", func() bool {
		time.Sleep(time.Second)
		now = measure(t)
		same := now.vars.Goroutines == last.vars.Goroutines && now.vars.OpenFDs == last.vars.OpenFDs
		last = now
		return same
	})
	return now
}

// A soak of create, exec, file and delete cycles (some with a snapshot and a
// fork) leaves no growth in the daemon's goroutines, descriptors or heap,
// nor in mounts, loop devices, cgroups or files on the host.
func TestSoak(t *testing.T) {
	need(t)
	// A leak shows as growth after any number of cycles: 60 of them (three
	// with a snapshot and two restores), on the runtime auto picks (each
	// create a gvisor boot here), keep the suite's time; the heap bound
	// below is per run, not per cycle.
	cycles := 60
	if testing.Short() {
		cycles = 40
	}
	ctx := context.Background()
	c := shared.client()
	// cycle i snapshots its sandbox and restores two when i is a multiple
	// of snapEvery.
	cycle := func(i, snapEvery int) error {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return err
		}
		defer c.DeleteSandbox(ctx, sb.ID)
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: fmt.Sprintf("echo %d > /root/n && cat /root/n", i)})
		if err != nil {
			return err
		}
		if res.Stdout != fmt.Sprintf("%d\n", i) {
			return fmt.Errorf("cycle %d: exec printed %q", i, res.Stdout)
		}
		if _, err := c.WriteFile(ctx, sb.ID, "/root/f", strings.NewReader("data"), 0o644, ""); err != nil {
			return err
		}
		if i%snapEvery != 0 {
			return nil
		}
		sn, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
		if err != nil {
			return err
		}
		defer c.DeleteSnapshot(ctx, sn.ID)
		kids, err := c.Restore(ctx, sn.ID, api.RestoreRequest{Count: 2})
		if err != nil {
			return err
		}
		for _, k := range kids {
			c.DeleteSandbox(ctx, k.ID)
		}
		return nil
	}
	run := func(n, snapEvery int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range next {
					if err := cycle(i, snapEvery); err != nil {
						t.Error(err)
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	// Warm up: pools, caches and connections reach their size, among them
	// the layer encoder's state per concurrent snapshot (megabytes each).
	run(20, 1)
	zero := int64(0)
	if _, err := c.GC(ctx, api.GCRequest{GraceSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	before := settled(t)
	start := time.Now()
	run(cycles, 20)
	if _, err := c.GC(ctx, api.GCRequest{GraceSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	var after footprint
	defer func() {
		if t.Failed() { // what did not come back
			t.Logf("footprint before %+v\nafter %+v", before, after)
		}
	}()
	// Goroutines of finished requests and connections wind down shortly.
	wait.For(t, 15*time.Second, "the daemon's footprint to come back", func() bool {
		after = measure(t)
		return after.vars.Goroutines <= before.vars.Goroutines+5 && after.vars.OpenFDs <= before.vars.OpenFDs+5 &&
			after.host == before.host && after.diskFiles == before.diskFiles && after.dirs == before.dirs
	})
	t.Logf("%d cycles in %v: goroutines %d → %d, fds %d → %d, heap %.1f → %.1f MiB, host %+v → %+v",
		cycles, time.Since(start).Round(time.Millisecond), before.vars.Goroutines, after.vars.Goroutines,
		before.vars.OpenFDs, after.vars.OpenFDs, mibOf(before.vars.HeapAllocBytes), mibOf(after.vars.HeapAllocBytes),
		before.host, after.host)
	if after.vars.HeapAllocBytes > before.vars.HeapAllocBytes+16<<20 {
		t.Errorf("heap grew from %.1f to %.1f MiB over %d cycles", mibOf(before.vars.HeapAllocBytes),
			mibOf(after.vars.HeapAllocBytes), cycles)
	}
}

func mibOf(n uint64) float64 { return float64(n) / (1 << 20) }
