package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/ident"
	"warren/internal/layer"
	"warren/internal/store"
)

// maxLineage bounds a lineage walk, against a cycle in corrupt manifests.
const maxLineage = 100000

// manifest returns a snapshot's parsed manifest from the blob store (errors
// wrap blob.ErrNotFound when it has none), remembering it: manifests never
// change once written.
func (e *Engine) manifest(ctx context.Context, id string) (layer.Manifest, error) {
	e.mu.Lock()
	m, ok := e.manifests[id]
	e.mu.Unlock()
	if ok {
		return m, nil
	}
	data, err := e.blobs.Get(ctx, chunkstore.ManifestKey(id))
	if err != nil {
		return layer.Manifest{}, fmt.Errorf("manifest of %s: %w", id, err)
	}
	m, err = layer.ParseManifest(data)
	if err != nil {
		return layer.Manifest{}, fmt.Errorf("manifest of %s: %w", id, err)
	}
	if m.ID != id {
		return layer.Manifest{}, fmt.Errorf("manifest of %s: it names snapshot %s", id, m.ID)
	}
	e.remember(m)
	return m, nil
}

// maxManifests bounds the manifests kept in memory; past it one is
// forgotten (read again when needed) for each one remembered.
const maxManifests = 4096

func (e *Engine) forgetManifest(id string) {
	e.mu.Lock()
	delete(e.manifests, id)
	e.mu.Unlock()
}

func (e *Engine) remember(m layer.Manifest) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.manifests) >= maxManifests {
		for id := range e.manifests {
			delete(e.manifests, id)
			break
		}
	}
	e.manifests[m.ID] = m
}

// Lookup returns the snapshot ref names if tenant may see it: ref is its ID
// or its name (api.CheckSnapshotName), and the record returned has its ID.
// It is this node's record, or else, by ID, a durable snapshot another
// node stored in the shared blob store (names are kept in the store
// alone). A snapshot of another tenant, or deleted, is api not_found.
func (e *Engine) Lookup(ctx context.Context, tenant, ref string) (store.Snapshot, error) {
	notFound := api.Errorf(api.CodeNotFound, "snapshot %s not found", ref)
	id := ref
	var sn store.Snapshot
	var err error
	switch {
	case ident.Valid(ref, "sn-"):
		sn, err = e.store.GetSnapshot(ctx, id)
	case api.CheckSnapshotName(ref) == nil:
		if sn, err = e.store.SnapshotByName(ctx, tenant, ref); errors.Is(err, store.ErrNotFound) {
			return store.Snapshot{}, notFound
		}
		id = sn.ID
	default:
		return store.Snapshot{}, notFound
	}
	switch {
	case err == nil:
		if sn.Tenant != tenant || sn.Tenant == "" {
			return store.Snapshot{}, notFound
		}
	case errors.Is(err, store.ErrNotFound):
		m, err := e.manifest(ctx, id)
		if errors.Is(err, blob.ErrNotFound) {
			return store.Snapshot{}, notFound
		}
		if err != nil {
			return store.Snapshot{}, err
		}
		if m.Labels["tenant"] != tenant || m.Labels["tenant"] == "" {
			return store.Snapshot{}, notFound
		}
		sn = fromManifest(m)
	default:
		return store.Snapshot{}, err
	}
	// Deleted on any node sharing the blob store, or collected since: gone
	// here too, even where this node has a record and a cached disk.
	gone, err := e.exists(ctx, deletedKey(id))
	if err == nil && !gone && sn.State == api.SnapshotDurable {
		var ok bool
		ok, err = e.exists(ctx, chunkstore.ManifestKey(id))
		gone = !ok
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	if gone {
		e.forgetManifest(id)
		return store.Snapshot{}, notFound
	}
	return sn, nil
}

// fromManifest is the record of a durable snapshot known only by its
// manifest.
func fromManifest(m layer.Manifest) store.Snapshot {
	sn := store.Snapshot{
		ID: m.ID, Tenant: m.Labels["tenant"], SandboxID: m.Labels["sandbox"], Scope: m.Labels["scope"], Parent: m.Parent,
		Template: m.Labels["template"], State: api.SnapshotDurable, DiskBytes: m.DiskSize,
	}
	for _, x := range m.Extents {
		if !x.Zero {
			sn.ChangedBytes += x.Length
		}
	}
	if sn.Scope == "" {
		sn.Scope = api.ScopeRoot
	}
	if t, err := time.Parse(time.RFC3339Nano, m.Labels["created_at"]); err == nil {
		sn.CreatedAt = t
	}
	return sn
}

// Materialize makes sure the snapshot's disk is in the node's cache and
// returns its path, which the caller clones (never writes). A snapshot this
// node took is there already; any other is rebuilt from the deepest ancestor
// in the cache, fetching the layers below it, and recorded here.
func (e *Engine) Materialize(ctx context.Context, sn store.Snapshot) (string, error) {
	path, err := e.materialize(ctx, sn.ID)
	if err != nil {
		return "", err
	}
	if _, err := e.store.GetSnapshot(ctx, sn.ID); errors.Is(err, store.ErrNotFound) {
		// Concurrent restores may race to record it: one record is enough.
		if err := e.store.InsertSnapshot(ctx, &sn); err != nil && !errors.Is(err, store.ErrExists) {
			return "", fmt.Errorf("record restored snapshot: %w", err)
		}
	}
	return path, nil
}

// materialize brings id's disk into the cache once, however many callers
// ask at the same time.
func (e *Engine) materialize(ctx context.Context, id string) (string, error) {
	path := e.image(id)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	e.mu.Lock()
	f := e.fetching[id]
	if f == nil {
		f = &fetch{done: make(chan struct{})}
		e.fetching[id] = f
		e.mu.Unlock()
		// Run under the engine's context: a caller that gives up must not
		// fail the others waiting for the same disk.
		f.err = e.build(e.ctx, id)
		e.mu.Lock()
		delete(e.fetching, id)
		close(f.done)
	}
	e.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if f.err != nil {
		return "", f.err
	}
	return path, nil
}

// build rebuilds id's disk in the cache from its lineage.
func (e *Engine) build(ctx context.Context, id string) error {
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	t0 := time.Now()
	var chain []layer.Manifest // id first, then its ancestors up to one in the cache
	from := ""
	for cur := id; cur != ""; {
		if _, err := os.Stat(e.image(cur)); err == nil {
			from = cur
			break
		}
		if len(chain) == maxLineage {
			return fmt.Errorf("materialize %s: lineage longer than %d", id, maxLineage)
		}
		m, err := e.manifest(ctx, cur)
		if err != nil {
			return fmt.Errorf("materialize %s: %w", id, err)
		}
		chain = append(chain, m)
		cur = m.Parent
	}
	tmp := e.tempImage(id)
	var err error
	if from != "" {
		err = e.pool.Clone(ctx, e.image(from), tmp)
	} else {
		var f *os.File
		if f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			err = f.Close()
		}
	}
	for i := len(chain) - 1; i >= 0 && err == nil; i-- {
		err = layer.Apply(ctx, tmp, chain[i], e.chunks(), e.cfg.Parallel)
	}
	if err == nil {
		err = os.Rename(tmp, e.image(id))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("materialize %s: %w", id, err)
	}
	e.log.Info("snapshot materialized", "snapshot", id, "from", from, "layers", len(chain), "took", time.Since(t0))
	return nil
}
