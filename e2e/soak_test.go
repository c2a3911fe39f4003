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

// A soak of create, exec, file and delete cycles (some with a snapshot and a
// fork) leaves no growth in the daemon's goroutines, descriptors or heap,
// nor in mounts, loop devices, cgroups or files on the host.
func TestSoak(t *testing.T) {
	need(t)
	cycles := 200
	if testing.Short() {
		cycles = 40
	}
	ctx := context.Background()
	c := shared.client()
	cycle := func(i int) error {
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
		if i%20 != 0 {
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
	run := func(n int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range next {
					if err := cycle(i); err != nil {
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
	run(20) // warm up: pools, caches and connections reach their size
	zero := int64(0)
	if _, err := c.GC(ctx, api.GCRequest{GraceSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	before := measure(t)
	start := time.Now()
	run(cycles)
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
