package blockserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/blob/blobspec"
	"warren/internal/blockdev"
	"warren/internal/blockdev/fusefile"
	"warren/internal/chunkstore"
	"warren/internal/detached"
)

// Command is the hidden subcommand of warren that runs the block server
// (`warren block-server`): Start runs it, never a person.
const Command = "block-server"

// ErrRunning means another block server holds the data directory.
var ErrRunning = errors.New("a block server already runs on the data directory")

// Options are the block server's settings, the same for Start and the
// process it starts.
type Options struct {
	DataDir string
	// BlobStore is the object tier, as the daemon's --blob-store (empty:
	// the data directory's blobs).
	BlobStore string
	// ClusterStore is the in-cluster tier (--cluster-store); empty: none.
	ClusterStore string
	// MaxLag bounds how far object storage may be behind the cluster tier
	// (0: blockdev's default).
	MaxLag time.Duration
	// DurableLimit bounds each volume's bytes in the durable tier, as a
	// multiple of its disk's size; Reserve is the free space kept on the
	// node's disk (0: blockdev's defaults; blockdev.Options).
	DurableLimit float64
	Reserve      int64
	Log          *slog.Logger
}

func (o Options) args() []string {
	return []string{Command, "--data-dir", o.DataDir, "--blob-store", o.BlobStore,
		"--cluster-store", o.ClusterStore, "--max-lag", o.MaxLag.String(),
		"--durable-limit", strconv.FormatFloat(o.DurableLimit, 'g', -1, 64), "--reserve", strconv.FormatInt(o.Reserve, 10)}
}

// startFlusher starts the block server as an I/O flusher, so that its
// allocations never wait on the writeback of its own files
// (fusefile.StartIOFlusher); without CAP_SYS_RESOURCE it starts it plainly,
// and says what that risks.
func (o Options) startFlusher(cmd *exec.Cmd) error {
	err := fusefile.StartIOFlusher(cmd)
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	if o.Log != nil {
		o.Log.Warn("the block server runs without PR_SET_IO_FLUSHER (no CAP_SYS_RESOURCE): under memory pressure its FUSE files can stall on their own writeback", "err", err)
	}
	return cmd.Start()
}

// readyWait bounds how long Start waits for the block server: it serves
// again the volumes it held before it answers.
const readyWait = 2 * time.Minute

// Start returns a client of the data directory's block server, starting
// it first if none answers. A block server outlives the daemon that
// started it; the next daemon finds it running.
func Start(ctx context.Context, opts Options) (*Client, error) {
	// The block server runs in /: every path it is given is absolute.
	var err error
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return nil, err
	}
	for _, spec := range []*string{&opts.BlobStore, &opts.ClusterStore} {
		if *spec != "" && !strings.Contains(*spec, "://") {
			if *spec, err = filepath.Abs(*spec); err != nil {
				return nil, err
			}
		}
	}
	c := NewClient(opts.DataDir)
	if c.Ping(ctx) == nil {
		return c, nil
	}
	p, err := detached.Start(opts.args(), filepath.Join(opts.DataDir, logFile), readyWait, opts.startFlusher)
	if err != nil {
		// Another daemon's start may have won the data directory.
		if c.Ping(ctx) == nil {
			return c, nil
		}
		return nil, fmt.Errorf("start the block server: %w", err)
	}
	if opts.Log != nil {
		opts.Log.Info("block server started", "pid", p.Pid, "log", filepath.Join(opts.DataDir, logFile))
	}
	return c, nil
}

