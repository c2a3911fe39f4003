//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/vmm"
)

// orphanEnv makes this test binary the helper of startOrphan: it starts a
// machine from the request in the variable, prints what Attach needs, and
// exits, leaving QEMU running, as a daemon that dies leaves its machines.
const orphanEnv = "WARREN_QEMU_ORPHAN"

type orphanRequest struct {
	Config     vmm.Config
	Mountpoint string
}

// orphan is a machine whose starter has exited.
type orphan struct {
	PID       int
	StartTime uint64
	UID       uint32
}

const orphanPrefix = "orphan: "

// TestOrphanHelper is not a test: it is startOrphan's child process.
func TestOrphanHelper(t *testing.T) {
	raw := os.Getenv(orphanEnv)
	if raw == "" {
		t.Skip("the helper process of startOrphan")
	}
	var req orphanRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		t.Fatal(err)
	}
	h, err := cgroup.Detect(nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Options{Cgroups: h, JailMountpoint: req.Mountpoint})
	if err != nil {
		t.Fatal(err)
	}
	m, err := v.Start(ctxT(t), req.Config, vmm.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(orphan{PID: m.PID(), StartTime: m.StartTime(), UID: m.UID()})
	os.Stdout.Write([]byte(orphanPrefix + string(b) + "\n"))
	// Return without stopping it: the process exits, QEMU runs on.
}

// startOrphan starts a machine of cfg from a child process that exits
// right after, so that QEMU runs on with no Machine of this process
// knowing it and no parent that waits for it (it is reparented), as after
// a daemon's death. The test's cleanup kills it if it still runs.
func (e *env) startOrphan(t *testing.T, cfg vmm.Config) orphan {
	t.Helper()
	req, _ := json.Marshal(orphanRequest{Config: cfg, Mountpoint: e.v.opts.JailMountpoint})
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanEnv+"="+string(req))
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		if g, err := e.cg.Open(cfg.ID); err == nil {
			g.Destroy(context.Background())
		}
		os.Remove(cfg.AgentSocket)
		os.Remove(cfg.WorkDir + "/" + qmpSockName)
	})
	if err != nil {
		t.Fatalf("orphan helper: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, orphanPrefix); ok {
			var o orphan
			if err := json.Unmarshal([]byte(rest), &o); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(o.PID, 0); err != nil {
				t.Fatalf("orphaned qemu %d: %v", o.PID, err)
			}
			return o
		}
	}
	t.Fatalf("orphan helper said nothing usable:\n%s", out)
	return orphan{}
}

func (e *env) attach(t *testing.T, cfg vmm.Config, o orphan) *Machine {
	t.Helper()
	m, err := e.v.Attach(ctxT(t), cfg, o.PID, o.StartTime, o.UID)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		m.Kill(ctx)
	})
	return m
}

func (e *env) uidsHeld() int {
	e.v.uidMu.Lock()
	defer e.v.uidMu.Unlock()
	return len(e.v.uids)
}

