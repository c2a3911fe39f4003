package blockdev

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"warren/internal/backoff"
	"warren/internal/chunkstore"
	"warren/internal/layer"
)

// Flush makes every write that returned before it durable: its cells are
// written as a layer to the durable tier (the cluster's, else object
// storage), and Flush returns once the layer's manifest is there. If object
// storage is more than MaxLag behind, Flush also waits for it to catch up.
func (v *Volume) Flush() error { return v.flush(v.ctx) }

func (v *Volume) flush(ctx context.Context) error {
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	var (
		taken   map[int64]dirtied
		present bitset
		seq     int64
		full    bool
	)
	// A flush over the volume's durable bound waits, up to fullWait, for
	// reclaiming (or replication, which lets a prune go) to make room,
	// compacting first if that frees anything.
	deadline := time.Now().Add(fullWait)
	for {
		v.mu.Lock()
		if v.closed {
			v.mu.Unlock()
			return errClosed
		}
		if len(v.dirty) == 0 {
			// Nothing to flush: an idle volume compacts once its layers
			// hold half as many bytes of chunks no longer its disk's as of
			// its disk's, so that at rest it holds at most 1.5 times what
			// its disk uses (a busy one compacts at twice).
			garbage := v.heldSize - v.ownSize
			idle := v.full < v.seq && garbage > 0 && 2*garbage >= v.ownSize
			seq, present := v.seq+1, v.present.clone()
			v.mu.Unlock()
			if !idle {
				return nil
			}
			if err := v.compact(ctx, seq, present); err != nil {
				return err
			}
			continue
		}
		taken = maps.Clone(v.dirty)
		present = v.present.clone()
		seq = v.seq + 1
		data := 0
		for _, d := range taken {
			if !d.zero {
				data++
			}
		}
		var compact bool
		var err error
		full, compact, err = v.admit(seq, data)
		moved := v.moved
		if err != nil && time.Now().After(deadline) {
			v.refused = err
		}
		v.mu.Unlock()
		if err == nil && !compact {
			break
		}
		if compact {
			if err := v.compact(ctx, seq, present); err != nil {
				return err
			}
			continue
		}
		v.nudgeReclaim()
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %s: flush: %w", v.cfg.ID, err)
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-moved:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("volume %s: flush: %w", v.cfg.ID, ctx.Err())
		}
		t.Stop()
	}
	// Whatever happens, the flush's puts are over when it returns: the
	// chunks it named are held by then, or named by no layer.
	defer func() {
		v.mu.Lock()
		clear(v.putting)
		v.mu.Unlock()
	}()

	// What the cells hold now is synced before the state says they are
	// present (see state).
	if err := v.cache.Sync(); err != nil {
		return fmt.Errorf("volume %s: sync cache: %w", v.cfg.ID, err)
	}
	cells := slices.Sorted(maps.Keys(taken))
	ranges := make([]layer.Range, len(cells))
	for i, c := range cells {
		off, n := v.cellRange(c)
		ranges[i] = layer.Range{Off: off, Len: n, Zero: taken[c].zero}
	}
	durable := v.tiers.durable()
	extents, _, err := layer.Write(ctx, filepath.Join(v.dir, cacheFile), ranges, v.ns, guarded{durable, v}, v.opts.Parallel)
	if err != nil {
		return fmt.Errorf("volume %s: %w", v.cfg.ID, err)
	}
	// A cell is one extent: ranges are cells, and a cell is under MaxChunk.
	written := make([]ownCell, len(extents))
	for i, e := range extents {
		written[i] = ownCell{cell: e.Offset / CellSize, chunkRef: chunkRef{chunk: e.Chunk, stored: e.Stored}}
	}
	v.mu.Lock()
	// The cells are dirty until the layer is stored, so no fault reads
	// their entries: they may change before it is.
	for _, w := range written {
		v.setOwn(w.cell, w.chunkRef)
	}
	var m layer.Manifest
	if full {
		all := make([]ownCell, 0, len(v.own))
		for _, c := range slices.Sorted(maps.Keys(v.own)) {
			all = append(all, ownCell{cell: c, chunkRef: v.own[c]})
		}
		m = v.manifest(seq, v.cfg.Base, all)
	} else {
		m = v.manifest(seq, layerID(v.cfg.ID, seq-1), written)
	}
	v.addLayer(seq, refsOf(m))
	v.mu.Unlock()
	if err := durable.PutManifest(ctx, m); err != nil {
		return fmt.Errorf("volume %s: store layer %d: %w", v.cfg.ID, seq, err)
	}

	v.mu.Lock()
	v.seq = seq
	if full {
		v.full = seq
	}
	v.written[seq] = time.Now()
	still := map[int64]dirtied{}
	for c, d := range taken {
		if cur, ok := v.dirty[c]; ok && cur.gen == d.gen {
			delete(v.dirty, c)
		} else if ok {
			still[c] = cur
		}
	}
	if v.tiers.Cluster == nil {
		v.replicatedTo(seq)
	}
	v.mu.Unlock()
	if err := v.save(present, still, true); err != nil {
		return err
	}
	if v.tiers.Cluster == nil {
		if full {
			v.prune(ctx, seq, durable)
		}
		return nil
	}
	select {
	case v.wake <- struct{}{}:
	default:
	}
	return v.waitReplicated(ctx, func() bool {
		return v.replicated >= v.seq || time.Since(v.written[v.replicated+1]) <= v.opts.MaxLag
	})
}

