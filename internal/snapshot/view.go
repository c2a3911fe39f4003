package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/listing"
	"warren/internal/store"
)

// View is the API's picture of a snapshot. Base layers are internal: a
// snapshot stored against one shows no parent.
func (e *Engine) View(sn store.Snapshot) api.Snapshot {
	v := api.Snapshot{
		ID: sn.ID, Name: sn.Name, SandboxID: sn.SandboxID, Scope: sn.Scope, Template: sn.Template, State: sn.State, Error: sn.Error,
		DiskBytes: sn.DiskBytes, ChangedBytes: sn.ChangedBytes, StoredBytes: sn.StoredBytes,
		CreatedAt: sn.CreatedAt, AckMs: ms(sn.Ack.Seconds()), UploadMs: ms(sn.Upload.Seconds()),
	}
	if !isBase(sn.Parent) {
		v.Parent = sn.Parent
	}
	if !sn.DurableAt.IsZero() {
		t := sn.DurableAt
		v.DurableAt = &t
	}
	return v
}

func ms(seconds float64) float64 { return float64(int64(seconds*1e6)) / 1e3 }

// link is what this node's record or the manifest of snapshot id says of
// its tenant and parent; ok is false when neither is known any more.
func (e *Engine) link(ctx context.Context, id string) (tenant, parent string, ok bool) {
	if sn, err := e.store.GetSnapshot(ctx, id); err == nil {
		return sn.Tenant, sn.Parent, true
	}
	if m, err := e.manifest(ctx, id); err == nil {
		return m.Labels["tenant"], m.Parent, true
	}
	return "", "", false
}

// List returns a page of the tenant's snapshots on this node, of one
// sandbox when sandboxID is not "", in one of states (any when empty),
// oldest first: Parent links make the tree.
func (e *Engine) List(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]api.Snapshot, error) {
	sns, err := e.store.ListSnapshots(ctx, tenant, sandboxID, states, page)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(sns))
	for _, sn := range sns {
		out = append(out, e.View(sn))
	}
	return out, nil
}

// Lineage returns up to limit ancestors of the tenant's snapshot id,
// nearest first, starting above after (an ancestor a previous page
// ended with; "" for the first page), and whether more follow. The walk
// reads each ancestor's parent from this node's record or its manifest, so
// it goes on through ancestors deleted since (their layers stay while a
// descendant needs them); it ends at the template's base layer, at an
// ancestor no longer known, or after maxLineage steps. An after that is
// not an ancestor of the tenant's is CodeBadRequest.
func (e *Engine) Lineage(ctx context.Context, tenant, id, after string, limit int) (ancestors []string, more bool, err error) {
	sn, err := e.Lookup(ctx, tenant, id)
	if err != nil {
		return nil, false, err
	}
	next := sn.Parent
	if after != "" {
		owner, parent, ok := e.link(ctx, after)
		if !ok || owner != tenant || isBase(after) {
			return nil, false, api.Errorf(api.CodeBadRequest, "bad page_token: it names no ancestor of snapshot %s", id)
		}
		next = parent
	}
	for n := 0; next != "" && !isBase(next) && n < maxLineage; n++ {
		if len(ancestors) == limit {
			return ancestors, true, nil
		}
		ancestors = append(ancestors, next)
		_, parent, ok := e.link(ctx, next)
		if !ok {
			break
		}
		next = parent
	}
	return ancestors, false, nil
}

// Delete deletes one of the tenant's snapshots, by ID or name (as Lookup
// takes), and frees its name: restores of it are refused from now on,
// everywhere. Its layer stays in the blob store while a descendant needs
// it; the collector removes what nothing needs. A pending snapshot's
// upload is let finish first.
func (e *Engine) Delete(ctx context.Context, tenant, id string) error {
	sn, err := e.Lookup(ctx, tenant, id)
	if err != nil {
		return err
	}
	id = sn.ID
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
