//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/consolelog"
	"warren/internal/vmm"
)

// Timeouts.
const (
	// quitWait bounds Stop's wait after QMP quit before it kills.
	quitWait = 3 * time.Second
	// killWait bounds the wait for a killed VMM to be reaped and released.
	killWait = 10 * time.Second
	// exitGrace is how long a failed QMP call waits to see whether the
	// VMM died (so that it reports the exit, not a bare EOF).
	exitGrace = 2 * time.Second
	// stderrTail is how much of QEMU's stderr a crash report carries.
	stderrTail = 2048
	// callTimeout bounds one QMP command when the caller's ctx has no
	// deadline: a VMM that stops answering (stuck, or compromised) must
	// not hang its caller.
	callTimeout = 30 * time.Second
	// startTimeout bounds Start when ctx has no deadline. A restore under
	// TCG reads the whole snapshot, seconds per GiB on slow hosts.
	startTimeout = 2 * time.Minute
)

// Machine is one QEMU process and its guest: started by Start, or
// attached to by Attach after the process that started it went away. Both
// kinds signal QEMU through a pidfd and release the same things when it
// ends; they differ only in how they learn of its end (see waitProcess).
type Machine struct {
	v       *VMM
	cfg     vmm.Config
	log     *slog.Logger
	cmd     *exec.Cmd // nil when attached: QEMU is not this process's child
	pid     int
	start   uint64 // field 22 of /proc/PID/stat: with pid, names QEMU
	uid     uint32
	cg      *cgroup.Group
	qmp     *Client // connected before Start or Attach returns; never changes
	qmpSock string
	stderr  string            // path of QEMU's stderr log
	console *consolelog.Drain // the serial console into Config.ConsoleLog; nil if not drained

	// pidMu guards pidfd, QEMU's pidfd, which reap closes (-1) once QEMU
	// has exited. waitProcess polls it unlocked: reap closes it only after.
	pidMu sync.Mutex
	pidfd int

	// requested is set by Stop and Kill before they act: the exit that
	// follows is not a crash.
	requested atomic.Bool

	// opMu serializes Pause, Resume and SaveMemory.
	opMu sync.Mutex
	// migrationSet says SaveMemory has set the migration parameters;
	// guarded by opMu.
	migrationSet bool

	exitMu sync.Mutex // guards exit and exitErr
	exit   vmm.Exit
	// exitErr is Wait's error: an *vmm.ExitError after a crash, else nil.
	exitErr error

	exited      chan struct{} // closed once QEMU has exited and exit is set
	watcherDone chan struct{} // closed when the event watcher has stopped
	done        chan struct{} // closed once everything is released
}

var _ vmm.Machine = (*Machine)(nil)

// gone returns nil while QEMU lives, else the error every query of an
// exited machine gets: wrapping vmm.ErrExited, and vmm.ErrCrashed (as an
// *vmm.ExitError) after a crash.
func (m *Machine) gone() error {
	select {
	case <-m.exited:
	default:
		return nil
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	if m.exitErr != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, m.exitErr)
	}
	return fmt.Errorf("machine %s: %w (%s)", m.cfg.ID, vmm.ErrExited, m.exit)
}

// explain turns a QMP failure caused by QEMU's death into the exit error:
// when the connection is gone it waits a moment for the process to be
// reaped.
func (m *Machine) explain(err error) error {
	if !errors.Is(err, ErrClosed) {
		return err
	}
	select {
	case <-m.exited:
		return m.gone()
	case <-time.After(exitGrace):
		return err
	}
}

// call runs a QMP command on the live machine, for at most callTimeout
// when ctx has no deadline.
func (m *Machine) call(ctx context.Context, command string, args, result any) error {
	if err := m.gone(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	return m.explain(m.qmp.Execute(ctx, command, args, result))
}

// PID implements vmm.Machine.
func (m *Machine) PID() int { return m.pid }

// StartTime is QEMU's start time, field 22 of /proc/PID/stat: with PID it
// names the process for Attach, never a later one that reused the pid.
func (m *Machine) StartTime() uint64 { return m.start }

// UID is the host uid (and gid) QEMU runs as.
func (m *Machine) UID() uint32 { return m.uid }

// Events subscribes to the machine's QMP events (see Client.Subscribe).
func (m *Machine) Events(buffer int) (<-chan Event, func()) { return m.qmp.Subscribe(buffer) }

// Status implements vmm.Machine.
func (m *Machine) Status(ctx context.Context) (vmm.Status, error) {
	var r struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := m.call(ctx, "query-status", nil, &r); err != nil {
		return vmm.Status{}, fmt.Errorf("status: %w", err)
	}
	return statusOf(r.Status, r.Running), nil
}

// statusOf maps QEMU's run states (qapi/run-state.json) to vmm's.
func statusOf(s string, running bool) vmm.Status {
	switch s {
	case "running":
		return vmm.Status{State: vmm.StateRunning, Detail: s}
	case "io-error", "internal-error", "guest-panicked", "watchdog", "shutdown":
		return vmm.Status{State: vmm.StateFailed, Detail: s}
	case "paused", "prelaunch", "postmigrate", "finish-migrate", "inmigrate",
		"save-vm", "restore-vm", "suspended", "debug", "colo":
		return vmm.Status{State: vmm.StatePaused, Detail: s}
	}
	if running {
		return vmm.Status{State: vmm.StateRunning, Detail: s}
	}
	return vmm.Status{State: vmm.StatePaused, Detail: s}
}

// Pause implements vmm.Machine.
func (m *Machine) Pause(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.call(ctx, "stop", nil, nil); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume implements vmm.Machine.
func (m *Machine) Resume(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.call(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// Stop implements vmm.Machine.
func (m *Machine) Stop(ctx context.Context, grace time.Duration) error {
	m.requested.Store(true)
	if m.gone() != nil {
		return m.waitDone(ctx)
	}
	if st, err := m.Status(ctx); err == nil && st.State == vmm.StateRunning && grace > 0 {
		if err := m.call(ctx, "system_powerdown", nil, nil); err != nil {
			m.log.Warn("ACPI powerdown", "err", err)
		} else if m.waitExited(ctx, grace) {
			return m.waitDone(ctx)
		}
	}
	if ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, quitWait)
		err := m.call(qctx, "quit", nil, nil)
		cancel()
		if err == nil && m.waitExited(ctx, quitWait) {
			return m.waitDone(ctx)
		}
	}
	return m.Kill(ctx)
}

// waitExited waits up to d, or until ctx ends, for QEMU to exit.
func (m *Machine) waitExited(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// waitDone waits for the machine to be released, at most killWait, even
// when ctx has ended: callers come here once QEMU is dead or dying.
func (m *Machine) waitDone(ctx context.Context) error {
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-m.done:
		return nil
	case <-t.C:
		return fmt.Errorf("machine %s: not released %v after its end", m.cfg.ID, killWait)
	}
}

// Kill implements vmm.Machine.
func (m *Machine) Kill(ctx context.Context) error {
	m.requested.Store(true)
	if err := m.signal(unix.SIGKILL); err != nil {
		return fmt.Errorf("kill machine %s: %w", m.cfg.ID, err)
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait implements vmm.Machine.
func (m *Machine) Wait(ctx context.Context) (vmm.Exit, error) {
	select {
	case <-m.done:
	case <-ctx.Done():
		return vmm.Exit{}, ctx.Err()
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	return m.exit, m.exitErr
}

// Done implements vmm.Machine.
func (m *Machine) Done() <-chan struct{} { return m.done }