// fullWait is how long a flush over the volume's durable bound waits for
// room before it is refused.
const fullWait = 10 * time.Second

// compact writes layer seq as a full layer of the volume's cells as they
// were last flushed, adding nothing: the layers it supersedes go, and the
// chunks only they named with them. The caller holds flushMu.
func (v *Volume) compact(ctx context.Context, seq int64, present bitset) error {
	v.mu.Lock()
	all := make([]ownCell, 0, len(v.own))
	for _, c := range slices.Sorted(maps.Keys(v.own)) {
		all = append(all, ownCell{cell: c, chunkRef: v.own[c]})
	}
	m := v.manifest(seq, v.cfg.Base, all)
	v.addLayer(seq, refsOf(m))
	v.mu.Unlock()
	durable := v.tiers.durable()
	if err := durable.PutManifest(ctx, m); err != nil {
		return fmt.Errorf("volume %s: store layer %d: %w", v.cfg.ID, seq, err)
	}
	v.mu.Lock()
	v.seq, v.full = seq, seq
	v.written[seq] = time.Now()
	if v.tiers.Cluster == nil {
		v.replicatedTo(seq)
	}
	dirty := maps.Clone(v.dirty)
	v.mu.Unlock()
	if err := v.save(present, dirty, true); err != nil {
		return err
	}
	if v.tiers.Cluster == nil {
		v.prune(ctx, seq, durable)
	} else {
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// replicatedTo records that object storage holds layer seq and every one
// before it. The caller holds mu.
func (v *Volume) replicatedTo(seq int64) {
	for s := v.replicated + 1; s <= seq; s++ {
		delete(v.written, s)
	}
	v.replicated = seq
	close(v.lagged)
	v.lagged = make(chan struct{})
	v.move()
}

// waitReplicated waits until cond, which is called under mu, holds.
func (v *Volume) waitReplicated(ctx context.Context, cond func() bool) error {
	for {
		v.mu.Lock()
		ok, moved := cond(), v.lagged
		v.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("volume %s: wait for object storage: %w", v.cfg.ID, ctx.Err())
		}
	}
}

// prune deletes from the tiers the layers a full layer seq supersedes, and
// has the reclaimer delete the chunks only they named. A failure leaves
// them for the next full layer.
func (v *Volume) prune(ctx context.Context, seq int64, tiers ...chunkstore.Store) {
	for _, t := range tiers {
		if err := deleteLayers(ctx, t, v.cfg.ID, seq); err != nil {
			v.log.Warn("prune layers", "err", err)
			return
		}
	}
	v.mu.Lock()
	v.dropLayers(seq)
	v.mu.Unlock()
	v.nudgeReclaim()
}

// DeleteLayers deletes every layer of volume id from t: the volume is gone.
// Snapshots taken of it are layers of their own, and stay.
func DeleteLayers(ctx context.Context, t chunkstore.Store, id string) error {
	return deleteLayers(ctx, t, id, math.MaxInt64)
}

// deleteLayers deletes volume id's layers before seq from t.
func deleteLayers(ctx context.Context, t chunkstore.Store, id string, seq int64) error {
	seqs, err := layers(ctx, t, id)
	if err != nil {
		return err
	}
	for _, n := range seqs {
		if n >= seq {
			continue
		}
		if err := t.DeleteManifest(ctx, layerID(id, n)); err != nil {
			return fmt.Errorf("volume %s: delete layer: %w", id, err)
		}
	}
	return nil
}

// start runs the volume's background work until Close.
func (v *Volume) start() {
	v.ctx, v.stop = context.WithCancel(context.Background())
	if v.opts.WritebackEvery > 0 {
		v.loops.Go(v.writeback)
	}
	if v.tiers.Cluster != nil {
		v.loops.Go(v.replicate)
		v.wake <- struct{}{}
	}
	if v.exclusive() {
		v.loops.Go(v.reclaimer)
		v.nudgeReclaim()
	}
}

// writeback flushes on its own every WritebackEvery, so that what the
// guest never flushes reaches the tiers too.
func (v *Volume) writeback() {
	t := time.NewTicker(v.opts.WritebackEvery)
	defer t.Stop()
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-t.C:
		}
		if err := v.flush(v.ctx); err != nil && v.ctx.Err() == nil {
			v.log.Warn("write back", "err", err)
		}
	}
}

