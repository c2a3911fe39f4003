package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"

	"warren/api"
	"warren/internal/blockserver"
	"warren/internal/store"
)

// Always-on disks (docs/ALWAYS-ON.md). A sandbox created with persistence
// "always" has its root disk served by the node's block server: a file in
// a FUSE mount, over a volume whose blocks live in the node's cache and go
// back to its tiers. Its entry in the disks directory is a link to that
// file, so that the runtime, an adopt after a restart and removeDisks find
// it as any disk; a link there is how the manager knows a disk is a
// volume.

// alwaysOn says whether rec's root disk is an always-on volume.
func alwaysOn(rec *store.Sandbox) bool { return rec.Persistence == api.PersistenceAlways }

// isVolume says whether sandbox id's root disk is a volume of the block
// server.
func (m *Manager) isVolume(id string) bool {
	fi, err := os.Lstat(m.diskPath(id))
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// volumeDisk serves sandbox rec's root disk as a volume over the layer src
// starts from, linked at its disk path, its filesystem grown to rec's
// size: for a container a FUSE file, which its loop device attaches; for a
// vm an NBD socket, which QEMU attaches. Nothing is fetched until the
// sandbox reads it.
func (m *Manager) volumeDisk(ctx context.Context, rec *store.Sandbox, src source) error {
	front := blockserver.FrontFile
	if rec.Runtime == vmRuntime {
		front = blockserver.FrontNBD
	}
	req := blockserver.VolumeRequest{SizeBytes: rec.DiskMB << 20, Front: front, Recover: src.recover}
	if !src.recover {
		var err error
		if req.Base, err = m.baseOf(ctx, src); err != nil {
			return err
		}
	}
	c, err := m.deps.Blocks.Client(ctx)
	if err != nil {
		return err
	}
	in, err := c.Serve(ctx, rec.ID, req)
	if err != nil {
		return err
	}
	err = os.Symlink(in.Path, m.diskPath(rec.ID))
	if err == nil && rec.DiskMB<<20 > src.size {
		err = c.GrowFS(ctx, rec.ID)
	}
	if err != nil {
		os.Remove(m.diskPath(rec.ID))
		// A recovered volume is the sandbox's data: it stays in the tiers.
		drop := c.Forget
		if src.recover {
			drop = c.Release
		}
		return errors.Join(err, drop(context.WithoutCancel(ctx), rec.ID))
	}
	return nil
}

// baseOf is the layer a disk of src starts as: the snapshot it is restored
// from (durable: restore waits for it), else its template's base layer,
// once durable in the blob store (the block server reads it from there).
func (m *Manager) baseOf(ctx context.Context, src source) (string, error) {
	if src.origin != "" {
		return src.origin, nil
	}
	base, err := m.deps.Snapshots.EnsureBase(ctx, src.template, src.image, src.built)
	if err != nil {
		return "", err
	}
	sn, err := m.deps.Snapshots.Wait(ctx, base)
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", base, err)
	}
	if sn.State != api.SnapshotDurable {
		return "", fmt.Errorf("layer %s is %s: %s", base, sn.State, sn.Error)
	}
	return base, nil
}

// dropVolume stops serving sandbox id's volume and removes its link; the
// volume goes from the tiers too, unless handOver (another node takes it
// from them).
func (m *Manager) dropVolume(ctx context.Context, id string, handOver bool) error {
	c, err := m.deps.Blocks.Client(ctx)
	if err == nil {
		if handOver {
			err = c.Release(ctx, id)
		} else {
			err = c.Forget(ctx, id)
		}
	}
	if err != nil {
		return fmt.Errorf("always-on disk: %w", err)
	}
	return os.Remove(m.diskPath(id))
}

// volumeSnapshot is the write of snapshot.Engine.TakeLayer for sandbox
// id's volume: the block server's snapshot, one manifest over its base.
func (m *Manager) volumeSnapshot(id string) func(ctx context.Context, snap string, labels map[string]string) (string, int64, error) {
	return func(ctx context.Context, snap string, labels map[string]string) (string, int64, error) {
		c, err := m.deps.Blocks.Client(ctx)
		if err != nil {
			return "", 0, err
		}
		in, err := c.Snapshot(ctx, id, blockserver.SnapshotRequest{ID: snap, Labels: labels})
		return in.Parent, in.SizeBytes, err
	}
}

// volumeState is sandbox id's volume's write-back state, as the block
// server reports it; nil (logged) when it cannot.
func (m *Manager) volumeState(ctx context.Context, id string) *api.Volume {
	c, err := m.deps.Blocks.Client(ctx)
	var in blockserver.VolumeInfo
	if err == nil {
		in, err = c.Volume(ctx, id)
	}
	if err != nil {
		m.log.Warn("always-on disk's state", "sandbox", id, "err", err)
		return nil
	}
	return &api.Volume{
		Layer: in.Layer, RecoveryPoint: in.RecoveryPoint, DirtyBytes: in.DirtyBytes, CachedBytes: in.CachedBytes,
		DurableBytes: in.DurableBytes, DurableLimitBytes: in.DurableLimitBytes, UsedBytes: in.UsedBytes, Refused: in.Refused,
	}
}
