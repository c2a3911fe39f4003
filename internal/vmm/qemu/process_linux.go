//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/vmm"
)

// waitProcess waits for QEMU to exit and records how it ended. It runs
// from Start or Attach until the process is gone.
//
// A started QEMU is this process's child: cmd.Wait reaps it and tells its
// exit status. An attached one is not (it was reparented when the process
// that started it died): its pidfd turns readable when it exits and its
// status is not ours to read, so the exit counts as requested when Stop or
// Kill asked for it, as clean when QEMU announced a shutdown the guest
// asked for (SHUTDOWN with a guest-* reason, as after a guest poweroff,
// when a started QEMU exits 0), and as a crash otherwise.
func (m *Machine) waitProcess() {
	var exit vmm.Exit
	if m.cmd != nil {
		m.cmd.Wait()
		ps := m.cmd.ProcessState
		exit.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = ws.Signal()
		}
	} else {
		waitPidfd(m.pidfd)
		// QEMU sent its SHUTDOWN event before it exited; the watcher sees
		// it before the end of the connection, which QEMU's exit brings.
		select {
		case <-m.watcherDone:
		case <-time.After(exitGrace):
		}
		exit.StatusUnknown, exit.Code = true, -1
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	exit.Requested, exit.Time = m.requested.Load(), time.Now()
	exit.Reason = m.exit.Reason // a SHUTDOWN event may have come first
	if exit.StatusUnknown && strings.HasPrefix(exit.Reason, "guest-") {
		exit.Code = 0
	}
	m.exit, m.exitErr = exit, nil
	if exit.Crashed() {
		m.exitErr = &vmm.ExitError{Exit: exit, Stderr: tail(m.stderr, stderrTail)}
	}
	close(m.exited)
}

// waitPidfd blocks until the process of pidfd has exited.
func waitPidfd(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || err != unix.EINTR && err != unix.EAGAIN {
			// Any other error would be a bad pidfd (it stays open until
			// this returns): the machine is then released, its cgroup
			// killed, rather than followed blind.
			return
		}
	}
}

// signal sends sig to QEMU through its pidfd, so never to a later process
// that reused its pid. Once QEMU has exited it does nothing.
func (m *Machine) signal(sig unix.Signal) error {
	m.pidMu.Lock()
	defer m.pidMu.Unlock()
	if m.pidfd < 0 {
		return nil
	}
	if err := unix.PidfdSendSignal(m.pidfd, sig, nil, 0); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

func (m *Machine) closePidfd() {
	m.pidMu.Lock()
	defer m.pidMu.Unlock()
	if m.pidfd >= 0 {
		unix.Close(m.pidfd)
		m.pidfd = -1
	}
}

// watchEvents records the reason of QEMU's SHUTDOWN event in the exit. It
// runs until the QMP connection ends.
func (m *Machine) watchEvents(events <-chan Event) {
	defer close(m.watcherDone)
	for ev := range events {
		if ev.Name != "SHUTDOWN" {
			continue
		}
		var d struct{ Reason string }
		json.Unmarshal(ev.Data, &d)
		m.exitMu.Lock()
		m.exit.Reason = d.Reason
		m.exitMu.Unlock()
		m.log.Info("machine shutting down", "reason", d.Reason)
	}
}

// reap releases what the machine holds once QEMU has exited. It runs from
// a successful Start until then.
func (m *Machine) reap() {
	<-m.exited
	m.closePidfd()
	m.qmp.Close()
	<-m.watcherDone
	// Nothing of the machine can run any more (QEMU was PID 1 of its pid
	// namespace), but the kernel may still be tearing it down.
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	if err := m.cg.Destroy(ctx); err != nil {
		m.log.Error("destroy machine cgroup", "err", err)
	}
	if m.console != nil {
		m.console.Stop()
	}
	for _, p := range []string{m.qmpSock, m.cfg.AgentSocket} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove socket", "path", p, "err", err)
		}
	}
	m.v.freeUID(m.uid)
	m.exitMu.Lock()
	exit, exitErr := m.exit, m.exitErr
	if e, ok := exitErr.(*vmm.ExitError); ok {
		e.Exit.Reason = exit.Reason
	}
	m.exitMu.Unlock()
	if exitErr != nil {
		m.log.Error("machine crashed", "exit", exit.String(), "err", exitErr)
	} else {
		m.log.Info("machine ended", "exit", exit.String(), "requested", exit.Requested)
	}
	close(m.done)
}

// tail returns the last n bytes of the file at path, from a line start
// when it can, trimmed; "" if it cannot be read.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, n))
	if err != nil {
		return ""
	}
	s := string(b)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
