package sandbox

import (
	"context"
	"errors"
	"time"

	"warren/api"
	"warren/internal/store"
)

const (
	// minCheckpointEvery is the shortest checkpoint policy: each checkpoint
	// is a snapshot, frozen for a moment and uploaded.
	minCheckpointEvery = 5 * time.Second
	// checkpointTick is how often the node looks for checkpoints due.
	checkpointTick = time.Second
	// checkpointsAtOnce bounds the checkpoints under way on the node: the
	// rest wait for the next tick.
	checkpointsAtOnce = 2
)

// checkpoints takes the checkpoints of the node's sandboxes that have a
// policy, each when its time comes, until ctx ends.
func (m *Manager) checkpoints(ctx context.Context) {
	defer m.loops.Done()
	tick(ctx, checkpointTick, func() {
		for id, l := range m.checkpointsDue(time.Now()) {
			m.loops.Go(func() { m.checkpoint(ctx, id, l) })
		}
	})
}

// checkpointsDue marks checkpointing, and returns, the running sandboxes
// whose next checkpoint is due at now, up to checkpointsAtOnce under way.
func (m *Manager) checkpointsDue(now time.Time) map[string]*live {
	m.mu.Lock()
	defer m.mu.Unlock()
	busy := 0
	for _, l := range m.live {
		if l.checkpointing {
			busy++
		}
	}
	due := map[string]*live{}
	for id, l := range m.live {
		if busy >= checkpointsAtOnce {
			break
		}
		if l.every == 0 || l.checkpointing || l.deleting || l.paused || now.Sub(l.checkpointed) < l.every {
			continue
		}
		l.checkpointing = true
		busy++
		due[id] = l
	}
	return due
}

// checkpoint takes one checkpoint of sandbox id: a durable snapshot of its
// root disk, recorded as its last checkpoint, which replaces the one
// before (deleted once the new one is recorded).
func (m *Manager) checkpoint(ctx context.Context, id string, l *live) {
	log := m.log.With("sandbox", id)
	defer func() {
		m.mu.Lock()
		l.checkpointing = false
		m.mu.Unlock()
	}()
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if err != nil {
		log.Warn("checkpoint not taken", "err", err)
		return
	}
	sn, err := m.Snapshot(ctx, l.tenant, id, api.CreateSnapshotRequest{Wait: true})
	if err == nil && sn.State != api.SnapshotDurable {
		err = errors.New(sn.Error)
	}
	// The next one is due a period after this try, whatever came of it: a
	// failing checkpoint is not retried in a loop.
	m.mu.Lock()
	l.checkpointed = time.Now()
	m.mu.Unlock()
	if err != nil {
		log.Warn("checkpoint failed", "err", err)
		return
	}
	_, err = m.deps.Store.SetCheckpoint(ctx, id, m.deps.NodeID, api.Checkpoint{Snapshot: sn.ID, At: sn.CreatedAt})
	if err != nil {
		// Deleted or moved on meanwhile: the checkpoint is nobody's.
		log.Info("checkpoint not recorded", "snapshot", sn.ID, "err", err)
		m.dropCheckpoint(ctx, rec.Tenant, sn.ID)
		return
	}
	log.Debug("checkpoint taken", "snapshot", sn.ID)
	m.dropCheckpoint(ctx, rec.Tenant, rec.Checkpoint)
}

// dropCheckpoint deletes a checkpoint no sandbox needs any more ("":
// none), logging what it could not delete.
func (m *Manager) dropCheckpoint(ctx context.Context, tenant, snap string) {
	if snap == "" {
		return
	}
	err := m.deps.Snapshots.Delete(context.WithoutCancel(ctx), tenant, snap)
	if err != nil && !errors.Is(err, store.ErrNotFound) && !api.IsCode(err, api.CodeNotFound) {
		m.log.Warn("old checkpoint not deleted", "snapshot", snap, "err", err)
	}
}

// dropCheckpoints deletes the checkpoints of sandbox ended, which just
// stopped: its last checkpoint (a paused one's pause snapshot) and, when it
// slept as slept says (nil: it was not paused), what else it slept with.
func (m *Manager) dropCheckpoints(ctx context.Context, ended store.Sandbox, slept *api.Paused) {
	m.dropCheckpoint(ctx, ended.Tenant, ended.Checkpoint)
	m.dropSlept(ctx, ended.Tenant, slept)
}

// dropSleptLater is dropSlept in the background, after the answer to the
// call that woke the sandbox.
func (m *Manager) dropSleptLater(ctx context.Context, tenant string, slept *api.Paused) {
	ctx = context.WithoutCancel(ctx)
	m.loops.Go(func() { m.dropSlept(ctx, tenant, slept) })
}

// dropSlept deletes what one of tenant's sandboxes slept with beside its
// root's pause snapshot, as slept says (nil: nothing), once it runs again
// or has ended: its workspace's pause snapshot and its memory image.
func (m *Manager) dropSlept(ctx context.Context, tenant string, slept *api.Paused) {
	if slept == nil {
		return
	}
	m.dropCheckpoint(ctx, tenant, slept.Workspace)
	if slept.Image != "" {
		if err := m.deps.Snapshots.DeleteImage(context.WithoutCancel(ctx), tenant, slept.Image); err != nil {
			m.log.Warn("memory image not deleted", "image", slept.Image, "err", err)
		}
	}
}