// replicate copies layers from the cluster tier to object storage, in
// order, whenever a flush adds one.
func (v *Volume) replicate() {
	retry := backoff.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-v.wake:
		}
		for {
			v.mu.Lock()
			next, top := v.replicated+1, v.seq
			v.mu.Unlock()
			if next > top {
				break
			}
			if err := v.copyLayer(v.ctx, next); err != nil {
				if v.ctx.Err() != nil {
					return
				}
				v.log.Warn("copy layer to object storage", "layer", next, "err", err)
				if !retry.Wait(v.ctx.Done()) {
					return
				}
				continue
			}
			retry.Reset()
		}
	}
}

// copyLayer copies layer seq, chunks first, from the cluster tier to
// object storage.
func (v *Volume) copyLayer(ctx context.Context, seq int64) error {
	from, to := *v.tiers.Cluster, v.tiers.Object
	m, err := from.Manifest(ctx, layerID(v.cfg.ID, seq))
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(v.opts.Parallel)
	for _, name := range m.Chunks() {
		g.Go(func() error {
			data, err := from.Get(gctx, name)
			if err != nil {
				return err
			}
			_, err = to.Put(gctx, name, data)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := to.PutManifest(ctx, m); err != nil {
		return err
	}
	v.mu.Lock()
	v.replicatedTo(seq)
	v.mu.Unlock()
	if m.Parent == v.cfg.Base && seq > 0 {
		v.prune(ctx, seq, from, to)
	}
	return nil
}

// Snapshot flushes the volume and writes the manifest of its whole disk as
// layer id over the base, labelled, to object storage: a snapshot that
// needs none of the volume's own layers, so pruning them never breaks it.
// It returns once the manifest is stored, after object storage holds every
// chunk it names.
func (v *Volume) Snapshot(ctx context.Context, id string, labels map[string]string) (layer.Manifest, error) {
	if err := v.flush(ctx); err != nil {
		return layer.Manifest{}, err
	}
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	v.mu.Lock()
	seq := v.seq
	cells := make([]ownCell, 0, len(v.own))
	for _, c := range slices.Sorted(maps.Keys(v.own)) {
		cells = append(cells, ownCell{cell: c, chunkRef: v.own[c]})
	}
	v.mu.Unlock()
	// Under flushMu no flush changes the map, but the writes since the
	// flush above are in no layer: they are after the snapshot.
	if err := v.waitReplicated(ctx, func() bool { return v.replicated >= seq }); err != nil {
		return layer.Manifest{}, err
	}
	m := v.manifest(0, v.cfg.Base, cells)
	m.ID, m.Labels = id, labels
	// PutManifest validates it (a bad ID or label is refused there).
	if err := v.tiers.Object.PutManifest(ctx, m); err != nil {
		return layer.Manifest{}, fmt.Errorf("volume %s: snapshot: %w", v.cfg.ID, err)
	}
	return m, nil
}
