package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"warren/api"
	"warren/internal/runtime"
	"warren/internal/store"
)

// watch marks a sandbox failed when its init exits without Delete asking.
func (m *Manager) watch(id string, l *live) {
	<-l.inst.Done()
	m.mu.Lock()
	if l.deleting || l.stopping || m.live[id] != l {
		m.mu.Unlock()
		return
	}
	l.deleting = true
	delete(m.live, id)
	m.mu.Unlock()
	reason := "the sandbox's init (guest agent) exited"
	if e, ok := l.inst.(runtime.Explainer); ok && e.ExitReason() != "" {
		reason = e.ExitReason()
	}
	m.log.Warn("sandbox exited on its own", "sandbox", id, "reason", reason)
	m.teardown(context.Background(), id, l, api.StateFailed, reason)
}

// teardown stops the sandbox, removes its directory and records the final
// state; a stopped one's checkpoint goes too. Its disks go too, except when a sandbox that ran fails (its agent
// died, or it could not be adopted after a restart): those stay until its
// owner deletes it or its expiry passes (dropDisks), so that a crash never
// loses the user's work, which a snapshot of the failed sandbox saves.
func (m *Manager) teardown(ctx context.Context, id string, l *live, state, reason string) error {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	keep := err == nil && state == api.StateFailed && (rec.State == api.StateRunning || rec.State == api.StatePaused) &&
		rec.ExpiresAt.After(time.Now())
	expires := rec.ExpiresAt
	errs := []error{m.release(ctx, id, l, keep)}
	if keep {
		m.ledger.restore(id, diskClaim(rec))
		reason += fmt.Sprintf("; its disk is kept until %s (or until it is deleted): snapshot it to save its work",
			rec.ExpiresAt.UTC().Format(time.RFC3339))
	} else {
		expires = time.Time{}
	}
	if err == nil && !slices.Contains(store.Live, rec.State) {
		return errors.Join(errs...) // already final: another teardown recorded how it ended
	}
	if err == nil {
		// From any live state: the end wins over a pause or resume that
		// moved the record since it was read, and over a timeout.
		var ended store.Sandbox
		ended, err = m.deps.Store.Transition(ctx, id, store.Transition{
			From: store.Live, To: state, Error: reason, Expires: &expires,
		})
		if err == nil && state == api.StateStopped {
			m.dropCheckpoints(ctx, ended, rec.Paused) // they go with their sandbox
		}
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		m.log.Error("sandbox teardown", "sandbox", id, "err", err)
		return err
	}
	return nil
}

// release stops the sandbox (l nil: it runs nowhere) and frees what the
// node holds for it: its claim, directory and router, and its disks unless
// keepDisks. It records nothing.
func (m *Manager) release(ctx context.Context, id string, l *live, keepDisks bool) error {
	m.ledger.release(id)
	var errs []error
	if l != nil {
		l.conn.Close()
		errs = append(errs, l.inst.Stop(ctx))
	}
	if !keepDisks {
		errs = append(errs, m.removeDisks(id))
	}
	if err := os.RemoveAll(m.stateDir(id)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, m.detachNetwork(id))
	return errors.Join(errs...)
}

// Fence stops every sandbox the node runs and frees all it holds for them,
// disks included, and records nothing: the node has lost its lease in the
// fleet (it was fenced, or could not renew it), so its sandboxes' records
// are no longer its own, and another node may run them now from their
// last snapshot under the same IDs.
func (m *Manager) Fence(ctx context.Context) {
	m.mu.Lock()
	var gone []string
	ls := map[string]*live{}
	for id, l := range m.live {
		if !l.deleting {
			l.deleting = true
			ls[id] = l
			gone = append(gone, id)
		}
		delete(m.live, id)
	}
	m.mu.Unlock()
	for id, l := range ls {
		// Another node takes its always-on disk from the tiers.
		if m.isVolume(id) {
			if err := m.dropVolume(context.WithoutCancel(ctx), id, true); err != nil {
				m.log.Error("fenced sandbox's always-on disk not handed over", "sandbox", id, "err", err)
			}
		}
		if err := m.release(context.WithoutCancel(ctx), id, l, false); err != nil {
			m.log.Error("fenced sandbox not released", "sandbox", id, "err", err)
		}
	}
	m.log.Warn("fenced: stopped every sandbox of the node", "sandboxes", gone)
}

// keepsDisks says whether an ended sandbox still holds its disks: it
// failed after it ran, and its expiry has not passed (teardown clears the
// expiry of every other ended sandbox, and dropDisks of this one).
func keepsDisks(rec store.Sandbox) bool {
	return rec.State == api.StateFailed && !rec.ExpiresAt.IsZero()
}

