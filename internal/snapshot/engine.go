// Package snapshot is the node's snapshot engine: it saves a sandbox's disk
// as a copy-on-write clone in the node's cache (the moment the API answers),
// uploads the clone's layer — the blocks that differ from its parent's — to
// the blob store in the background until it is durable, materializes any
// durable snapshot back into the cache (from the deepest ancestor already
// there, fetching the rest), deletes snapshots and collects the chunks no
// snapshot needs any more.
//
// It does not quiesce filesystems or start sandboxes (the sandbox manager
// does, through the guest agent and a runtime), and it does not know the
// layer format (internal/layer) or the storage backend (internal/blob).
//
// # Names in the blob store
//
//	chunks/<name>              a zstd-compressed chunk, named by its bytes
//	                           and its layer's namespace (layer.ChunkName)
//	manifests/<snapshot>.json  a layer's manifest; present only once every
//	                           chunk it lists is stored and verified
//	intents/<snapshot>.json    an upload in progress: its chunks and parent
//	                           are live for the collector
//	deleted/<snapshot>         a deleted snapshot, kept while a descendant
//	                           needs its layer
//	images/<image>.json        a paused sandbox's memory image, whose files
//	                           are layers mi-<image>-<n> (memory.go)
//
// # Deduplication
//
// Equal chunks are stored once within a tenant: a layer's namespace is its
// snapshot's tenant, and the same bytes of two tenants have two names and
// two objects. Were they shared, a tenant could learn whether any other had
// stored some bytes, from stored_bytes, from the upload's time or from the
// blob store's request counts. Template base layers have no tenant and are
// named plainly (as every layer of format version 1 was): what every sandbox
// starts from is stored once for all.
//
// # Lineage
//
// The root of every lineage is a template base layer ("tb-…"), the
// template's image as a layer over an empty disk, uploaded once per template
// build. A sandbox's first snapshot is stored against the base of its
// template or against the snapshot it was restored from; each later one
// against the sandbox's previous snapshot.
//
// # Locks
//
// Engine.gcMu is taken after waiting for a parent, never while holding
// Engine.mu. An upload or materialization holds gcMu shared from its intent
// until its manifest is stored; the collector holds it exclusively, so on
// one node it never collects what an upload in flight is about to reference.
//
// # Collecting while other nodes upload
//
// The blob store offers no lock and no conditional write, so the collector
// and uploads on other nodes sharing it are kept apart by these rules:
// objects younger than the grace are never collected; an upload writes an
// intent naming its parent before it diffs, rewrites any chunk it reuses
// that is older than half the grace (refreshing its age), checks every chunk
// before writing its manifest and every ancestor's manifest after; the
// collector marks twice (the second look just before it deletes) and looks
// at each chunk's age again right before deleting it. What is left: an
// upload on another node over a deleted snapshot, that runs from its intent
// to its lineage check entirely between the collector's second look and
// its deletion of that snapshot's manifest (milliseconds apart), leaves a
// durable snapshot whose parent is gone. Run the collector on one node, or
// with a grace longer than any upload, to rule even that out.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/disk"
	"warren/internal/ident"
	"warren/internal/layer"
	"warren/internal/metrics"
	"warren/internal/store"
)

// Config tunes the engine. Zero fields take DefaultConfig's values.
type Config struct {
	// Node names the node the engine runs on: the snapshots it takes are
	// its to upload, and a restart resumes only its own.
	Node string
	// Parallel is how many chunks one upload or materialization moves at
	// once.
	Parallel int
	// Attempts is how many times an upload is tried before it is failed;
	// every blob call inside one attempt has its own retries.
	Attempts int
	// RetryBase is the wait before the second attempt; it doubles after.
	RetryBase time.Duration
	// GCGrace protects objects younger than it from the collector, for
	// uploads running on other nodes that share the blob store.
	GCGrace time.Duration
	// GCEvery is how often the engine collects by itself.
	GCEvery time.Duration
	// Metrics, when set, times the uploads and reads their backlog.
	Metrics *metrics.Registry
}

// DefaultConfig is what a node uses unless told otherwise.
func DefaultConfig() Config {
	return Config{Parallel: 8, Attempts: 3, RetryBase: time.Second, GCGrace: time.Hour, GCEvery: time.Hour}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Parallel <= 0 {
		c.Parallel = d.Parallel
	}
	if c.Attempts <= 0 {
		c.Attempts = d.Attempts
	}
	if c.RetryBase <= 0 {
		c.RetryBase = d.RetryBase
	}
	if c.GCGrace <= 0 {
		c.GCGrace = d.GCGrace
	}
	if c.GCEvery <= 0 {
		c.GCEvery = d.GCEvery
	}
	return c
}

// Engine runs a node's snapshots. It is safe for concurrent use.
type Engine struct {
	log   *slog.Logger
	store *store.Store
	pool  *disk.Pool
	blobs blob.Store
	cfg   Config
	dir   string // the cache: <id>.img per snapshot, in the pool's directory

	ctx    context.Context // ends on Close; uploads run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // uploads in flight and the periodic collector

	mu        sync.Mutex
	uploading map[string]*uploadRun     // guarded by mu; uploads in flight
	fetching  map[string]*fetch         // guarded by mu; materializations in flight
	manifests map[string]layer.Manifest // guarded by mu; parsed manifests (immutable)

	gcMu sync.RWMutex // see the package comment
}

// uploadRun is one upload in flight.
type uploadRun struct {
	done  chan struct{} // closed when it ends
	since time.Time     // the snapshot's acknowledgement
}

// fetch is one materialization in flight; waiters read err after done.
type fetch struct {
	done chan struct{}
	err  error
}

