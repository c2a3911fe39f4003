// Package procid names one process across pid reuse: a pid together with the
// process's start time (field 22 of /proc/PID/stat, in clock ticks since
// boot), which a later process given the same pid cannot share.
//
// It is for state that outlives the process that recorded it (an earlier
// daemon's sandbox inits and QEMUs) and for reaching a process through
// /proc/PID paths. It does not signal or wait: callers do that through the
// pidfd Open returns, which stays bound to the process it was opened on, or
// through a Process watching it.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrGone means the pid names no process, or another process than the one
// that started at the recorded time.
var ErrGone = errors.New("process is gone")

// StartTime is the start time of process pid: field 22 (starttime) of
// /proc/PID/stat.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(pid, b)
}

// parseStat reads the start time out of the text of /proc/PID/stat.
func parseStat(pid int, b []byte) (uint64, error) {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	start, err := strconv.ParseUint(fields[19], 10, 64) // field 22 is the 20th after the name
	if err != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return start, nil
}

// Is reports whether pid names the process that started at start now.
//
// Call it after opening something through /proc/PID (its root, its
// namespaces): if the pid was reused before the open, the start time read
// afterwards is the new process's, so a true answer means the open reached
// the recorded process.
func Is(pid int, start uint64) bool {
	got, err := StartTime(pid)
	return err == nil && got == start
}

// Open returns a pidfd of the process pid that started at start. The error
// wraps ErrGone if pid names no process or another one.
//
// The pidfd is opened first and the start time read after it: had the pid
// been reused before the pidfd was opened, the start time would be the new
// process's. So once Open returns, the pidfd names the recorded process for
// good, even if it exits and its pid is reused.
//
// A process that has exited but not been reaped yet (a zombie) still passes;
// Exited tells it apart.
func Open(pid int, start uint64) (int, error) {
	if pid <= 0 {
		return -1, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	if !Is(pid, start) {
		unix.Close(pidfd)
		return -1, fmt.Errorf("process %d is another one: %w", pid, ErrGone)
	}
	return pidfd, nil
}

// Exited reports whether the process of pidfd has exited (it may not have
// been reaped yet). It does not block.
func Exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err != unix.EINTR {
			return err == nil && n > 0
		}
	}
}

// Process is a process watched through its pidfd (Watch). Done is closed
// once it has exited; a Kill after that is a no-op, never a signal to a
// process that reused its pid.
type Process struct {
	mu    sync.Mutex
	pidfd int // -1 once the process has exited
	done  chan struct{}
}

// Watch takes pidfd over and watches its process.
func Watch(pidfd int) *Process {
	p := &Process{pidfd: pidfd, done: make(chan struct{})}
	go func() {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		p.mu.Lock()
		unix.Close(p.pidfd)
		p.pidfd = -1
		p.mu.Unlock()
		close(p.done)
	}()
	return p
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill sends the process SIGKILL if it has not exited.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
	}
}
