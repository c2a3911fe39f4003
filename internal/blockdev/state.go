package blockdev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"warren/internal/atomicfile"
	"warren/internal/chunkstore"
	"warren/internal/layer"
)

// The files of a volume's directory.
const (
	cacheFile = "cache.img"  // the disk's blocks held on the node, sparse
	stateFile = "state.json" // what the cache holds, and the layers written
)

// state is what a volume keeps on the node across its process's restarts.
//
// Present lists only cells whose bytes were in the cache file when it was
// last synced: a cell fetched since may be lost with the page cache. A
// volume whose process died while serving (Open still true) trusts none of
// them but the dirty ones, whose bytes are the newest the node has: a clean
// cell written after the last flush would otherwise keep, on this node
// only, bytes no tier has, and the next flush would build on them.
type state struct {
	Version    int     `json:"version"`
	ID         string  `json:"id"`
	Namespace  string  `json:"namespace,omitempty"`
	Base       string  `json:"base,omitempty"`
	Size       int64   `json:"size"`
	Seq        int64   `json:"seq"`
	Full       int64   `json:"full"`
	Replicated int64   `json:"replicated"`
	Open       bool    `json:"open"`
	Present    []byte  `json:"present"`
	Dirty      []int64 `json:"dirty,omitempty"`
	Zeroed     []int64 `json:"zeroed,omitempty"`
	// Pending is the chunks no layer names any more, waiting to be
	// reclaimed, with their stored sizes (reclaim.go).
	Pending map[string]int64 `json:"pending,omitempty"`
}

const stateVersion = 1

// save writes the volume's state: present as the cells synced in the
// cache, dirty as the cells dirty then. The caller holds flushMu.
func (v *Volume) save(present bitset, dirty map[int64]dirtied, open bool) error {
	v.mu.Lock()
	st := state{
		Version: stateVersion, ID: v.cfg.ID, Namespace: v.ns, Base: v.cfg.Base, Size: v.cfg.Size,
		Seq: v.seq, Full: v.full, Replicated: v.replicated, Open: open, Present: present.bytes(),
		Pending: maps.Clone(v.pending),
	}
	v.mu.Unlock()
	for c, d := range dirty {
		st.Dirty = append(st.Dirty, c)
		if d.zero {
			st.Zeroed = append(st.Zeroed, c)
		}
	}
	slices.Sort(st.Dirty)
	slices.Sort(st.Zeroed)
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(v.dir, stateFile), data, 0o600); err != nil {
		return fmt.Errorf("save volume state: %w", err)
	}
	return nil
}

// Open serves again the volume whose local state is in dir, after the
// process that served it stopped or died. It refuses (ErrConflict) a
// volume whose durable tier holds layers this node did not write.
func Open(ctx context.Context, dir string, tiers Tiers, opts Options) (*Volume, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("open volume: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("open volume %s: state: %w", dir, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("open volume %s: state version %d, want %d", dir, st.Version, stateVersion)
	}
	newest, err := newestLayer(ctx, tiers.durable(), st.ID)
	if err != nil {
		return nil, err
	}
	if newest != st.Seq {
		return nil, fmt.Errorf("open volume %s: %w: the durable tier's newest layer is %d, this node wrote %d", st.ID, ErrConflict, newest, st.Seq)
	}
	cfg := Config{ID: st.ID, Base: st.Base, Size: st.Size}
	v, err := load(ctx, dir, cfg, st.Namespace, tiers, opts, st.Seq)
	if err != nil {
		return nil, err
	}
	for name, stored := range st.Pending {
		if v.held[name].refs == 0 {
			v.pending[name] = stored
		}
	}
	v.replicated = st.Replicated
	for s := st.Replicated + 1; s <= st.Seq; s++ {
		v.written[s] = time.Now()
	}
	if present, ok := bitsetOf(st.Present, v.cells); ok && !st.Open {
		v.present = present
	}
	for _, c := range st.Dirty {
		if c < 0 || c >= v.cells {
			v.cache.Close()
			return nil, fmt.Errorf("open volume %s: state: dirty cell %d of %d", st.ID, c, v.cells)
		}
		v.dirty[c] = dirtied{zero: slices.Contains(st.Zeroed, c)}
		v.present.set(c)
	}
	if st.Open {
		v.log.Warn("volume was not closed: refetching its clean cells", "dirty", len(st.Dirty))
	}
	if err := v.save(v.present.clone(), v.dirty, true); err != nil {
		v.cache.Close()
		return nil, err
	}
	v.start()
	return v, nil
}

