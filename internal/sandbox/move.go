package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"warren/api"
	"warren/internal/runtime"
	"warren/internal/snapshot"
	"warren/internal/store"
)

const (
	// movesTick is how often the node looks for moving sandboxes placed on
	// it.
	movesTick = time.Second
	// movesAtOnce bounds the moved sandboxes a look starts.
	movesAtOnce = 16
	// drainStopWait is how long a drain's final snapshot waits for the
	// sandbox to stop before it thaws the filesystem under it: a process
	// blocked writing to the frozen filesystem dies only once thawed, and
	// its write never returns to it.
	drainStopWait = 2 * time.Second
)

// moves starts, until ctx ends, the moving sandboxes placed on this node:
// a control replica placed them after their node was lost or drained, or
// this node's own restart could not adopt them (reconcile).
func (m *Manager) moves(ctx context.Context) {
	defer m.loops.Done()
	tick(ctx, movesTick, func() {
		m.prefetch(ctx)
		recs, err := m.deps.Store.MovingSandboxes(ctx, m.deps.NodeID, movesAtOnce)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("find moving sandboxes", "err", err)
			}
			return
		}
		for _, rec := range recs {
			m.mu.Lock()
			busy := m.arriving[rec.ID]
			m.arriving[rec.ID] = true
			m.mu.Unlock()
			if busy {
				continue // the start of a look before is still at it
			}
			m.loops.Go(func() {
				defer func() {
					m.mu.Lock()
					delete(m.arriving, rec.ID)
					m.mu.Unlock()
				}()
				m.startMoved(ctx, rec)
			})
		}
	})
}

// startMoved starts moving sandbox rec, placed on this node, from its last
// checkpoint under its own ID: it claims the record (moving → starting),
// then starts it as a restore does. A node that cannot take it now gives
// the placement back, for a control replica to place it again; a
// checkpoint that is gone or failed fails it.
func (m *Manager) startMoved(ctx context.Context, rec store.Sandbox) {
	log := m.log.With("sandbox", rec.ID)
	if rec.Restored == nil || rec.Restored.Snapshot == "" {
		m.failMoved(ctx, rec, "it was moved without a checkpoint to start from")
		return
	}
	rt := m.runtimeNamed(rec.Runtime)
	if rt == nil {
		m.giveBack(ctx, rec, fmt.Sprintf("this node has no %s runtime", rec.Runtime))
		return
	}
	if alwaysOn(&rec) {
		m.startMovedVolume(ctx, rt, rec)
		return
	}
	sn, err := m.deps.Snapshots.Lookup(ctx, rec.Tenant, rec.Restored.Snapshot)
	switch {
	case api.IsCode(err, api.CodeNotFound):
		m.failMoved(ctx, rec, fmt.Sprintf("its checkpoint %s is gone", rec.Restored.Snapshot))
		return
	case err != nil:
		log.Warn("moved sandbox's checkpoint not read; trying again", "err", err)
		return
	case sn.State != api.SnapshotDurable:
		m.failMoved(ctx, rec, fmt.Sprintf("its checkpoint %s is %s, not durable", sn.ID, sn.State))
		return
	}
	if err := m.admitMoved(rec); err != nil {
		m.giveBack(ctx, rec, err.Error())
		return
	}
	started := false
	defer func() {
		if !started {
			m.ledger.release(rec.ID)
		}
	}()
	back := *rec.Restored
	back.At = time.Now()
	self := m.deps.NodeID
	claimed, err := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StateMoving}, To: api.StateStarting, Version: rec.Version, Node: &self, Restored: &back,
	})
	if err != nil {
		log.Info("moved sandbox not claimed", "err", err) // deleted, expired or placed again meanwhile
		return
	}
	image, err := m.deps.Snapshots.Materialize(ctx, sn)
	if err != nil {
		m.startFailed(ctx, claimed, failed(fmt.Sprintf("its checkpoint %s could not be fetched", sn.ID), err))
		return
	}
	started = true // run owns the claim from here
	if _, err := m.run(ctx, rt, claimed, source{template: rec.Template, image: image, size: sn.DiskBytes, origin: sn.ID}); err != nil {
		m.ledger.release(rec.ID)
		return
	}
	log.Info("sandbox moved here from its checkpoint", "snapshot", sn.ID, "from", back.From,
		"lost_seconds", back.LostSeconds, "reason", back.Reason)
}

