//go:build linux

package leasewatch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"warren/internal/blockserver"
	"warren/internal/cgroup"
	"warren/internal/detached"
)

// Command is the hidden subcommand of warren that runs the watchdog
// (`warren node-watchdog`): Start runs it, never a person.
const Command = "node-watchdog"

// lockFile, in the data directory, is flocked by the one watchdog of the
// data directory for its life, and holds "PID START" (procid) of it, for
// Start to stop it by.
const lockFile = "watchdog.lock"

// poll is how often the watchdog reads the lease file: the sandboxes die
// at most this long (plus the time the kill takes) after the lease
// lapsed, well before a control replica fences the node (Config.FenceAfter
// is longer than the lease by seconds).
const poll = 250 * time.Millisecond

// killWait bounds one attempt at killing a sandbox's cgroup; a sandbox not
// dead by then is tried again at the next poll.
const killWait = 10 * time.Second

// ErrRunning is RunWatchdog's answer when another watchdog holds the data
// directory.
var ErrRunning = errors.New("a lease watchdog already runs on the data directory")

// Killer ends the node's sandboxes when its lease lapses.
type Killer interface {
	// Kill kills every process of sandbox id and removes its cgroups,
	// touching nothing of any other sandbox; a sandbox with no cgroup is
	// not an error. It is called concurrently for different sandboxes, and
	// again for one whose Kill failed.
	Kill(ctx context.Context, id string) error
}

// cgroups kills a sandbox through its cgroup warren/<id>, in every
// controller, as the runtimes name it.
type cgroups struct{ h *cgroup.Hierarchy }

var _ Killer = cgroups{}

func (c cgroups) Kill(ctx context.Context, id string) error {
	g, err := c.h.Open(id)
	if errors.Is(err, cgroup.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return g.Destroy(ctx)
}

// Main is the watchdog's subcommand: it parses the arguments Start passes
// and runs RunWatchdog, killing through the host's cgroups. Its log goes
// to stderr.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	return runCommand(ctx, args, stderr, nil)
}

// runCommand is Main; a nil k kills through the host's cgroups.
func runCommand(ctx context.Context, args []string, stderr io.Writer, k Killer) error {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "the node's data directory")
	stateDir := fs.String("state-dir", "", "the directory with one entry per sandbox of the node")
	lease := fs.Duration("lease", 0, "how long a renewal of the lease lasts")
	readyFD := fs.Int("ready-fd", -1, "descriptor to write a byte to, and close, once watching")
	if err := fs.Parse(args); err != nil {
		return err
	}
	base := slog.New(slog.NewTextHandler(stderr, nil)).With("pid", os.Getpid())
	log := base.With("subsystem", "leasewatch")
	// The OOM killer must not take the watchdog of a node under memory
	// pressure, before the sandboxes it guards.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err != nil {
		log.Warn("the OOM killer may pick the watchdog", "err", err)
	}
	if k == nil {
		h, err := cgroup.Detect(base) // which names its subsystem itself
		if err != nil {
			return err
		}
		k = cgroups{h}
	}
	err := RunWatchdog(ctx, Options{DataDir: *dataDir, StateDir: *stateDir, Lease: *lease, Log: log}, k, detached.Ready(*readyFD))
	if err != nil {
		log.Error("the watchdog stopped", "err", err)
	}
	return err
}

