//go:build linux

package agent

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The reaper is the one place in the process that waits for children. The
// agent is PID 1 of its sandbox: every orphan of the sandbox is reparented
// to it and must be reaped, so the reaper waits for any child (wait4(-1))
// and hands the statuses of the processes the agent started to their owners.
// Nothing else in the process may wait for children while a reaper runs:
// exec.Cmd.Wait would race with it and fail with ECHILD.
//
// The race between a child exiting and its registration is closed by forkMu:
// a start holds it shared from fork until its pid is registered, and the
// reaper takes it exclusively between reaping and dispatching. A status the
// reaper collected is therefore dispatched only after every fork that could
// have produced that pid has registered it; a pid still unknown then is an
// orphan (or a child that failed to exec, which the fork itself reaps).
//
// Lock order: forkMu before mu.

// exitFunc receives the wait status of a reaped process. It runs on the
// reaper's goroutine and must not block.
type exitFunc func(ws unix.WaitStatus)

type reaper struct {
	log *slog.Logger

	forkMu sync.RWMutex // shared: a fork in progress; exclusive: dispatching

	mu      sync.Mutex // guards waiters
	waiters map[int]exitFunc

	sigs chan os.Signal
	stop chan struct{}
	done chan struct{}

	setSubreaper bool // prctl(PR_SET_CHILD_SUBREAPER) was set by this reaper
}

var (
	reaperMu   sync.Mutex // guards theReaper and reaperRefs
	theReaper  *reaper
	reaperRefs int
)

// acquireReaper starts the process's reaper, or shares the running one.
// Each call must be paired with releaseReaper.
func acquireReaper(log *slog.Logger) *reaper {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	reaperRefs++
	if theReaper != nil {
		return theReaper
	}
	r := &reaper{
		log:     log,
		waiters: make(map[int]exitFunc),
		sigs:    make(chan os.Signal, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if os.Getpid() != 1 {
		// Not the sandbox's init (tests, dev): become a subreaper so orphans
		// of the processes we start still come to us.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("set child subreaper", "err", err)
		} else {
			r.setSubreaper = true
		}
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	theReaper = r
	return r
}

// releaseReaper drops a reference taken by acquireReaper; the last one stops
// the reaper, after which children are no longer waited for.
func releaseReaper() {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	reaperRefs--
	if reaperRefs > 0 || theReaper == nil {
		return
	}
	r := theReaper
	theReaper = nil
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
	if r.setSubreaper {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
}

// register asks for fn to be called with pid's wait status. It must be called
// while holding forkMu shared, from before the fork that made pid.
func (r *reaper) register(pid int, fn exitFunc) {
	r.mu.Lock()
	r.waiters[pid] = fn
	r.mu.Unlock()
}

func (r *reaper) loop() {
	defer close(r.done)
	r.reap() // children that exited before the signal was wired
	for {
		select {
		case <-r.stop:
			return
		case <-r.sigs:
			r.reap()
		}
	}
}

type reaped struct {
	pid int
	ws  unix.WaitStatus
}

// reap collects every exited child, then dispatches the statuses.
func (r *reaper) reap() {
	var batch []reaped
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		batch = append(batch, reaped{pid, ws})
	}
	if len(batch) == 0 {
		return
	}
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range batch {
		fn, ok := r.waiters[c.pid]
		if !ok {
			continue // an orphan: reaping it was all it needed
		}
		delete(r.waiters, c.pid)
		fn(c.ws)
	}
}