// admitMoved claims what moving sandbox rec holds of the node.
func (m *Manager) admitMoved(rec store.Sandbox) error {
	if err := m.ledger.fits(rec.MemoryMB, rec.Pids); err != nil {
		return err
	}
	if err := m.CheckDiskFree("moved sandboxes are"); err != nil {
		return err
	}
	return m.ledger.admit([]string{rec.ID}, claimOf(rec))
}

// giveBack returns the placement of moving sandbox rec on this node, for
// a control replica to place it again.
func (m *Manager) giveBack(ctx context.Context, rec store.Sandbox, why string) {
	m.log.Warn("moved sandbox given back for another node", "sandbox", rec.ID, "why", why)
	if _, err := m.deps.Store.AssignMove(ctx, rec.ID, rec.Version, m.deps.NodeID, ""); err != nil && !errors.Is(err, store.ErrTransition) {
		m.log.Error("give back a moved sandbox", "sandbox", rec.ID, "err", err)
	}
}

// startMovedVolume starts moving always-on sandbox rec, placed on this
// node, with its own volume, recovered from the tiers as its last flush
// left it.
func (m *Manager) startMovedVolume(ctx context.Context, rt runtime.Runtime, rec store.Sandbox) {
	if m.deps.Blocks == nil {
		m.giveBack(ctx, rec, "this node has no block server")
		return
	}
	if err := m.admitMoved(rec); err != nil {
		m.giveBack(ctx, rec, err.Error())
		return
	}
	back := *rec.Restored
	back.At = time.Now()
	self := m.deps.NodeID
	claimed, err := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StateMoving}, To: api.StateStarting, Version: rec.Version, Node: &self, Restored: &back,
	})
	if err != nil {
		m.ledger.release(rec.ID)
		m.log.Info("moved sandbox not claimed", "sandbox", rec.ID, "err", err)
		return
	}
	if _, err := m.run(ctx, rt, claimed, source{template: rec.Template, size: rec.DiskMB << 20, recover: true}); err != nil {
		m.ledger.release(rec.ID)
		return
	}
	m.log.Info("always-on sandbox moved here with its volume", "sandbox", rec.ID, "from", back.From, "reason", back.Reason)
}

// failMoved records moving sandbox rec failed for reason.
func (m *Manager) failMoved(ctx context.Context, rec store.Sandbox, reason string) {
	m.log.Warn("moved sandbox failed", "sandbox", rec.ID, "reason", reason)
	none := time.Time{}
	_, err := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StateMoving}, To: api.StateFailed, Version: rec.Version, Error: reason, Expires: &none,
	})
	if err != nil && !errors.Is(err, store.ErrTransition) {
		m.log.Error("record a moved sandbox failed", "sandbox", rec.ID, "err", err)
	}
}

// Drain moves every running sandbox of the node away, nothing lost: each
// gets a final snapshot with its filesystem frozen and is stopped before
// it is thawed, so nothing it writes after the snapshot is acknowledged;
// once that snapshot is durable, its record is moved (with no node, for
// a control replica to place) and the node lets go of it; an always-on
// sandbox's volume is flushed instead, and handed over. A paused one the
// node holds is let go of, to wake elsewhere from its pause snapshot
// without its memory. One with a workspace disk stays. It returns how
// many moved.
func (m *Manager) Drain(ctx context.Context, reason string) int {
	m.mu.Lock()
	ls := map[string]*live{}
	for id, l := range m.live {
		if !l.deleting {
			ls[id] = l
		}
	}
	m.mu.Unlock()
	moved := 0
	for id, l := range ls {
		m.mu.Lock()
		paused := l.paused
		m.mu.Unlock()
		move := m.moveAway
		if paused {
			move = m.letGo
		}
		if err := move(ctx, id, l, reason); err != nil {
			m.log.Warn("sandbox not drained", "sandbox", id, "err", err)
			continue
		}
		moved++
	}
	return moved
}

