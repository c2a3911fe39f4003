package blockdev

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"warren/internal/backoff"
	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/layer"
)

// Reclaiming what a volume's rewrites supersede.
//
// A compaction deletes the layers a full layer supersedes; the chunks that
// only they named are then garbage, and the volume deletes them itself, a
// bounded batch per pass, without waiting for the snapshot engine's
// collector. That is safe, on one node or in a fleet, on any blob store,
// because of these invariants:
//
//  1. A volume names its chunks in a namespace of its own,
//     volumeNamespace(ID), which no tenant's name can be (a tenant's starts
//     with a letter or digit). So the only writer that puts chunks in it is
//     the volume (its flushes, and its replicator copying them from the
//     cluster tier to object storage), and the only manifests that name
//     them are the volume's: its layers and the snapshots taken of it.
//     Every other manifest reaches them through Parent, which keeps the
//     snapshot's manifest, and so its chunks, alive.
//  2. One process serves a volume at a time: the lease fences a lost node's
//     block server before another node recovers the volume
//     (docs/ALWAYS-ON.md). Within it, flushes and snapshots run one at a
//     time (flushMu).
//  3. held counts, for each chunk, the extents of the volume's layers in
//     the tiers that name it. A flush adds its layer before storing the
//     layer's manifest; a prune removes layers only once their manifests
//     are gone from every tier. A chunk no layer names any more goes to
//     pending (persisted in the volume's state).
//  4. A flush's Put of a chunk marks it putting, or, while the chunk is
//     being deleted (dying), waits for the delete to finish first, so that
//     it finds the chunk missing and stores it again: a flush never dedups
//     against a chunk about to vanish. The reclaimer claims a chunk as
//     dying only, under mu, when it is pending, neither held nor putting,
//     and no manifest of the volume's namespace but the volume's live
//     layers names it (a snapshot's makes it the snapshot's: it leaves
//     pending, for the engine's collector once that snapshot is gone).
//
// A snapshot names only chunks of the volume's current cells, which its
// live layers hold, so it never names a pending one.
//
// What this does not reclaim: the chunks of a volume deleted as a whole,
// and those pending on a node lost before it deleted them; the snapshot
// engine's collector takes them from object storage (docs/ALWAYS-ON.md).
// A volume made before volumes had namespaces of their own names its
// chunks in its tenant's, shared with the tenant's snapshots: it reclaims
// nothing itself.

// volumeNamespace is the namespace volume id names its chunks in.
func volumeNamespace(id string) string { return "_vol-" + id }

// exclusive says whether the volume's chunks are named in a namespace of
// its own, and so are its to reclaim.
func (v *Volume) exclusive() bool { return v.ns == volumeNamespace(v.cfg.ID) }

// ErrFull means a flush was refused: it could take the bytes the volume
// holds in the durable tier past Options.DurableLimit. It is an ENOSPC, as
// the guest sees it.
var ErrFull = fmt.Errorf("volume past its durable bound: %w", syscall.ENOSPC)

// chunkUse is a chunk the volume's layers name: by how many extents, and
// its stored size.
type chunkUse struct {
	refs   int
	stored int64
}

// limit is the most bytes of chunks the volume may hold in the durable
// tier.
func (v *Volume) limit() int64 { return int64(v.opts.DurableLimit * float64(v.cfg.Size)) }

// setOwn records cell c's chunk. The caller holds mu.
func (v *Volume) setOwn(c int64, ref chunkRef) {
	if old, ok := v.own[c]; ok {
		v.ownSize -= old.stored
	}
	v.own[c] = ref
	v.ownSize += ref.stored
}

// addLayer records that layer seq, about to be stored, names refs. A layer
// written again (its first store's answer was lost) keeps both lists: the
// first may be the one stored. The caller holds mu.
func (v *Volume) addLayer(seq int64, refs []chunkRef) {
	for _, r := range refs {
		if r.chunk == "" {
			continue
		}
		u := v.held[r.chunk]
		if u.refs == 0 {
			u.stored = r.stored
			v.heldSize += r.stored
			delete(v.pending, r.chunk)
		}
		u.refs++
		v.held[r.chunk] = u
		v.layered[seq] = append(v.layered[seq], r)
	}
	if _, ok := v.layered[seq]; !ok {
		v.layered[seq] = nil
	}
}

