package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/store"
)

// View is the API's picture of a snapshot. Base layers are internal: a
// lineage stops above them.
func (e *Engine) View(ctx context.Context, sn store.Snapshot) api.Snapshot {
	v := api.Snapshot{
		ID: sn.ID, SandboxID: sn.SandboxID, Scope: sn.Scope, Template: sn.Template, State: sn.State, Error: sn.Error,
		DiskBytes: sn.DiskBytes, ChangedBytes: sn.ChangedBytes, StoredBytes: sn.StoredBytes,
		CreatedAt: sn.CreatedAt, AckMs: ms(sn.Ack.Seconds()), UploadMs: ms(sn.Upload.Seconds()),
		Lineage: []string{},
	}
	if !isBase(sn.Parent) {
		v.Parent = sn.Parent
	}
	if !sn.DurableAt.IsZero() {
		t := sn.DurableAt
		v.DurableAt = &t
	}
	for p := v.Parent; p != "" && !isBase(p) && len(v.Lineage) < maxLineage; {
		v.Lineage = append(v.Lineage, p)
		p = e.parentOf(ctx, p)
	}
	slices.Reverse(v.Lineage)
	return v
}

func ms(seconds float64) float64 { return float64(int64(seconds*1e6)) / 1e3 }

// parentOf is id's parent from this node's record or its manifest; "" when
// neither is known any more.
func (e *Engine) parentOf(ctx context.Context, id string) string {
	if sn, err := e.store.GetSnapshot(ctx, id); err == nil {
		return sn.Parent
	}
	if m, err := e.manifest(ctx, id); err == nil {
		return m.Parent
	}
	return ""
}

// List returns the tenant's snapshots on this node, of one sandbox when
// sandboxID is not "", oldest first: Parent links make the tree.
func (e *Engine) List(ctx context.Context, tenant, sandboxID string) ([]api.Snapshot, error) {
	sns, err := e.store.ListSnapshots(ctx, tenant, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(sns))
	for _, sn := range sns {
		out = append(out, e.View(ctx, sn))
	}
	return out, nil
}

// Delete deletes one of the tenant's snapshots: restores of it are refused
// from now on, everywhere. Its layer stays in the blob store while a
// descendant needs it; the collector removes what nothing needs. A pending
// snapshot's upload is let finish first.
func (e *Engine) Delete(ctx context.Context, tenant, id string) error {
	sn, err := e.Lookup(ctx, tenant, id)
	if err != nil {
		return err
	}
	if err := e.waitUpload(ctx, id); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := e.blobs.Put(ctx, deletedKey(id), []byte(sn.Tenant)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := e.store.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := os.Remove(e.image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	e.log.Info("snapshot deleted", "snapshot", id)
	return nil
}

// exists reports whether key is in the blob store.
func (e *Engine) exists(ctx context.Context, key string) (bool, error) {
	_, err := e.blobs.Stat(ctx, key)
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