// letGo drains paused sandbox id, which this node holds (l): it sleeps on
// from its pause snapshot, held by none, for the node a wake is placed on;
// its memory is lost (store.Unhold).
func (m *Manager) letGo(ctx context.Context, id string, l *live, reason string) error {
	ctx = context.WithoutCancel(ctx)
	l.op.Lock()
	defer l.op.Unlock()
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if !rec.Held() || rec.Paused == nil {
		return fmt.Errorf("it stays: it is %s", rec.State)
	}
	m.mu.Lock()
	if l.deleting || m.live[id] != l {
		m.mu.Unlock()
		return errors.New("it is being deleted")
	}
	l.deleting = true // the drain owns it: its exit is no failure
	delete(m.live, id)
	m.mu.Unlock()
	// Stopped and released before its record says no node holds it: a
	// wake placed elsewhere finds nothing of it left here.
	if err := m.release(ctx, id, l, false); err != nil {
		m.log.Warn("what a paused sandbox let go of left", "sandbox", id, "err", err)
	}
	if _, err := m.deps.Store.Unhold(ctx, rec, "", reason); err != nil {
		// Deleted meanwhile, or the store is unreachable: a restart
		// finds it gone and lets go of it then (reconcile).
		return err
	}
	m.log.Info("paused sandbox let go: it wakes on another node", "sandbox", id, "snapshot", rec.Paused.Snapshot)
	return nil
}

// moveAway drains one sandbox (Drain).
func (m *Manager) moveAway(ctx context.Context, id string, l *live, reason string) error {
	ctx = context.WithoutCancel(ctx)
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if rec.WorkspaceMB > 0 || rec.State != api.StateRunning {
		return fmt.Errorf("it stays: it is %s, with a %d MB workspace disk", rec.State, rec.WorkspaceMB)
	}
	src, mountpoint, err := m.snapshotSource(rec, api.ScopeRoot)
	if err != nil {
		return err
	}
	m.mu.Lock()
	if l.deleting || l.paused || m.live[id] != l {
		m.mu.Unlock()
		return errors.New("it is being deleted or paused")
	}
	l.deleting = true // the drain owns it: its exit is no failure
	delete(m.live, id)
	m.mu.Unlock()
	if alwaysOn(&rec) {
		return m.moveVolumeAway(ctx, id, l, mountpoint, reason)
	}
	sn, stopped, err := m.finalSnapshot(ctx, src, mountpoint, l)
	if err != nil && !stopped {
		// Refused before anything stopped it: it runs on here.
		m.mu.Lock()
		l.deleting = false
		m.live[id] = l
		m.mu.Unlock()
		return fmt.Errorf("final snapshot: %w", err)
	}
	if err != nil {
		// It keeps its disk, as a sandbox that failed does: a snapshot of
		// it saves its work.
		m.teardown(ctx, id, nil, api.StateFailed, "its node was drained and its final snapshot failed")
		return fmt.Errorf("final snapshot: %w", err)
	}
	// A checkpoint may have landed while the final snapshot was taken:
	// the move is made on the record as it is now, and replaces that.
	none := ""
	at := sn.CreatedAt
	if rec, err = m.deps.Store.GetSandbox(ctx, id); err == nil {
		_, err = m.deps.Store.Transition(ctx, id, store.Transition{
			From: []string{api.StateRunning}, Version: rec.Version, To: api.StateMoving, Node: &none, Error: reason,
			Checkpoint: &api.Checkpoint{Snapshot: sn.ID, At: at},
			Restored:   &api.Restored{Snapshot: sn.ID, SnapshotAt: at, Reason: reason, From: m.deps.NodeID},
		})
	}
	if err != nil {
		// Deleted meanwhile (or the store is unreachable): it stopped.
		m.teardown(ctx, id, nil, api.StateStopped, reason)
		m.dropCheckpoint(ctx, rec.Tenant, sn.ID)
		return err
	}
	m.dropCheckpoint(ctx, rec.Tenant, rec.Checkpoint)
	m.log.Info("sandbox drained", "sandbox", id, "snapshot", sn.ID)
	return m.release(ctx, id, nil, false)
}

