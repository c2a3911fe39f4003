package blockdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"warren/internal/chunkstore"
	"warren/internal/layer"
)

// CellSize is the unit in which a volume tracks and writes back its disk:
// each cell is, at any time, its base lineage's bytes, zeros, or exactly one
// chunk of the volume's own, so that any set of cells can be listed in a
// manifest without reading the rest. A small write costs one cell's upload;
// a read fault fetches at least one cell.
const CellSize = 64 << 10

// Tiers are where a volume's chunks and layers live beyond the node.
type Tiers struct {
	// Cluster is the in-cluster tier: every layer is written here first,
	// and a Flush returns once its layer is. Nil when there is none: the
	// object tier then plays both roles.
	Cluster *chunkstore.Store
	// Object is object storage, the tier of record. Layers reach it from
	// the cluster tier in the background, within Options.MaxLag.
	Object chunkstore.Store
}

// durable is the tier a flush writes to.
func (t Tiers) durable() chunkstore.Store {
	if t.Cluster != nil {
		return *t.Cluster
	}
	return t.Object
}

// order lists the tiers nearest first.
func (t Tiers) order() []chunkstore.Store {
	if t.Cluster != nil {
		return []chunkstore.Store{*t.Cluster, t.Object}
	}
	return []chunkstore.Store{t.Object}
}

// Options tune a volume; the zero value is the defaults.
type Options struct {
	Log *slog.Logger
	// Parallel bounds the chunks a flush uploads and a fault fetches at
	// once (default 4).
	Parallel int
	// WritebackEvery is how often the volume writes back on its own what
	// the guest wrote and did not flush (default 5 s; negative: never).
	WritebackEvery time.Duration
	// MaxLag bounds how far object storage may be behind the cluster tier:
	// a flush that would leave it further behind waits (default 30 s).
	MaxLag time.Duration
	// CompactEvery is how many layers the volume writes between two full
	// ones (default 64). A full layer lists every cell of the volume's
	// own over the base, so that recovery reads a short chain; the layers
	// it supersedes are deleted once it reached object storage, and their
	// chunks that nothing else names with them (see reclaim.go). A volume
	// also compacts as soon as its layers hold as many bytes of chunks no
	// longer its disk's as of its disk's: so they hold at most about twice
	// what its disk uses.
	CompactEvery int
	// DurableLimit bounds the bytes of chunks a volume holds in the
	// durable tier (its layers' and those waiting to be reclaimed), as a
	// multiple of its disk's size (default 3). A flush that could take it
	// past the bound is refused with ErrFull. Reclaimed bytes let the next
	// flush through.
	DurableLimit float64
	// Reserve is the free space kept on the file system of the volume's
	// cache (default 512 MiB; negative: none). A write or fault that would
	// take it lower fails with ENOSPC.
	Reserve int64
	// ReclaimBatch bounds the chunks one reclaim pass deletes (default
	// 1024: 64 MiB of cells).
	ReclaimBatch int
}

func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.WritebackEvery == 0 {
		o.WritebackEvery = 5 * time.Second
	}
	if o.MaxLag <= 0 {
		o.MaxLag = 30 * time.Second
	}
	if o.CompactEvery <= 0 {
		o.CompactEvery = 64
	}
	if o.DurableLimit <= 0 {
		o.DurableLimit = 3
	}
	if o.Reserve == 0 {
		o.Reserve = 512 << 20
	}
	if o.ReclaimBatch <= 0 {
		o.ReclaimBatch = 1024
	}
	return o
}

// Config names a new volume.
type Config struct {
	// ID names the volume's layers, "v-<ID>-<seq>": lowercase letters,
	// digits and '-', at most 100 bytes. It must be unique in the tiers.
	ID string
	// Base is the layer the disk starts as (a snapshot or template base
	// layer in the tiers), or empty for a disk of zeros.
	Base string
	// Size is the disk's size; 0 takes the base's. It may exceed the
	// base's (the rest reads as zeros) but not be less.
	Size int64
}