// diskClaim is what a failed sandbox that keeps its disks holds of the node.
func diskClaim(rec store.Sandbox) claim {
	return claim{tenant: rec.Tenant, diskMB: rec.DiskMB + rec.WorkspaceMB}
}

// removeDisks removes a sandbox's disk images: an always-on disk goes from
// the block server and its tiers.
func (m *Manager) removeDisks(id string) error {
	var errs []error
	if m.isVolume(id) {
		errs = append(errs, m.dropVolume(context.Background(), id, false))
	}
	for _, p := range []string{m.diskPath(id), m.workspacePath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropDisks removes the disks a failed sandbox kept (teardown), and records
// that it keeps none: no expiry.
func (m *Manager) dropDisks(ctx context.Context, rec store.Sandbox) error {
	err := m.removeDisks(rec.ID)
	m.ledger.release(rec.ID)
	if err == nil {
		_, err = m.deps.Store.SetExpiry(ctx, rec.ID, time.Time{}, api.StateFailed)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("drop disks of failed sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// Delete kills the sandbox and removes its disk. Deleting an ended sandbox
// forgets its record.
func (m *Manager) Delete(ctx context.Context, tenant, id string) error {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return err
	}
	if keepsDisks(rec) {
		if err := m.dropDisks(ctx, rec); err != nil {
			return err
		}
	}
	if rec.State == api.StateStopped || rec.State == api.StateFailed {
		return m.deps.Store.DeleteSandbox(ctx, id)
	}
	return m.kill(ctx, id, "deleted")
}

// kill tears down a running sandbox and records it stopped. A sandbox
// still starting is only moved to stopped: its create (or wake) owns what
// it has made so far and unwinds it when its own move to running is
// refused. A moving one, and a paused one no node holds, are only moved to
// stopped: nothing runs them. Its checkpoint (a paused one's pause
// snapshot) goes with it.
func (m *Manager) kill(ctx context.Context, id, reason string) error {
	// A cancelled request must not leave a sandbox half torn down.
	ctx = context.WithoutCancel(ctx)
	for {
		m.mu.Lock()
		l := m.live[id]
		if l != nil {
			if l.deleting {
				m.mu.Unlock()
				return nil // someone else is tearing it down
			}
			l.deleting = true
			delete(m.live, id)
		}
		m.mu.Unlock()
		if l == nil {
			rec, err := m.deps.Store.GetSandbox(ctx, id)
			if err != nil {
				return fmt.Errorf("delete sandbox %s: %w", id, err)
			}
			switch {
			case rec.State == api.StateStarting || rec.State == api.StateMoving || (rec.State == api.StatePaused && !rec.Held()):
				none := time.Time{}
				ended, err := m.deps.Store.Transition(ctx, id, store.Transition{
					From: []string{rec.State}, Version: rec.Version, To: api.StateStopped, Error: reason, Expires: &none,
				})
				switch {
				case errors.Is(err, store.ErrTransition):
					continue // it moved on meanwhile: look again
				case err != nil:
					return fmt.Errorf("delete sandbox %s: %w", id, err)
				}
				m.log.Info("sandbox stopped while it was starting, moving or asleep", "sandbox", id, "reason", reason)
				m.dropCheckpoints(ctx, ended, rec.Paused)
				return nil
			case (rec.State == api.StateRunning || rec.State == api.StatePaused) && rec.Node != m.deps.NodeID:
				// A request sent to the wrong node (a fleet's front that
				// knew no better): the node that runs it must answer.
				return api.Errorf(api.CodeConflict, "sandbox %s runs on node %s, not on this one (%s): retry", id, rec.Node, m.deps.NodeID)
			case rec.State == api.StateRunning || rec.State == api.StatePaused:
				continue // its create has just made it live
			}
		}
		if err := m.teardown(ctx, id, l, api.StateStopped, reason); err != nil {
			return fmt.Errorf("delete sandbox %s: %w", id, err)
		}
		m.log.Info("sandbox stopped", "sandbox", id, "reason", reason)
		return nil
	}
}

// SetTimeout makes the sandbox expire timeout from now, and gives it that
// timeout again each time it wakes; a paused sandbox keeps its paused TTL
// while it sleeps.
func (m *Manager) SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (api.Sandbox, error) {
	if timeout < time.Second || timeout > m.cfg.MaxTTL {
		return api.Sandbox{}, api.Errorf(api.CodeBadRequest, "timeout_seconds must be between 1 and %d", int64(m.cfg.MaxTTL/time.Second))
	}
	var rec store.Sandbox
	var err error
	for range 3 {
		if rec, err = m.record(ctx, tenant, id); err != nil {
			return api.Sandbox{}, err // not found, or another tenant's
		}
		rec, err = m.deps.Store.SetTimeout(ctx, rec, timeout, time.Now().Add(timeout))
		if !errors.Is(err, store.ErrTransition) || !slices.Contains(store.Live, rec.State) {
			break // done, or it ended; else it changed meanwhile: again
		}
	}
	if errors.Is(err, store.ErrTransition) {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is %s", id, rec.State)
	}
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("set timeout: %w", err)
	}
	return m.view(rec), nil
}

// reap deletes expired sandboxes and forgets old ended ones, old
// idempotency keys and events past their window, until ctx ends.
func (m *Manager) reap(ctx context.Context) {
	defer m.loops.Done()
	tick(ctx, m.cfg.ReapEvery, func() {
		now := time.Now()
		expired, err := m.deps.Store.ExpiredSandboxes(ctx, m.deps.NodeID, now)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error("find expired sandboxes", "err", err)
			}
			return
		}
		for _, rec := range expired {
			switch {
			case rec.State == api.StateStarting:
				continue // Create owns it until it runs or fails
			case keepsDisks(rec):
				if err := m.dropDisks(ctx, rec); err != nil {
					m.log.Error("expire failed sandbox", "sandbox", rec.ID, "err", err)
				}
			case rec.State == api.StatePaused:
				m.kill(ctx, rec.ID, "its paused TTL passed")
			default:
				m.timeOut(ctx, rec.ID, "its timeout passed")
			}
		}
		for id, idle := range m.idle(now) {
			m.timeOut(ctx, id, fmt.Sprintf("idle for %s", idle.Round(time.Second)))
		}
		if _, err := m.deps.Store.PurgeFinal(ctx, now.Add(-m.cfg.KeepFinal)); err != nil && ctx.Err() == nil {
			m.log.Error("purge ended sandboxes", "err", err)
		}
		if _, err := m.deps.Store.PurgeRequests(ctx, now.Add(-store.RequestsKept)); err != nil && ctx.Err() == nil {
			m.log.Error("purge idempotency keys", "err", err)
		}
		if _, err := m.deps.Store.TrimEvents(ctx, now.Add(-m.cfg.EventsWindow), m.cfg.EventsKept); err != nil && ctx.Err() == nil {
			m.log.Error("trim events", "err", err)
		}
	})
}

// idle returns this node's running sandboxes whose idle timeout has
// passed at now, and how long each has been idle.
func (m *Manager) idle(now time.Time) map[string]time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]time.Duration{}
	for id, l := range m.live {
		limit := time.Duration(l.lifecycle.IdleTimeoutSeconds) * time.Second
		if limit == 0 || l.paused || l.deleting || l.timingOut {
			continue
		}
		if idle := l.used.idle(now); idle >= limit {
			out[id] = idle
		}
	}
	return out
}

