//go:build linux

package leasewatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"warren/internal/cgroup"
	"warren/internal/wait"
)

// TestKillsItsSandboxesCgroupsOnly runs the real watchdog (Start's
// re-executed process, killing through cgroups) over two real cgroups
// under warren/ with a process each, only the first of them a sandbox of
// the node: when the lease lapses the first's process dies and its cgroup
// goes; the second, another daemon's as far as the watchdog knows, is not
// touched.
func TestKillsItsSandboxesCgroupsOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes cgroups under warren/")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skipf("needs cgroup v1 (no /sys/fs/cgroup/memory: %v)", err)
	}
	h, err := cgroup.Detect(nil)
	if err != nil || h.Version() != 1 {
		t.Skipf("needs cgroup v1: %v (version %d)", err, h.Version())
	}
	ours, theirs := fmt.Sprintf("lwtest-%d-1", os.Getpid()), fmt.Sprintf("lwtest-%d-2", os.Getpid())
	type sandbox struct {
		g    *cgroup.Group
		cmd  *exec.Cmd
		done chan struct{}
	}
	run := func(id string) sandbox {
		g, err := h.Create(id, cgroup.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := g.Destroy(ctx); err != nil {
				t.Errorf("destroy cgroup %s: %v", id, err)
			}
		})
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			cmd.Wait()
			close(done)
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return sandbox{g, cmd, done}
	}
	a, b := run(ours), run(theirs)

	const lease = 500 * time.Millisecond
	o := node(t, lease, ours)
	w := start(t, o)
	sent := time.Now()
	w.Renew(sent)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the node's sandbox still runs 10s after its lease")
	}
	if since := time.Since(sent); since < lease {
		t.Errorf("killed %v after the renewal, within the %v lease", since, lease)
	}
	if ws := a.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Errorf("the node's sandbox ended %v, want killed", a.cmd.ProcessState)
	}
	exitOf(t, w, "the watchdog to exit once it killed")
	if _, err := h.Open(ours); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("the node's sandbox's cgroup after the watchdog: %v, want it gone", err)
	}
	select {
	case <-b.done:
		t.Fatalf("the other cgroup's process ended: %v", b.cmd.ProcessState)
	default:
	}
	wait.For(t, time.Second, "the other cgroup to keep its process", func() bool {
		pids, err := b.g.Procs()
		return err == nil && slices.Contains(pids, b.cmd.Process.Pid)
	})
}
