//go:build linux

// Package leasewatch kills a fleet node's sandboxes when the node's lease
// lapses and its daemon cannot do it: killed with -9, hung, or blocked on
// I/O. A control replica fences a node Config.FenceAfter after its last
// heartbeat and may then run its sandboxes elsewhere; the daemon stops
// them itself after Config.Lease without a renewal (package fleet), but
// only while it runs.
//
// The daemon starts the watchdog (Start): the same binary, re-executed as
// `warren node-watchdog`, in a session of its own so that it outlives the
// daemon and its process group. At each renewal the daemon records when
// the renewing heartbeat was sent (Watch.Renew, into DataDir/lease). The
// watchdog reads that every 250 ms; once the last renewal is older than
// the lease, it kills every sandbox the data directory names
// (DataDir/sandboxes/<id>: the processes of cgroup warren/<id>, then the
// cgroup), logs it to DataDir/watchdog.log, and exits. It kills nothing
// else: the other warren daemons of the host have cgroups under warren/
// too.
//
// One watchdog runs per data directory (an flock on DataDir/watchdog.lock).
// A daemon's exit, clean or not, leaves the watchdog guarding the
// sandboxes it leaves running, until a new daemon on the data directory
// starts its own (which stops the old one and guards the same lease file)
// or the lease lapses.
//
// It is not a fence of its own: it does not talk to the store, and it
// relies on the daemon's clock being the host's (the boot clock, which
// wall-clock steps do not move).
package leasewatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/detached"
)

// Options name the node's lease and sandboxes.
type Options struct {
	// DataDir is the node's data directory: the lease file, the lock and
	// the watchdog's log are there.
	DataDir string
	// StateDir holds one entry per sandbox of the node, named by its ID
	// (the sandbox manager's StateDir).
	StateDir string
	// Lease is how long a renewal lasts (fleet.Config.Lease).
	Lease time.Duration
	// Log is the daemon's log for Start and Watch, the watchdog's own for
	// RunWatchdog.
	Log *slog.Logger
}

func (o Options) check() error {
	switch {
	case o.DataDir == "" || o.StateDir == "":
		return errors.New("lease watchdog: no data or state directory")
	case o.Lease <= 0:
		return fmt.Errorf("lease watchdog: lease %v is not positive", o.Lease)
	}
	return nil
}

// logFile, in the data directory, is the watchdog's log (its stderr): the
// daemon's own may be gone when the watchdog has something to say.
const logFile = "watchdog.log"

// readyWait bounds how long Start waits for the watchdog to be watching.
const readyWait = 10 * time.Second

// stopWait bounds how long Start waits for an earlier watchdog to exit.
const stopWait = 10 * time.Second

// Watch is the daemon's side of its watchdog.
type Watch struct {
	opts  Options
	boot  string
	lease *os.File // the lease file, rewritten in place at each renewal
	// exited is closed once the watchdog last started has exited (its
	// waiting goroutine reaps it). Start and Renew alone use it, from one
	// goroutine at a time.
	exited <-chan struct{}
}

// Start starts the watchdog of the node on opts.DataDir, stopping first
// one that an earlier daemon on the data directory left running. The new
// one guards the lease file as it is, the earlier daemon's last renewal
// included. Start returns once it watches.
func Start(opts Options) (*Watch, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	// The watchdog runs in /, holding no directory of the daemon's busy.
	var err error
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return nil, err
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(opts.DataDir, leaseFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lease file: %w", err)
	}
	w := &Watch{opts: opts, boot: boot, lease: f}
	if err := w.start(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Renew records that a heartbeat sent at sent renewed the lease, and
// starts the watchdog again if it has exited (it does once it has killed
// the sandboxes of a lapsed lease; the node runs new ones after it joins
// the fleet again). It is fleet.Join's renewed, called from one goroutine
// at a time; it logs what fails.
func (w *Watch) Renew(sent time.Time) {
	r, err := renewalAt(w.boot, sent)
	if err == nil {
		_, err = w.lease.WriteAt(r.encode(), 0)
	}
	if err != nil {
		w.opts.Log.Error("the lease watchdog is not told of a renewal", "err", err)
	}
	select {
	case <-w.exited:
		w.opts.Log.Warn("the lease watchdog has exited; starting it again")
		if err := w.start(); err != nil {
			w.opts.Log.Error("start the lease watchdog", "err", err)
		}
	default:
	}
}

// start stops the data directory's watchdog if one runs, starts a new one
// and waits until it watches.
func (w *Watch) start() error {
	if err := stopWatchdog(w.opts.DataDir, w.opts.Log); err != nil {
		return err
	}
	logPath := filepath.Join(w.opts.DataDir, logFile)
	p, err := detached.Start([]string{Command, "--data-dir", w.opts.DataDir, "--state-dir", w.opts.StateDir,
		"--lease", w.opts.Lease.String()}, logPath, readyWait, nil)
	if err != nil {
		return fmt.Errorf("start the lease watchdog: %w", err)
	}
	w.exited = p.Exited
	w.opts.Log.Info("lease watchdog started", "pid", p.Pid, "log", logPath)
	return nil
}

// stopWatchdog kills the watchdog that holds dataDir's lock, if any,
// through a pidfd of the process it recorded there, and returns once the
// lock is free.
func stopWatchdog(dataDir string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	pid, err := detached.Signal(ctx, filepath.Join(dataDir, lockFile), unix.SIGKILL)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("a lease watchdog still holds its lock in %s after %v", dataDir, stopWait)
	}
	if err != nil {
		return fmt.Errorf("stop the lease watchdog: %w", err)
	}
	if pid != 0 {
		log.Info("stopped the lease watchdog an earlier daemon left", "pid", pid)
	}
	return nil
}