// RunWatchdog guards the lease of the node on opts.DataDir: every poll it
// reads the lease file, and once the last renewal is older than
// opts.Lease, it kills every sandbox named in opts.StateDir through k and
// returns nil. It also returns nil, killing nothing, when the data
// directory is removed, and when it guards no lease (none was renewed in
// this boot) and the process that started it has exited; an error when
// ctx ends or another watchdog holds the data directory (ErrRunning).
// ready, if not nil, is called once it holds the data directory and has
// read the lease file.
//
// A daemon that exits, cleanly or not, leaves its sandboxes running for
// the next to adopt: the watchdog keeps guarding them until a new daemon
// on the data directory replaces it (Start) or the lease lapses.
func RunWatchdog(ctx context.Context, opts Options, k Killer, ready func()) error {
	if err := opts.check(); err != nil {
		return err
	}
	log := opts.Log
	dir, err := os.Stat(opts.DataDir)
	if err != nil {
		return fmt.Errorf("lease watchdog: %w", err)
	}
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	boot, err := bootID()
	if err != nil {
		return err
	}
	parent := os.Getppid()
	w := &watcher{path: filepath.Join(opts.DataDir, leaseFile), boot: boot, log: log}
	w.read()
	log.Info("guarding the node's lease", "data_dir", opts.DataDir, "lease", opts.Lease, "renewed_at", w.wall())
	if ready != nil {
		ready()
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		// Removed, or removed and made again: its sandboxes went with it.
		if fi, err := os.Stat(opts.DataDir); errors.Is(err, fs.ErrNotExist) || err == nil && !os.SameFile(dir, fi) {
			log.Info("the data directory is gone: nothing left to guard", "data_dir", opts.DataDir)
			return nil
		}
		w.read()
		now, err := bootClock()
		if err != nil {
			return err
		}
		switch {
		case w.armed && lapsed(w.last, now, opts.Lease):
			log.Error("the lease lapsed: killing the node's block server and sandboxes", "renewed_at", w.wall(),
				"ago", (now - w.last.sent).Round(time.Millisecond), "lease", opts.Lease)
			// First the block server: it must write nothing more to the
			// tiers, where another node may soon take its volumes over.
			kctx, cancel := context.WithTimeout(ctx, killWait)
			if err := blockserver.Kill(kctx, opts.DataDir); err != nil {
				log.Error("kill the block server", "err", err)
			}
			cancel()
			return killAll(ctx, opts.StateDir, k, log)
		case !w.armed && os.Getppid() != parent:
			log.Info("the daemon that started the watchdog is gone, and no lease is to guard")
			return nil
		}
		select {
		case <-ctx.Done():
			log.Warn("stopped: the node's sandboxes are not guarded any more", "err", ctx.Err())
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watcher keeps the last renewal the lease file showed. It is the
// watchdog's loop's own.
type watcher struct {
	path  string
	boot  string
	log   *slog.Logger
	armed bool    // a renewal of this boot was read
	last  renewal // the latest renewal read, when armed
}

// read reads the lease file. A missing file, one of another boot, or a
// torn line renews nothing: the latest renewal read stays.
func (w *watcher) read() {
	b, err := os.ReadFile(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var r renewal
	if err == nil {
		r, err = decode(b)
	}
	switch {
	case errors.Is(err, errTorn):
		w.log.Debug("lease file read mid-write", "path", w.path)
	case err != nil:
		w.log.Warn("read the lease file", "err", err)
	case r.boot != w.boot:
	case !w.armed || r.sent > w.last.sent:
		w.armed, w.last = true, r
	}
}

// wall is when the latest renewal read was sent, for the log.
func (w *watcher) wall() any {
	if !w.armed {
		return "never"
	}
	return w.last.wall
}

// killAll kills every sandbox named in stateDir through k, trying again
// those it could not kill, and listing again for any that appeared
// meanwhile, until none is left or ctx ends.
func killAll(ctx context.Context, stateDir string, k Killer, log *slog.Logger) error {
	killed := map[string]bool{}
	for {
		entries, err := os.ReadDir(stateDir)
		if errors.Is(err, fs.ErrNotExist) {
			err = nil // no sandbox ever ran here
		}
		var pending []string
		for _, e := range entries {
			if !killed[e.Name()] {
				pending = append(pending, e.Name())
			}
		}
		if err == nil && len(pending) == 0 {
			log.Warn("every sandbox of the node is killed", "sandboxes", slices.Sorted(maps.Keys(killed)))
			return nil
		}
		if err != nil {
			log.Error("list the node's sandboxes", "err", err)
		}
		var mu sync.Mutex // guards killed and failed
		failed := err != nil
		var wg sync.WaitGroup
		for _, id := range pending {
			wg.Go(func() {
				kctx, cancel := context.WithTimeout(ctx, killWait)
				defer cancel()
				err := k.Kill(kctx, id)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					log.Error("kill a sandbox", "sandbox", id, "err", err)
					failed = true
					return
				}
				log.Info("no process of the sandbox is left", "sandbox", id)
				killed[id] = true
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if failed {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(poll):
			}
		}
	}
}

// lockDataDir takes the data directory's watchdog lock, held as long as
// the file returned is open, and records this process in it.
func lockDataDir(dataDir string) (*os.File, error) {
	f, err := detached.Lock(filepath.Join(dataDir, lockFile))
	if errors.Is(err, detached.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrRunning, dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("lease watchdog lock: %w", err)
	}
	return f, nil
}