// ErrConflict means the tiers hold layers of the volume that this node did
// not write: another node serves, or served, the volume since.
var ErrConflict = errors.New("the volume was written elsewhere")

// Volume is one always-on disk: a Device whose blocks live in a sparse
// cache file on the node and in the tiers. See the package comment.
//
// Lock order: flushMu, then mu. No I/O is done under mu.
type Volume struct {
	cfg   Config
	ns    string // what the volume's chunks are named in (volumeNamespace)
	dir   string
	cache *os.File
	tiers Tiers
	opts  Options
	log   *slog.Logger
	base  baseMap // the base lineage folded; never changes
	cells int64

	flushMu sync.Mutex // one flush at a time

	mu         sync.Mutex // guards the fields below
	present    bitset
	own        map[int64]chunkRef // cell → its chunk in the tiers; absent: the base's
	dirty      map[int64]dirtied  // cells written since their last flush
	faults     map[int64]chan struct{}
	gen        uint64              // counts writes, to tell a cell rewritten during a flush
	seq        int64               // the newest layer in the durable tier
	full       int64               // the newest full layer
	replicated int64               // the newest layer in object storage
	written    map[int64]time.Time // when each layer not yet replicated was written
	closed     bool
	// What the volume holds in the tiers (reclaim.go): the chunks its
	// layers there name, each layer's, the bytes of its disk's own cells,
	// the chunks waiting to be reclaimed and those being deleted or put.
	held     map[string]chunkUse
	layered  map[int64][]chunkRef
	heldSize int64
	ownSize  int64
	pending  map[string]int64
	dying    map[string]chan struct{}
	putting  map[string]bool
	refused  error // why the last flush was refused; nil once one is not

	free func(dir string) (int64, error) // the free space of dir's file system

	// Read-ahead of sequential reads: where the last read ended, the
	// window (cells) the next sequential read fetches beyond itself, the
	// newest range of cells it wants and not yet taken by the fetcher
	// (raWant), and whether the fetcher runs.
	raNext   int64
	raWindow int64
	raWant   *[2]int64
	raBusy   bool

	wake    chan struct{} // nudges the replicator
	reclaim chan struct{} // nudges the reclaimer
	stop    context.CancelFunc
	ctx     context.Context
	loops   sync.WaitGroup
	// aheads are the read-ahead fetches; none starts once closed is set.
	aheads sync.WaitGroup
	lagged chan struct{} // closed and replaced whenever replication moves
	moved  chan struct{} // closed and replaced whenever replication or reclaiming moves
}

// dirtied is a cell written since its last flush.
type dirtied struct {
	gen  uint64 // the write that last set it
	zero bool   // the whole cell was discarded or zeroed since
}

func layerID(id string, seq int64) string { return fmt.Sprintf("v-%s-%012d", id, seq) }

// layerSeq returns the sequence number of layer name when it is one of
// volume id's (not of a volume whose ID extends id's).
func layerSeq(id, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "v-"+id+"-")
	if !ok || len(name) != len(layerID(id, 0)) {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil
}

// layers lists the sequence numbers of volume id's layers in t, in order.
func layers(ctx context.Context, t chunkstore.Store, id string) ([]int64, error) {
	names, err := t.Manifests(ctx, "v-"+id+"-")
	if err != nil {
		return nil, fmt.Errorf("volume %s: list layers: %w", id, err)
	}
	var seqs []int64
	for _, name := range names {
		if n, ok := layerSeq(id, name); ok {
			seqs = append(seqs, n)
		}
	}
	return seqs, nil
}

// cellRange returns cell c's offset and length (the last cell may be
// short).
func (v *Volume) cellRange(c int64) (int64, int64) {
	off := c * CellSize
	return off, min(CellSize, v.cfg.Size-off)
}

// ValidID checks a volume ID: it names the volume's layers and its
// directory on the node.
func ValidID(id string) error {
	if id == "" || len(id) > 100 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return fmt.Errorf("volume id %q: want 1-100 of a-z, 0-9 and '-'", id)
	}
	return nil
}