// Main is the block server's subcommand: it takes the data directory's
// lock, opens the tiers, serves again the volumes it held, and serves
// until ctx ends (SIGTERM), when it closes every volume, written back.
// Its log goes to stderr.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts Options
	fs.StringVar(&opts.DataDir, "data-dir", "", "the node's data directory")
	fs.StringVar(&opts.BlobStore, "blob-store", "", "the object tier (as warren server's --blob-store)")
	fs.StringVar(&opts.ClusterStore, "cluster-store", "", "the in-cluster tier; empty: none")
	fs.DurationVar(&opts.MaxLag, "max-lag", 0, "how far object storage may be behind the cluster tier")
	fs.Float64Var(&opts.DurableLimit, "durable-limit", 0, "each volume's bytes in the durable tier, at most, as a multiple of its disk's size (0: 3)")
	fs.Int64Var(&opts.Reserve, "reserve", 0, "bytes kept free on the node's disk: writes past it fail with ENOSPC (0: 512 MiB; negative: none)")
	readyFD := fs.Int("ready-fd", -1, "descriptor to write a byte to, and close, once serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if opts.DataDir == "" {
		return errors.New("block server: --data-dir is required")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("pid", os.Getpid(), "subsystem", "blockserver")
	// Every always-on disk of the node goes through this process: the OOM
	// killer must take a sandbox first.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err != nil {
		log.Warn("the OOM killer may pick the block server", "err", err)
	}
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	object, err := blobspec.Open(ctx, opts.BlobStore, filepath.Join(opts.DataDir, "blobs"), log)
	if err != nil {
		return err
	}
	defer object.Close()
	// A chunk a flush finds present but older than refreshAfter is written
	// again, so that the snapshot engine's collector (on any node), which
	// spares what is younger than its grace, never deletes a chunk a
	// flush just named (chunkstore.Store.RefreshAfter).
	tiers := blockdev.Tiers{Object: chunkstore.Store{B: object, RefreshAfter: refreshAfter}}
	if opts.ClusterStore != "" {
		cluster, err := blobspec.Open(ctx, opts.ClusterStore, "", log)
		if err != nil {
			return fmt.Errorf("cluster store: %w", err)
		}
		defer cluster.Close()
		tiers.Cluster = &chunkstore.Store{B: cluster, RefreshAfter: refreshAfter}
	}
	vopts := blockdev.Options{MaxLag: opts.MaxLag, DurableLimit: opts.DurableLimit, Reserve: opts.Reserve}
	s := New(Config{DataDir: opts.DataDir, Tiers: tiers, Volume: vopts, Log: log})
	s.Resume(ctx)
	err = s.Serve(ctx, detached.Ready(*readyFD))
	if err != nil {
		log.Error("the block server stopped", "err", err)
	}
	return err
}

// refreshAfter is half the snapshot engine's default collector grace
// (snapshot.DefaultConfig), as the engine's own uploads use.
const refreshAfter = 30 * time.Minute

// lockDataDir takes the data directory's block server lock, held while
// the file returned is open; it records this process, for Stop and Kill.
func lockDataDir(dataDir string) (*os.File, error) {
	f, err := detached.Lock(filepath.Join(dataDir, lockFile))
	if errors.Is(err, detached.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrRunning, dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("block server lock: %w", err)
	}
	return f, nil
}

// Lazy is the daemon's handle on its block server: it starts the server
// at its first use, and again if it is found gone, so that a node without
// always-on disks runs none. It is safe for concurrent use.
type Lazy struct {
	opts Options
	mu   sync.Mutex // guards c, and serializes starts
	c    *Client
}

// NewLazy returns a handle on the block server Start(opts) would start.
func NewLazy(opts Options) *Lazy { return &Lazy{opts: opts} }

// Client returns a client of the running block server, starting it first
// if it does not answer.
func (l *Lazy) Client(ctx context.Context) (*Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil && l.c.Ping(ctx) == nil {
		return l.c, nil
	}
	c, err := Start(ctx, l.opts)
	if err != nil {
		return nil, err
	}
	l.c = c
	return c, nil
}

// Stop stops the block server of dataDir, if one runs, as SIGTERM does:
// it closes every volume, written back, and unmounts its files. It
// returns once the server has exited (its lock is free), or when ctx
// ends. Volumes a sandbox still has attached fail from then on.
func Stop(ctx context.Context, dataDir string) error { return end(ctx, dataDir, unix.SIGTERM) }

// Kill kills the block server of dataDir, if one runs, with SIGKILL: it
// writes nothing more to the tiers, as if its node were lost. A fleet
// node's lease watchdog kills it when the lease lapses, before another
// node may take its volumes over.
func Kill(ctx context.Context, dataDir string) error { return end(ctx, dataDir, unix.SIGKILL) }

// end sends sig to the block server of dataDir and waits for it to exit.
func end(ctx context.Context, dataDir string, sig unix.Signal) error {
	if _, err := os.Stat(filepath.Join(dataDir, lockFile)); errors.Is(err, os.ErrNotExist) {
		return nil // none ever ran here
	}
	_, err := detached.Signal(ctx, filepath.Join(dataDir, lockFile), sig)
	if err != nil {
		return fmt.Errorf("stop the block server: %w", err)
	}
	return nil
}
