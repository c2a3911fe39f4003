package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/layer"
	"warren/internal/store"
)

// GC deletes from the blob store the manifests of deleted snapshots that no
// live snapshot descends from, and every chunk that no remaining manifest
// lists: a mark and sweep that counts the references to each chunk from the
// manifests themselves, the only record every node shares.
//
// On this node it runs alone (uploads and fetches wait), so it never
// collects what they are about to reference. Uploads on other nodes sharing
// the store are protected by their intents, which make their parent lineage
// live, and by grace: objects younger than it are never collected. A grace
// of 0 is for a store no other node writes to.
func (e *Engine) GC(ctx context.Context, grace time.Duration) (api.GCResult, error) {
	if grace < 0 {
		grace = e.cfg.GCGrace
	}
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	var res api.GCResult
	cutoff := time.Now().Add(-grace)
	old := func(info blob.Info) bool { return !info.ModTime.After(cutoff) }

	first, err := e.mark(ctx, old)
	if err != nil {
		return res, err
	}
	// An upload on another node may have written its intent, or finished
	// and written its manifest, since: look again just before deleting,
	// and keep what either look found needed.
	again, err := e.mark(ctx, old)
	if err != nil {
		return res, err
	}
	needed, byID := first.needed, first.byID
	for id := range again.needed {
		needed[id] = true
	}
	for id, m := range again.byID {
		byID[id] = m
	}
	refs := map[string]int{}
	for id, m := range byID {
		if needed[id] {
			for _, h := range m.Chunks() {
				refs[h]++
			}
		}
	}
	deleted := again.deleted
	// Sweep: manifests first, so a crash half-way never leaves a manifest
	// whose chunks are gone.
	for id := range byID {
		if needed[id] {
			continue
		}
		if err := e.forget(ctx, id); err != nil {
			return res, err
		}
		res.ManifestsDeleted++
	}
	chunkInfos, err := e.blobs.List(ctx, "chunks/")
	if err != nil {
		return res, fmt.Errorf("gc: %w", err)
	}
	for _, info := range chunkInfos {
		if refs[strings.TrimPrefix(info.Key, "chunks/")] > 0 || !old(info) {
			res.ChunksKept++
			continue
		}
		// An upload that reuses an old chunk writes it again first (see
		// chunks.Put): look at its age once more just before deleting.
		if now, err := e.blobs.Stat(ctx, info.Key); err != nil || !old(now) {
			if err != nil && !errors.Is(err, blob.ErrNotFound) {
				return res, fmt.Errorf("gc: %w", err)
			}
			res.ChunksKept++
			continue
		}
		if err := e.blobs.Delete(ctx, info.Key); err != nil {
			return res, fmt.Errorf("gc: %w", err)
		}
		res.ChunksDeleted++
		res.BytesFreed += info.Size
	}
	// Markers of snapshots whose manifest is gone are no longer needed.
	for id := range deleted {
		if _, ok := byID[id]; !ok {
			if err := e.blobs.Delete(ctx, deletedKey(id)); err != nil {
				return res, fmt.Errorf("gc: %w", err)
			}
		}
	}
	e.log.Info("snapshot gc", "manifests_deleted", res.ManifestsDeleted, "chunks_deleted", res.ChunksDeleted,
		"bytes_freed", res.BytesFreed, "chunks_kept", res.ChunksKept)
	return res, nil
}

// forget removes a collected snapshot's manifest, and this node's record and
// cache image of it (a base layer that nothing references any more).
func (e *Engine) forget(ctx context.Context, id string) error {
	if err := e.blobs.Delete(ctx, chunkstore.ManifestKey(id)); err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	e.mu.Lock()
	delete(e.manifests, id)
	e.mu.Unlock()
	if sn, err := e.store.GetSnapshot(ctx, id); err == nil && sn.State == api.SnapshotDurable {
		if err := e.store.DeleteSnapshot(ctx, id); err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		if err := os.Remove(e.image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("gc: %w", err)
		}
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("gc: %w", err)
	}
	return nil
}

// marked is one look at the blob store: every manifest, the deleted
// markers, and the snapshots needed (live ones, and every lineage they and
// the upload intents stand on).
type marked struct {
	byID    map[string]layer.Manifest
	deleted map[string]bool
	needed  map[string]bool
}

// mark lists the manifests, markers and intents and marks what is needed.
// A manifest younger than the grace (old is false) is live even if
// deleted; a base layer is live only through the snapshots above it.
func (e *Engine) mark(ctx context.Context, old func(blob.Info) bool) (marked, error) {
	mk := marked{byID: map[string]layer.Manifest{}, needed: map[string]bool{}}
	manifests, err := e.blobs.List(ctx, "manifests/")
	if err != nil {
		return mk, fmt.Errorf("gc: %w", err)
	}
	if mk.deleted, err = e.listIDs(ctx, "deleted/"); err != nil {
		return mk, err
	}
	var live []string
	for _, info := range manifests {
		id := strings.TrimSuffix(strings.TrimPrefix(info.Key, "manifests/"), ".json")
		m, err := e.manifest(ctx, id)
		if errors.Is(err, blob.ErrNotFound) {
			continue // collected by another node meanwhile
		}
		if err != nil {
			// An unreadable manifest keeps its chunks: never collect what
			// might be needed.
			return mk, fmt.Errorf("gc: %w", err)
		}
		mk.byID[id] = m
		if !mk.deleted[id] && !isBase(id) || !old(info) {
			live = append(live, id)
		}
	}
	intents, err := e.intentParents(ctx)
	if err != nil {
		return mk, err
	}
	for _, id := range append(live, intents...) {
		for n := 0; id != "" && !mk.needed[id] && n < maxLineage; n++ {
			mk.needed[id] = true
			id = mk.byID[id].Parent
		}
	}
	return mk, nil
}

// abandonAfter is the age past which an upload intent is taken for one
// whose node died for good: the collector no longer keeps its parent.
const abandonAfter = 24 * time.Hour

// intentParents returns the parents named by the upload intents in the blob
// store, deleting the abandoned ones.
func (e *Engine) intentParents(ctx context.Context) ([]string, error) {
	infos, err := e.blobs.List(ctx, "intents/")
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	var parents []string
	for _, info := range infos {
		if time.Since(info.ModTime) > abandonAfter {
			if err := e.blobs.Delete(ctx, info.Key); err != nil {
				return nil, fmt.Errorf("gc: %w", err)
			}
			continue
		}
		data, err := e.blobs.Get(ctx, info.Key)
		if errors.Is(err, blob.ErrNotFound) {
			continue // finished meanwhile: its manifest is listed or soon will be
		}
		if err != nil {
			return nil, fmt.Errorf("gc: %w", err)
		}
		var in intent
		if err := json.Unmarshal(data, &in); err != nil {
			return nil, fmt.Errorf("gc: intent %s: %w", info.Key, err)
		}
		parents = append(parents, in.Parent)
	}
	return parents, nil
}

// listIDs returns the IDs named by the keys under prefix.
func (e *Engine) listIDs(ctx context.Context, prefix string) (map[string]bool, error) {
	infos, err := e.blobs.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	ids := map[string]bool{}
	for _, info := range infos {
		ids[strings.TrimPrefix(info.Key, prefix)] = true
	}
	return ids, nil
}