// Create makes a new volume whose disk starts as cfg.Base, with its local
// state in dir (which must not exist), and writes its first layer (empty,
// over the base) to every tier, object storage first.
func Create(ctx context.Context, dir string, cfg Config, tiers Tiers, opts Options) (*Volume, error) {
	if err := ValidID(cfg.ID); err != nil {
		return nil, err
	}
	lineage, err := resolve(ctx, tiers, cfg.Base)
	if err != nil {
		return nil, err
	}
	if n := len(lineage); n > 0 {
		top := lineage[n-1].DiskSize
		if cfg.Size == 0 {
			cfg.Size = top
		} else if cfg.Size < top {
			return nil, fmt.Errorf("volume of %d bytes is smaller than its base's %d", cfg.Size, top)
		}
	}
	if cfg.Size <= 0 || cfg.Size%BlockSize != 0 || cfg.Size > layer.MaxDiskSize {
		return nil, fmt.Errorf("volume size %d: want a positive multiple of %d up to %d", cfg.Size, BlockSize, int64(layer.MaxDiskSize))
	}
	if newest, err := newestLayer(ctx, tiers.durable(), cfg.ID); err != nil {
		return nil, err
	} else if newest >= 0 {
		return nil, fmt.Errorf("create volume %s: %w: it has layers already", cfg.ID, ErrConflict)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create volume: %w", err)
	}
	v, err := newVolume(dir, cfg, volumeNamespace(cfg.ID), tiers, opts, fold(lineage))
	if err == nil {
		// The first layer goes to object storage first, even with a
		// cluster tier: from the moment the volume exists, a manifest there
		// names its base as parent, which keeps the base (the snapshot it
		// is restored from) from the snapshot engine's collector.
		for _, t := range slices.Backward(tiers.order()) {
			if err = t.PutManifest(ctx, v.manifest(0, cfg.Base, nil)); err != nil {
				err = fmt.Errorf("create volume: first layer: %w", err)
				break
			}
		}
		if err == nil {
			v.addLayer(0, nil)
			v.replicated = 0
			err = v.save(v.present.clone(), nil, true)
		}
		if err != nil {
			v.cache.Close()
		}
	}
	if err != nil {
		// Nothing of it is left on the node to be opened half-made.
		os.RemoveAll(dir)
		return nil, err
	}
	v.start()
	return v, nil
}