// dropLayers forgets the layers before seq, whose manifests are gone from
// every tier: the chunks no layer left names wait to be reclaimed. The
// caller holds mu.
func (v *Volume) dropLayers(seq int64) {
	for s, refs := range v.layered {
		if s >= seq {
			continue
		}
		for _, r := range refs {
			u := v.held[r.chunk]
			if u.refs--; u.refs > 0 {
				v.held[r.chunk] = u
				continue
			}
			delete(v.held, r.chunk)
			v.heldSize -= u.stored
			if v.exclusive() {
				v.pending[r.chunk] = u.stored
			}
		}
		delete(v.layered, s)
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, x := range m {
		n += x
	}
	return n
}

// maxCellStored is the most a cell's chunk may take stored.
const maxCellStored = CellSize + CellSize>>8 + 64

// admit decides a flush of cells non-zero cells: whether it writes a full
// layer, or must wait. The bound holds at every moment: the chunks the
// volume's layers name, those pending and those the flush may add stay
// within it. A flush compacts when the layers hold as many bytes of chunks
// no longer the disk's as of the disk's; when the flush would pass the
// bound and compacting alone would free something, it compacts first
// (compact: a full layer of what is flushed already, adding nothing);
// otherwise it waits for reclaiming, or for object storage to take the
// last full layer so that a prune can go (err). The caller holds mu.
func (v *Volume) admit(seq int64, cells int) (full, compact bool, err error) {
	grow, pend, limit := int64(cells)*maxCellStored, sum(v.pending), v.limit()
	garbage := v.heldSize - v.ownSize
	if v.heldSize+pend+grow > limit {
		if garbage > 0 && v.full < v.seq {
			return false, true, nil
		}
		return false, false, fmt.Errorf("%w: it holds %d bytes in the durable tier (%d to reclaim), the flush adds up to %d, the bound is %d",
			ErrFull, v.heldSize+pend, pend, grow, limit)
	}
	v.refused = nil
	full = seq-v.full >= int64(v.opts.CompactEvery) || garbage > 0 && garbage >= v.ownSize
	return full, false, nil
}

// move wakes whoever waits for the volume's durable bytes to change. The
// caller holds mu.
func (v *Volume) move() {
	close(v.moved)
	v.moved = make(chan struct{})
}

// guarded is the durable tier as a flush writes to it (invariant 4).
type guarded struct {
	chunkstore.Store
	v *Volume
}

func (g guarded) Put(ctx context.Context, name string, compressed []byte) (bool, error) {
	v := g.v
	for {
		v.mu.Lock()
		dying, ok := v.dying[name]
		if !ok {
			v.putting[name] = true
			v.mu.Unlock()
			break
		}
		v.mu.Unlock()
		select {
		case <-dying:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return g.Store.Put(ctx, name, compressed)
}

// nudgeReclaim wakes the reclaimer.
func (v *Volume) nudgeReclaim() {
	select {
	case v.reclaim <- struct{}{}:
	default:
	}
}

// reclaimer deletes pending chunks whenever a prune adds some, a batch per
// pass, until none is left or the volume closes.
func (v *Volume) reclaimer() {
	retry := backoff.Backoff{Base: time.Second, Max: time.Minute}
	seen := map[string][]string{}
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-v.reclaim:
		}
		for {
			more, err := v.reclaimPass(v.ctx, seen)
			if err != nil {
				if v.ctx.Err() != nil {
					return
				}
				v.log.Warn("reclaim chunks", "err", err)
				if !retry.Wait(v.ctx.Done()) {
					return
				}
				continue
			}
			retry.Reset()
			if !more {
				break
			}
		}
	}
}

// reclaimPass deletes up to a batch of pending chunks from every tier and
// says whether more are pending. seen caches the chunks of this volume's
// namespace that manifests other than its layers name, by manifest: it is
// the reclaimer's own.
func (v *Volume) reclaimPass(ctx context.Context, seen map[string][]string) (bool, error) {
	v.mu.Lock()
	var names []string
	for name := range v.pending {
		if len(names) == v.opts.ReclaimBatch {
			break
		}
		names = append(names, name)
	}
	more := len(v.pending) > len(names)
	v.mu.Unlock()
	if len(names) == 0 {
		return false, nil
	}
	named, err := v.namedElsewhere(ctx, seen)
	if err != nil {
		return more, err
	}
	v.mu.Lock()
	dying := make(chan struct{})
	var doomed []string
	for _, name := range names {
		if _, ok := v.pending[name]; !ok || v.held[name].refs > 0 || v.putting[name] {
			continue
		}
		switch named[name] {
		case namedBySnapshot:
			delete(v.pending, name)
			v.move()
			continue
		case namedByOldLayer:
			continue // its layer's prune will free it
		}
		v.dying[name] = dying
		doomed = append(doomed, name)
	}
	v.mu.Unlock()
	gone := make([]bool, len(doomed))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(v.opts.Parallel)
	for i, name := range doomed {
		g.Go(func() error {
			for _, t := range v.tiers.order() {
				if err := t.B.Delete(gctx, chunkstore.ChunkKey(name)); err != nil {
					return fmt.Errorf("delete chunk %s: %w", name, err)
				}
			}
			gone[i] = true
			return nil
		})
	}
	err = g.Wait()
	v.mu.Lock()
	for i, name := range doomed {
		delete(v.dying, name)
		if gone[i] {
			delete(v.pending, name)
		}
	}
	v.move()
	v.mu.Unlock()
	close(dying)
	return more, err
}

// How a pending chunk is named outside the volume's live layers.
const (
	namedBySnapshot = 1 + iota
	namedByOldLayer
)

// namedElsewhere lists the manifests in every tier and returns the chunks
// of the volume's namespace that those other than its live layers name:
// snapshots of it, and layers of its own that a prune has yet to delete.
// Manifests other than the volume's layers never change once stored, so
// seen keeps what each named (nothing, unless it is in the volume's
// namespace); a manifest gone is forgotten.
func (v *Volume) namedElsewhere(ctx context.Context, seen map[string][]string) (map[string]int, error) {
	named := map[string]int{}
	listed := map[string]bool{}
	for _, t := range v.tiers.order() {
		ids, err := t.Manifests(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("volume %s: list manifests: %w", v.cfg.ID, err)
		}
		for _, id := range ids {
			seq, mine := layerSeq(v.cfg.ID, id)
			if mine {
				v.mu.Lock()
				_, live := v.layered[seq]
				v.mu.Unlock()
				if live {
					continue
				}
			}
			listed[id] = true
			chunks, ok := seen[id]
			if !ok || mine {
				m, err := t.Manifest(ctx, id)
				if errors.Is(err, blob.ErrNotFound) {
					continue // deleted meanwhile
				}
				if err != nil {
					// Never reclaim what an unreadable manifest may name.
					return nil, fmt.Errorf("volume %s: %w", v.cfg.ID, err)
				}
				chunks = nil
				if m.Namespace == v.ns {
					chunks = m.Chunks()
				}
				if !mine {
					seen[id] = chunks
				}
			}
			kind := namedBySnapshot
			if mine {
				kind = namedByOldLayer
			}
			for _, c := range chunks {
				if named[c] != namedBySnapshot {
					named[c] = kind
				}
			}
		}
	}
	for id := range seen {
		if !listed[id] {
			delete(seen, id)
		}
	}
	return named, nil
}

// refsOf lists the chunks of a layer's extents.
func refsOf(m layer.Manifest) []chunkRef {
	refs := make([]chunkRef, 0, len(m.Extents))
	for _, e := range m.Extents {
		refs = append(refs, chunkRef{chunk: e.Chunk, stored: e.Stored})
	}
	return refs
}

// room fails with ENOSPC when the file system of the volume's cache has
// less free space than Options.Reserve: what the guest writes, and what
// faults fetch, land there.
func (v *Volume) room() error {
	if v.opts.Reserve < 0 {
		return nil
	}
	free, err := v.free(v.dir)
	if err != nil {
		return fmt.Errorf("volume %s: free space: %w", v.cfg.ID, err)
	}
	if free < v.opts.Reserve {
		return fmt.Errorf("volume %s: %w: %d bytes free on the node's disk, %d kept in reserve", v.cfg.ID, syscall.ENOSPC, free, v.opts.Reserve)
	}
	return nil
}