// timeOut does what running sandbox id's lifecycle says its timeout does,
// for reason (its timeout, or idleness): pauses it, in the background,
// or deletes it. A pause that fails leaves it running for a minute more,
// when its timeout comes again.
func (m *Manager) timeOut(ctx context.Context, id, reason string) {
	m.mu.Lock()
	l := m.live[id]
	if l == nil || l.lifecycle.OnTimeout != api.OnTimeoutPause {
		m.mu.Unlock()
		m.kill(ctx, id, reason)
		return
	}
	if l.timingOut || l.paused || l.deleting {
		m.mu.Unlock()
		return
	}
	l.timingOut = true
	m.mu.Unlock()
	m.loops.Go(func() {
		defer func() {
			m.mu.Lock()
			l.timingOut = false
			m.mu.Unlock()
		}()
		_, err := m.pause(ctx, id, l, api.Paused{Reason: reason, Auto: true})
		if err == nil || api.IsCode(err, api.CodeConflict) && m.gone(id, l) {
			return
		}
		m.log.Warn("sandbox not paused at its timeout; it runs a minute more", "sandbox", id, "reason", reason, "err", err)
		l.used.touch() // and its idleness counts from now
		if _, err := m.deps.Store.SetExpiry(ctx, id, time.Now().Add(time.Minute), api.StateRunning); err != nil && !errors.Is(err, store.ErrTransition) {
			m.log.Error("extend a sandbox whose pause failed", "sandbox", id, "err", err)
		}
	})
}

// gone says whether l is no longer sandbox id's live instance.
func (m *Manager) gone(id string, l *live) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id] != l || l.deleting
}

// tick calls fn every period until ctx ends: the manager's loops.
func tick(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