// TestAttach: a machine whose starter died is attached to (only with the
// right pid, start time and uid), then answers, pauses and resumes, and
// stops as asked, released like a started one.
func TestAttach(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	o := e.startOrphan(t, cfg)

	for _, tc := range []struct {
		name   string
		pid    int
		start  uint64
		uid    uint32
		exited bool // the error must wrap vmm.ErrExited
	}{
		{"wrong start time", o.PID, o.StartTime + 1, o.UID, true},
		{"no pid", 0, o.StartTime, o.UID, true},
		{"uid out of range", o.PID, o.StartTime, 0, false},
	} {
		_, err := e.v.Attach(ctxT(t), cfg, tc.pid, tc.start, tc.uid)
		if err == nil || errors.Is(err, vmm.ErrExited) != tc.exited {
			t.Errorf("%s: Attach = %v, want an error (ErrExited: %v)", tc.name, err, tc.exited)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	if n := e.uidsHeld(); n != 0 {
		t.Errorf("refused attaches left %d uids held", n)
	}
	if err := syscall.Kill(o.PID, 0); err != nil {
		t.Fatalf("a refused attach harmed qemu: %v", err)
	}

	m := e.attach(t, cfg, o)
	if m.PID() != o.PID || m.UID() != o.UID || m.StartTime() != o.StartTime {
		t.Errorf("attached machine pid %d uid %d start %d, want %+v", m.PID(), m.UID(), m.StartTime(), o)
	}
	if _, err := e.v.Attach(ctxT(t), cfg, o.PID, o.StartTime, o.UID); err == nil || errors.Is(err, vmm.ErrExited) {
		t.Errorf("second Attach of the same machine = %v, want its uid refused", err)
	}
	wantState(t, m, vmm.StateRunning)
	if err := m.Pause(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, m, vmm.StatePaused)
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, m, vmm.StateRunning)

	if err := m.Stop(ctxT(t), 200*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	exit, err := m.Wait(ctxT(t))
	// SeaBIOS ignores ACPI powerdown: Stop quits after the grace.
	if err != nil || !exit.Requested || !exit.StatusUnknown || exit.Reason != "host-qmp-quit" {
		t.Errorf("Wait after Stop = %+v, %v; want a requested exit, status unknown (host-qmp-quit)", exit, err)
	}
	e.released(t, m)
}

// TestAttachKill: Kill of an attached machine signals it through its pidfd
// and is a requested exit.
func TestAttachKill(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	m := e.attach(t, cfg, e.startOrphan(t, cfg))
	if err := m.Kill(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exit, err := m.Wait(ctxT(t))
	if err != nil || !exit.Requested || !exit.StatusUnknown || exit.Crashed() {
		t.Errorf("Wait after Kill = %+v, %v; want a requested exit, status unknown", exit, err)
	}
	if err := m.Kill(ctxT(t)); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	e.released(t, m)
}

// TestAttachCrash: an attached QEMU killed from outside is a crash whose
// error says the status is unknown; a later Attach to its pid is refused
// as exited.
func TestAttachCrash(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	o := e.startOrphan(t, cfg)
	m := e.attach(t, cfg, o)
	if err := syscall.Kill(o.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := m.Wait(ctxT(t))
	var xe *vmm.ExitError
	if !errors.Is(err, vmm.ErrCrashed) || !errors.As(err, &xe) || !exit.StatusUnknown || exit.Requested {
		t.Fatalf("Wait = %+v, %v; want an ExitError (ErrCrashed), status unknown", exit, err)
	}
	if !strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), "attached") {
		t.Errorf("crash error %q does not say the status is unknown because the machine was attached", err)
	}
	t.Logf("crash: %v", err)
	if _, err := m.Status(ctxT(t)); !errors.Is(err, vmm.ErrCrashed) {
		t.Errorf("Status after crash = %v, want ErrCrashed", err)
	}
	e.released(t, m)
	if _, err := e.v.Attach(ctxT(t), cfg, o.PID, o.StartTime, o.UID); !errors.Is(err, vmm.ErrExited) {
		t.Errorf("Attach to a dead machine = %v, want ErrExited", err)
	}
	if n := e.uidsHeld(); n != 0 {
		t.Errorf("%d uids held", n)
	}
}

// TestAttachedExitStatus: the exit of a process that is not ours counts
// as requested when asked for, clean after a guest-initiated shutdown QEMU
// announced, and as a crash otherwise. A plain child stands in for QEMU.
func TestAttachedExitStatus(t *testing.T) {
	for _, tc := range []struct {
		reason    string
		requested bool
		crashed   bool
	}{
		{"guest-shutdown", false, false},
		{"guest-reset", false, false},
		{"", false, true},
		{"host-signal", false, true},
		{"", true, false},
	} {
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		m := &Machine{pidfd: pidfd, stderr: "/nonexistent", exited: make(chan struct{}), watcherDone: make(chan struct{})}
		m.exit.Reason = tc.reason
		m.requested.Store(tc.requested)
		close(m.watcherDone)
		m.waitProcess()
		cmd.Wait()
		unix.Close(pidfd)
		if m.exit.Crashed() != tc.crashed || (m.exitErr != nil) != tc.crashed || !m.exit.StatusUnknown || m.exit.Reason != tc.reason {
			t.Errorf("reason %q, requested %v: exit %+v, err %v; want crashed %v", tc.reason, tc.requested, m.exit, m.exitErr, tc.crashed)
		}
	}
}
