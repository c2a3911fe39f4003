package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"warren/api"
	"warren/internal/backoff"
	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/layer"
	"warren/internal/metrics"
	"warren/internal/store"
)

// startUpload runs the upload of the snapshot acknowledged at since in the
// background unless it is already running.
func (e *Engine) startUpload(id string, since time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.startUploadLocked(id, since)
}

func (e *Engine) startUploadLocked(id string, since time.Time) {
	if _, ok := e.uploading[id]; ok || e.ctx.Err() != nil {
		return
	}
	u := &uploadRun{done: make(chan struct{}), since: since}
	e.uploading[id] = u
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.upload(id, since)
		e.mu.Lock()
		delete(e.uploading, id)
		e.mu.Unlock()
		close(u.done)
	}()
}

// waitUpload returns once the snapshot's upload (if one runs) has ended.
func (e *Engine) waitUpload(ctx context.Context, id string) error {
	e.mu.Lock()
	u := e.uploading[id]
	e.mu.Unlock()
	if u == nil {
		return nil
	}
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait returns the snapshot once it is no longer pending, or when ctx ends.
func (e *Engine) Wait(ctx context.Context, id string) (store.Snapshot, error) {
	if err := e.waitUpload(ctx, id); err != nil {
		return store.Snapshot{}, err
	}
	return e.store.GetSnapshot(ctx, id)
}

// errSettled ends an upload whose snapshot is no longer its to finish:
// deleted, or no longer pending on this node (another writer moved it).
var errSettled = errors.New("the snapshot is no longer this upload's to finish")

// upload makes a pending snapshot (pending since since) durable, trying
// Config.Attempts times before it records the snapshot failed. When the
// engine closes it leaves the snapshot pending for the next daemon process;
// when another writer deletes or moves the snapshot meanwhile, it stops and
// leaves the record as that writer made it.
func (e *Engine) upload(id string, since time.Time) {
	ctx := e.ctx
	log := e.log.With("snapshot", id)
	waits := backoff.Backoff{Base: e.cfg.RetryBase}
	var err error
	var stored int64 // by every attempt: a failed one may have stored chunks
	for attempt := 1; attempt <= e.cfg.Attempts; attempt++ {
		if err = e.uploadOnce(ctx, id, &stored); err == nil {
			e.cfg.Metrics.Observe(metrics.OpUpload, time.Since(since))
			return
		}
		if errors.Is(err, errSettled) {
			log.Warn("snapshot upload stopped", "reason", err)
			return
		}
		if ctx.Err() != nil {
			break
		}
		log.Warn("snapshot upload failed", "attempt", attempt, "of", e.cfg.Attempts, "err", err)
		if attempt == e.cfg.Attempts {
			break
		}
		select {
		case <-time.After(waits.Next()):
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return
	}
	reason := fmt.Sprintf("upload failed after %d attempts: %v", e.cfg.Attempts, err)
	if _, err := e.store.FailSnapshot(ctx, id, e.cfg.Node, reason, stored); errors.Is(err, store.ErrTransition) || errors.Is(err, store.ErrNotFound) {
		log.Warn("snapshot changed while it uploaded: left as it is", "err", err)
	} else if err != nil {
		log.Error("record failed snapshot", "err", err)
	}
	// Its intent would keep the parent's lineage from the collector.
	e.dropIntent(ctx, id)
}

// dropIntent removes the upload intent of snapshot id: its upload ended.
func (e *Engine) dropIntent(ctx context.Context, id string) {
	if err := e.blobs.Delete(ctx, intentKey(id)); err != nil {
		// Harmless: the collector only keeps its lineage a little longer.
		e.log.Warn("remove upload intent", "snapshot", id, "err", err)
	}
}

// intent is what an upload in progress leaves in the blob store.
type intent struct {
	ID     string    `json:"id"`
	Parent string    `json:"parent,omitempty"`
	Start  time.Time `json:"start"`
}

// uploadOnce is one attempt at making the snapshot durable: every step may
// repeat after a crash or a failed attempt. It adds the bytes it stores to
// *stored.
func (e *Engine) uploadOnce(ctx context.Context, id string, stored *int64) error {
	sn, err := e.store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		e.dropIntent(ctx, id) // an earlier attempt's
		return fmt.Errorf("%w: it was deleted", errSettled)
	}
	if err != nil {
		return err
	}
	if sn.State != api.SnapshotPending || sn.Node != e.cfg.Node {
		if sn.State != api.SnapshotPending {
			e.dropIntent(ctx, id) // an earlier attempt's
		}
		return fmt.Errorf("%w: it is %s, on node %q", errSettled, sn.State, sn.Node)
	}
	if sn.Parent, err = e.durableParent(ctx, sn.Parent); err != nil {
		return err
	}
	parentImage := ""
	if sn.Parent != "" {
		if parentImage, err = e.materialize(ctx, sn.Parent); err != nil {
			return fmt.Errorf("parent %s: %w", sn.Parent, err)
		}
	}
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	start := time.Now()
	in, err := json.Marshal(intent{ID: id, Parent: sn.Parent, Start: start.UTC()})
	if err != nil {
		return err
	}
	if err := e.blobs.Put(ctx, intentKey(id), in); err != nil {
		return fmt.Errorf("record intent: %w", err)
	}
	ranges, ds, err := layer.Changed(ctx, parentImage, e.image(id))
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	// A tenant's chunks are named in its own namespace, so that its upload
	// never finds, and so never reveals, another tenant's bytes; a template
	// base layer (no tenant) is named plainly, shared by all.
	ns := sn.Tenant
	extents, ws, err := layer.Write(ctx, e.image(id), ranges, ns, e.chunks(), e.cfg.Parallel)
	*stored += ws.Stored
	if err != nil {
		return fmt.Errorf("write layer: %w", err)
	}
	m := layer.Manifest{
		Version: layer.Version(ns), ID: id, Namespace: ns, Parent: sn.Parent, DiskSize: sn.DiskBytes, Extents: extents,
		Labels: map[string]string{
			"tenant": sn.Tenant, "sandbox": sn.SandboxID, "template": sn.Template, "scope": sn.Scope,
			"created_at": sn.CreatedAt.Format(time.RFC3339Nano),
		},
	}
	if err := e.verifyChunks(ctx, m); err != nil {
		return err
	}
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	if err := e.blobs.Put(ctx, chunkstore.ManifestKey(id), data); err != nil {
		return fmt.Errorf("store manifest: %w", err)
	}
	back, err := e.blobs.Get(ctx, chunkstore.ManifestKey(id))
	if err != nil {
		return fmt.Errorf("verify manifest: %w", err)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("verify manifest: the blob store returned different bytes")
	}
	if err := e.verifyLineage(ctx, sn.Parent); err != nil {
		// A collector elsewhere took the parent while this layer was
		// written against it: the next attempt stores against what is left.
		e.blobs.Delete(ctx, chunkstore.ManifestKey(id))
		return err
	}
	rec, err := e.store.MakeSnapshotDurable(ctx, id, e.cfg.Node, store.Durable{
		Parent: sn.Parent, ChangedBytes: ws.Changed, StoredBytes: *stored, Upload: time.Since(start)})
	if errors.Is(err, store.ErrTransition) || errors.Is(err, store.ErrNotFound) {
		// Deleted or failed by another writer while it uploaded: that
		// writer's record stands. A deleted snapshot's manifest is the
		// collector's (its deleted/ marker); a failed one's would say it
		// is durable, to every node that reads the blob store.
		if errors.Is(err, store.ErrNotFound) {
			os.Remove(e.image(id))
		} else if rec.State == api.SnapshotFailed {
			e.blobs.Delete(ctx, chunkstore.ManifestKey(id))
		}
		e.dropIntent(ctx, id)
		return fmt.Errorf("%w: %w", errSettled, err)
	}
	if err != nil {
		return err
	}
	sn = rec
	e.remember(m)
	e.dropIntent(ctx, id)
	// Read is what the diff had to read: little when the parent shares the
	// unchanged extents by reflink, the whole disk when it does not.
	e.log.Info("snapshot durable", "snapshot", id, "parent", sn.Parent, "changed", sn.ChangedBytes,
		"stored", sn.StoredBytes, "upload", sn.Upload, "diff_shared", ds.Shared, "diff_read", ds.Read)
	return nil
}

// verifyChunks checks that every chunk the manifest lists is in the blob
// store: the manifest is written only then. A chunk's size may differ from
// the one this upload compressed (another writer stored the same content);
// its content is checked against its name on every read.
func (e *Engine) verifyChunks(ctx context.Context, m layer.Manifest) error {
	for _, name := range m.Chunks() {
		info, err := e.blobs.Stat(ctx, chunkstore.ChunkKey(name))
		if err != nil {
			return fmt.Errorf("verify chunk %s: %w", name, err)
		}
		if info.Size == 0 {
			return fmt.Errorf("verify chunk %s: empty object", name)
		}
	}
	return nil
}

// verifyLineage checks that every manifest of the lineage from id up is
// still in the blob store.
func (e *Engine) verifyLineage(ctx context.Context, id string) error {
	for n := 0; id != "" && n < maxLineage; n++ {
		ok, err := e.exists(ctx, chunkstore.ManifestKey(id))
		if err != nil {
			return fmt.Errorf("verify lineage: %w", err)
		}
		if !ok {
			e.forgetManifest(id)
			return fmt.Errorf("verify lineage: ancestor %s is gone from the blob store", id)
		}
		m, err := e.manifest(ctx, id)
		if err != nil {
			return fmt.Errorf("verify lineage: %w", err)
		}
		id = m.Parent
	}
	return nil
}

// durableParent waits for the intended parent's upload and returns the
// nearest durable snapshot up its lineage: a child whose parent failed (or
// is another node's to upload) is stored against the grandparent. A base
// layer whose manifest the blob store no longer has (collected while no
// snapshot needed it) is uploaded again.
func (e *Engine) durableParent(ctx context.Context, id string) (string, error) {
	for id != "" {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := e.waitUpload(ctx, id); err != nil {
			return "", err
		}
		p, err := e.store.GetSnapshot(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			// Deleted here, or never here: its manifest is the truth. If
			// the collector took it too, the layer is stored whole.
			_, err := e.manifest(ctx, id)
			if errors.Is(err, blob.ErrNotFound) {
				e.log.Warn("parent snapshot is gone: storing the whole disk", "parent", id)
				return "", nil
			}
			if err != nil {
				return "", fmt.Errorf("parent %s: %w", id, err)
			}
			return id, nil
		}
		if err != nil {
			return "", err
		}
		switch p.State {
		case api.SnapshotDurable:
			if !isBase(id) {
				return id, nil
			}
			_, err := e.blobs.Stat(ctx, chunkstore.ManifestKey(id))
			if err == nil {
				return id, nil
			}
			if !errors.Is(err, blob.ErrNotFound) {
				return "", err
			}
			// The collector took it while nothing needed it: upload it
			// again, from this node's cache.
			if _, err := os.Stat(e.image(id)); err != nil {
				e.log.Warn("parent base layer is gone: storing the whole disk", "parent", id)
				return "", nil
			}
			rec, err := e.store.RetryBaseLayer(ctx, p, e.cfg.Node)
			if errors.Is(err, store.ErrNotFound) || (errors.Is(err, store.ErrTransition) && rec.State != api.SnapshotDurable) {
				continue // changed meanwhile: look again
			}
			if err != nil {
				return "", err
			}
			e.startUpload(id, time.Now())
		case api.SnapshotFailed:
			id = p.Parent
		case api.SnapshotPending:
			if p.Node != e.cfg.Node {
				// Another node's upload, which this one can neither run
				// nor see end: store against the nearest durable ancestor.
				e.log.Info("parent snapshot is pending on another node: storing against its parent", "parent", id, "node", p.Node)
				id = p.Parent
				continue
			}
			// Its upload is not running (ended by a failed attempt that
			// has not been recorded yet): start it and wait again.
			e.startUpload(id, p.CreatedAt)
		}
	}
	return "", nil
}