// newVolume sets up a volume's memory and cache file, empty: nothing
// present, nothing its own, no layer written.
func newVolume(dir string, cfg Config, ns string, tiers Tiers, opts Options, base baseMap) (*Volume, error) {
	cache, err := os.OpenFile(filepath.Join(dir, cacheFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("volume cache: %w", err)
	}
	if err := cache.Truncate(cfg.Size); err != nil {
		cache.Close()
		return nil, fmt.Errorf("volume cache: %w", err)
	}
	opts = opts.withDefaults()
	cells := (cfg.Size + CellSize - 1) / CellSize
	return &Volume{
		cfg: cfg, ns: ns, dir: dir, cache: cache, tiers: tiers, opts: opts, base: base, cells: cells,
		log:     opts.Log.With("volume", cfg.ID),
		present: newBitset(cells), own: map[int64]chunkRef{}, dirty: map[int64]dirtied{},
		faults: map[int64]chan struct{}{}, written: map[int64]time.Time{},
		held: map[string]chunkUse{}, layered: map[int64][]chunkRef{}, pending: map[string]int64{},
		dying: map[string]chan struct{}{}, putting: map[string]bool{}, free: freeSpace,
		replicated: -1, wake: make(chan struct{}, 1), reclaim: make(chan struct{}, 1), lagged: make(chan struct{}),
		moved: make(chan struct{}),
	}, nil
}

// resolve fetches the lineage of layer id, root first.
func resolve(ctx context.Context, tiers Tiers, id string) ([]layer.Manifest, error) {
	var chain []layer.Manifest
	for ; id != ""; id = chain[len(chain)-1].Parent {
		if len(chain) == maxChain {
			return nil, fmt.Errorf("lineage of %s: over %d layers", id, maxChain)
		}
		m, err := manifestOf(ctx, tiers, id)
		if err != nil {
			return nil, err
		}
		chain = append(chain, m)
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// maxChain bounds a lineage.
const maxChain = 10000

// manifestOf reads layer id's manifest from the nearest tier holding it.
func manifestOf(ctx context.Context, tiers Tiers, id string) (layer.Manifest, error) {
	var err error
	for _, t := range tiers.order() {
		var m layer.Manifest
		if m, err = t.Manifest(ctx, id); err == nil {
			return m, nil
		}
	}
	return layer.Manifest{}, fmt.Errorf("layer %s: %w", id, err)
}

// manifest makes layer seq over parent, listing cells (sorted) with their
// chunks.
func (v *Volume) manifest(seq int64, parent string, cells []ownCell) layer.Manifest {
	m := layer.Manifest{
		Version: layer.Version(v.ns), ID: layerID(v.cfg.ID, seq), Namespace: v.ns,
		Parent: parent, DiskSize: v.cfg.Size, Extents: []layer.Extent{},
	}
	for _, c := range cells {
		off, n := v.cellRange(c.cell)
		m.Extents = append(m.Extents, layer.Extent{Offset: off, Length: n, Chunk: c.chunk, Stored: c.stored, Zero: c.chunk == ""})
	}
	return m
}

// chunkRef is a chunk of the volume's own: its name, "" for zeros, and its
// stored size.
type chunkRef struct {
	chunk  string
	stored int64
}

// ownCell is a cell of the volume's own in a layer.
type ownCell struct {
	cell int64
	chunkRef
}

func (v *Volume) Size() int64 { return v.cfg.Size }

// Layer is the ID of the newest layer in the durable tier: everything the
// guest flushed is in it or below it.
func (v *Volume) Layer() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return layerID(v.cfg.ID, v.seq)
}

// Status is a volume's write-back state.
type Status struct {
	Layer      string // the newest layer in the durable tier
	Replicated string // the newest layer in object storage; "" before the first
	// RecoveryPoint is the time up to which object storage holds every
	// flushed write: zero when it holds them all.
	RecoveryPoint time.Time
	Dirty         int // cells written and not yet flushed
	Present       int // cells held in the node's cache
	// Durable is the bytes of chunks the volume holds in the durable tier:
	// its layers' and those waiting to be reclaimed. Limit is its bound,
	// and Used what the disk's own cells take of it, stored.
	Durable, Limit, Used int64
	// Refused says why the last flush was refused ("" when it was not).
	Refused string
}

// Status reports the volume's write-back state.
func (v *Volume) Status() Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := Status{
		Layer: layerID(v.cfg.ID, v.seq), Dirty: len(v.dirty), Present: v.present.count(),
		Durable: v.heldSize + sum(v.pending), Limit: v.limit(), Used: v.ownSize,
	}
	if v.refused != nil {
		st.Refused = v.refused.Error()
	}
	if v.replicated >= 0 {
		st.Replicated = layerID(v.cfg.ID, v.replicated)
	}
	if v.replicated < v.seq {
		st.RecoveryPoint = v.written[v.replicated+1]
	}
	return st
}

// Close writes back what is dirty, waits for object storage to hold every
// layer, stops the volume's work and closes its cache. The volume can be
// opened again from its directory.
func (v *Volume) Close(ctx context.Context) error {
	err := v.flush(ctx)
	if err == nil {
		err = v.waitReplicated(ctx, func() bool { return v.replicated >= v.seq })
	}
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.stop()
	v.loops.Wait()
	v.aheads.Wait()
	if err == nil {
		v.flushMu.Lock()
		v.mu.Lock()
		present := v.present.clone()
		v.mu.Unlock()
		err = v.save(present, nil, false)
		v.flushMu.Unlock()
	}
	return errors.Join(err, v.cache.Close())
}

// Abandon stops the volume's work and closes its cache without writing
// anything back: the volume is being deleted, or is taken over elsewhere.
func (v *Volume) Abandon() {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.stop()
	v.loops.Wait()
	v.aheads.Wait()
	v.cache.Close()
}