// Recover serves a volume on a node that has none of it, from its newest
// layer in the tiers: everything flushed before its last node was lost.
// dir must not exist. Nothing is fetched until read.
func Recover(ctx context.Context, dir, id string, tiers Tiers, opts Options) (*Volume, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	seq, err := newestLayer(ctx, tiers.durable(), id)
	if err != nil {
		return nil, err
	}
	if seq < 0 {
		return nil, fmt.Errorf("recover volume %s: no layer in %s", id, tiers.durable().B)
	}
	top, err := manifestOf(ctx, tiers, layerID(id, seq))
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recover volume: %w", err)
	}
	cfg := Config{ID: id, Size: top.DiskSize}
	v, err := load(ctx, dir, cfg, top.Namespace, tiers, opts, seq)
	if err != nil {
		return nil, err
	}
	v.replicated = seq
	if tiers.Cluster != nil {
		if v.replicated, err = newestLayer(ctx, tiers.Object, id); err != nil {
			v.cache.Close()
			return nil, err
		}
		for s := v.replicated + 1; s <= seq; s++ {
			v.written[s] = time.Now()
		}
	}
	if err := v.save(v.present.clone(), nil, true); err != nil {
		v.cache.Close()
		return nil, err
	}
	v.start()
	return v, nil
}

// newestLayer returns the sequence number of the volume's newest layer in
// t, or -1 when it has none.
func newestLayer(ctx context.Context, t chunkstore.Store, id string) (int64, error) {
	seqs, err := layers(ctx, t, id)
	if err != nil || len(seqs) == 0 {
		return -1, err
	}
	return slices.Max(seqs), nil
}

// load makes the volume whose newest layer is seq, its chunks named in ns:
// its base lineage folded, its own cells from its layers down to the base,
// and the chunks of every layer of its in the durable tier. Nothing is
// present.
func load(ctx context.Context, dir string, cfg Config, ns string, tiers Tiers, opts Options, seq int64) (*Volume, error) {
	chain, err := resolve(ctx, tiers, layerID(cfg.ID, seq))
	if err != nil {
		return nil, err
	}
	first := len(chain)
	for first > 0 {
		if _, ok := layerSeq(cfg.ID, chain[first-1].ID); !ok {
			break
		}
		first--
	}
	if first == len(chain) {
		return nil, fmt.Errorf("volume %s: layer %d is not the volume's", cfg.ID, seq)
	}
	if first > 0 {
		cfg.Base = chain[first-1].ID
	}
	v, err := newVolume(dir, cfg, ns, tiers, opts, fold(chain[:first]))
	if err != nil {
		return nil, err
	}
	v.seq = seq
	for _, m := range chain[first:] {
		if m.DiskSize != cfg.Size {
			v.cache.Close()
			return nil, fmt.Errorf("volume %s: layer %s is of %d bytes, the volume %d", cfg.ID, m.ID, m.DiskSize, cfg.Size)
		}
		if err := v.apply(m); err != nil {
			v.cache.Close()
			return nil, err
		}
		n, _ := layerSeq(cfg.ID, m.ID)
		if m.Parent == cfg.Base {
			v.full = n
		}
		v.addLayer(n, refsOf(m))
	}
	// Layers a full one superseded and no prune deleted yet still name
	// their chunks.
	seqs, err := layers(ctx, tiers.durable(), cfg.ID)
	if err != nil {
		v.cache.Close()
		return nil, err
	}
	for _, n := range seqs {
		if n >= v.full {
			continue
		}
		m, err := manifestOf(ctx, tiers, layerID(cfg.ID, n))
		if err != nil {
			v.cache.Close()
			return nil, err
		}
		v.addLayer(n, refsOf(m))
	}
	return v, nil
}

// apply records a layer of the volume's own in its cell map; a full layer
// (over the base) replaces the map.
func (v *Volume) apply(m layer.Manifest) error {
	if m.Parent == v.cfg.Base {
		clear(v.own)
		v.ownSize = 0
	}
	for _, e := range m.Extents {
		c := e.Offset / CellSize
		if off, n := v.cellRange(c); e.Offset != off || e.Length != n {
			return fmt.Errorf("volume %s: layer %s: extent at %d of %d bytes is not a cell", v.cfg.ID, m.ID, e.Offset, e.Length)
		}
		v.setOwn(c, chunkRef{chunk: e.Chunk, stored: e.Stored})
	}
	return nil
}

// errClosed means the volume was closed.
var errClosed = errors.New("volume closed")