// finalSnapshot takes the last snapshot of sandbox l's disk src, mounted
// at mountpoint, which the caller owns (out of the live map): its
// filesystem frozen and the sandbox stopped before the thaw, so nothing it
// writes after the snapshot is acknowledged; then it waits until the
// snapshot is durable. stopped says whether the sandbox stopped: an error
// before it did leaves it running.
func (m *Manager) finalSnapshot(ctx context.Context, src snapshot.Source, mountpoint string, l *live) (_ store.Snapshot, stopped bool, _ error) {
	freeze := func(ctx context.Context) (func() error, error) {
		thaw, err := l.inst.Freeze(ctx, mountpoint)
		if err != nil {
			return nil, err
		}
		return func() error {
			stopped = true
			return stopThenThaw(ctx, l, thaw)
		}, nil
	}
	sn, err := m.deps.Snapshots.Take(ctx, src, freeze)
	if err != nil && !stopped {
		return sn, false, err
	}
	l.conn.Close()
	if err != nil {
		return sn, true, err
	}
	sn, err = m.durable(ctx, sn)
	return sn, true, err
}

// durable waits until snapshot sn is durable: an error when it failed, or
// did not get there within defaultSnapshotWait.
func (m *Manager) durable(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	wctx, cancel := context.WithTimeout(ctx, defaultSnapshotWait)
	defer cancel()
	sn, err := m.deps.Snapshots.Wait(wctx, sn.ID)
	if err == nil && sn.State != api.SnapshotDurable {
		err = errors.New(sn.Error)
	}
	return sn, err
}

// moveVolumeAway drains always-on sandbox id, which the drain owns: its
// filesystem frozen, its volume flushed, the sandbox stopped before the
// thaw (nothing written after the flush is acknowledged), the volume
// handed over in the tiers, and its record moved, for another node to
// start it with its volume (startMovedVolume).
func (m *Manager) moveVolumeAway(ctx context.Context, id string, l *live, mountpoint, reason string) error {
	thaw, err := l.inst.Freeze(ctx, mountpoint)
	if err != nil {
		// Refused before anything stopped it: it runs on here.
		m.mu.Lock()
		l.deleting = false
		m.live[id] = l
		m.mu.Unlock()
		return fmt.Errorf("freeze: %w", err)
	}
	c, err := m.deps.Blocks.Client(ctx)
	if err == nil {
		_, err = c.Flush(ctx, id)
	}
	err = errors.Join(err, stopThenThaw(ctx, l, thaw))
	l.conn.Close()
	if err == nil {
		err = m.dropVolume(ctx, id, true)
	}
	if err != nil {
		// Its volume stays on the node, as a failed sandbox's disk does.
		m.teardown(ctx, id, nil, api.StateFailed, "its node was drained and its disk's final flush failed")
		return fmt.Errorf("final flush: %w", err)
	}
	none := ""
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if err == nil {
		_, err = m.deps.Store.Transition(ctx, id, store.Transition{
			From: []string{api.StateRunning}, Version: rec.Version, To: api.StateMoving, Node: &none, Error: reason,
			Restored: &api.Restored{Snapshot: id, Reason: reason, From: m.deps.NodeID},
		})
	}
	if err != nil {
		// Deleted meanwhile (or the store is unreachable): it stopped.
		m.teardown(ctx, id, nil, api.StateStopped, reason)
		return err
	}
	m.log.Info("always-on sandbox drained", "sandbox", id)
	return m.release(ctx, id, nil, false)
}

// stopThenThaw stops a sandbox whose filesystem is frozen, then thaws it:
// first the stop, for up to drainStopWait (a vm stops at once; a container
// process blocked on the frozen filesystem ends only after the thaw, and
// never sees its write return).
func stopThenThaw(ctx context.Context, l *live, thaw func() error) error {
	stopped := make(chan error, 1)
	go func() { stopped <- l.inst.Stop(ctx) }()
	select {
	case err := <-stopped:
		thaw() // nothing runs that could see it, nor may be: a vm's agent is gone
		return err
	case <-time.After(drainStopWait):
	}
	terr := thaw()
	return errors.Join(<-stopped, terr)
}