// Open makes the engine and resumes the uploads a previous daemon process
// left pending. Snapshots whose disk was never cloned are failed; cache files
// no record owns are removed.
func Open(ctx context.Context, log *slog.Logger, st *store.Store, pool *disk.Pool, blobs blob.Store, cfg Config) (*Engine, error) {
	dir := filepath.Join(pool.Dir(), "snapshots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	ectx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		log: log.With("subsystem", "snapshot"), store: st, pool: pool, blobs: blobs, cfg: cfg.withDefaults(),
		dir: dir, ctx: ectx, cancel: cancel,
		uploading: map[string]*uploadRun{}, fetching: map[string]*fetch{}, manifests: map[string]layer.Manifest{},
	}
	if err := e.resume(ctx); err != nil {
		cancel()
		return nil, err
	}
	e.cfg.Metrics.Gauges([]metrics.Family{
		{Name: "warren_snapshot_uploads", Help: "Snapshots this node is making durable: pending, their upload running or waiting to retry."},
		{Name: "warren_snapshot_upload_oldest_seconds", Help: "How long ago the oldest of this node's pending snapshots was acknowledged (0: none pending)."},
	}, e.backlog)
	e.wg.Add(1)
	go e.collect()
	return e, nil
}

// collect runs the collector every Config.GCEvery until the engine closes.
func (e *Engine) collect() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.GCEvery)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		if _, err := e.GC(e.ctx, e.cfg.GCGrace); err != nil && e.ctx.Err() == nil {
			e.log.Error("snapshot gc", "err", err)
		}
	}
}

// backlog answers the upload families of Open, in their order.
func (e *Engine) backlog() [][]metrics.Sample {
	e.mu.Lock()
	defer e.mu.Unlock()
	var oldest time.Duration
	for _, u := range e.uploading {
		oldest = max(oldest, time.Since(u.since))
	}
	return [][]metrics.Sample{{{Value: float64(len(e.uploading))}}, {{Value: oldest.Seconds()}}}
}

// Close stops the uploads in flight and the collector and waits for them;
// the uploads stay pending and the next Open resumes them.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// BlobStore names the blob store for node info.
func (e *Engine) BlobStore() string { return e.blobs.String() }

// resume restarts pending uploads and clears what an interrupted daemon left
// in the cache.
func (e *Engine) resume(ctx context.Context) error {
	pending, err := e.store.PendingSnapshots(ctx, e.cfg.Node)
	if err != nil {
		return fmt.Errorf("resume snapshots: %w", err)
	}
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return fmt.Errorf("resume snapshots: %w", err)
	}
	for _, ent := range entries {
		name := ent.Name()
		id, ok := strings.CutSuffix(name, ".img")
		if ok {
			if _, err := e.store.GetSnapshot(ctx, id); err == nil {
				continue
			} else if !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("resume snapshots: %w", err)
			}
		}
		e.log.Info("removing leftover cache file", "file", name)
		if err := os.Remove(filepath.Join(e.dir, name)); err != nil {
			return fmt.Errorf("resume snapshots: %w", err)
		}
	}
	for _, sn := range pending {
		if _, err := os.Stat(e.image(sn.ID)); err != nil {
			_, err := e.store.FailSnapshot(ctx, sn.ID, e.cfg.Node, "the node stopped before the disk was cloned", 0)
			if errors.Is(err, store.ErrTransition) || errors.Is(err, store.ErrNotFound) {
				// Deleted or failed meanwhile: nothing is left to resume.
				e.log.Info("pending snapshot changed before it was resumed", "snapshot", sn.ID, "err", err)
			} else if err != nil {
				return fmt.Errorf("resume snapshots: %w", err)
			}
			continue
		}
		e.log.Info("resuming snapshot upload", "snapshot", sn.ID)
		e.startUpload(sn.ID, sn.CreatedAt)
	}
	return nil
}

func (e *Engine) image(id string) string { return filepath.Join(e.dir, id+".img") }

// tempImage is a cache path no record owns, removed by the next Open if the
// daemon dies while it exists.
func (e *Engine) tempImage(id string) string {
	return filepath.Join(e.dir, ident.New(id+".tmp-"))
}

// baseID names the base layer of one build of a template.
func baseID(template string, built time.Time) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", template, built.UnixNano()))
	return "tb-" + hex.EncodeToString(h[:10])
}

// isBase reports whether id is a template base layer.
func isBase(id string) bool { return strings.HasPrefix(id, "tb-") }

// Blob keys of the engine's own, see the package comment; chunks and
// manifests are named by chunkstore.
func intentKey(id string) string  { return "intents/" + id + ".json" }
func deletedKey(id string) string { return "deleted/" + id }

// chunks adapts the blob store to layer.Chunks. A chunk reused by an upload
// older than half the collector's grace is written again, so that a
// collector that saw it unreferenced keeps it until the upload's manifest
// references it.
func (e *Engine) chunks() chunkstore.Store {
	return chunkstore.Store{B: e.blobs, RefreshAfter: e.cfg.GCGrace / 2}
}

// Layer is a snapshot or base layer whose disk the node's cache holds.
type Layer struct {
	ID    string
	Bytes int64 // the disk's size
}

// Held lists the layers whose disks the node's cache holds materialized:
// restoring their lineage here fetches nothing below them.
func (e *Engine) Held() ([]Layer, error) {
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	var out []Layer
	for _, ent := range entries {
		id, ok := strings.CutSuffix(ent.Name(), ".img")
		if !ok || strings.HasPrefix(id, ".") {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Layer{ID: id, Bytes: fi.Size()})
	}
	return out, nil
}
