package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
	"warren/internal/runtime"
	"warren/internal/store"
)

// Pause stops a running sandbox with its memory (a runtime that implements
// runtime.Pauser: vm and gvisor); its processes carry on from where they
// were at Resume. CodeConflict for a sandbox that is not
// running or whose runtime cannot pause.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	p, ok := l.inst.(runtime.Pauser)
	if !ok {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s runs in the %s runtime, which cannot pause with memory (vm and gvisor sandboxes can)", id, l.rt.Name())
	}
	l.op.Lock()
	defer l.op.Unlock()
	m.mu.Lock()
	switch {
	case l.deleting:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is being deleted", id)
	case l.paused:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is paused", id)
	}
	l.paused = true // no new agent calls from here on
	m.mu.Unlock()

	// A caller that leaves must not leave a half-paused sandbox.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	t0 := time.Now()
	if err := p.Pause(pctx); err != nil {
		m.mu.Lock()
		l.paused = false
		m.mu.Unlock()
		return api.Sandbox{}, m.failedOp(l, id, "pause", err)
	}
	took := time.Since(t0)
	rec, err := m.setState(ctx, l, id, api.StatePaused)
	if err != nil {
		return api.Sandbox{}, err
	}
	m.log.Info("sandbox paused", "sandbox", id, "memory_mb", rec.MemoryMB, "took", took)
	return m.view(rec), nil
}

// Resume runs a paused sandbox again from its saved memory. CodeConflict for
// a sandbox that is not paused. If the runtime fails before the guest ran
// again the sandbox stays paused; else it is lost (marked failed).
func (m *Manager) Resume(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	l, err := m.alive(ctx, tenant, id, api.StatePaused)
	if err != nil {
		return api.Sandbox{}, err
	}
	p, ok := l.inst.(runtime.Pauser)
	if !ok {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is not paused (state %s)", id, api.StateRunning)
	}
	l.op.Lock()
	defer l.op.Unlock()
	m.mu.Lock()
	switch {
	case l.deleting:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is being deleted", id)
	case !l.paused:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is not paused (state %s)", id, api.StateRunning)
	}
	m.mu.Unlock()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	t0 := time.Now()
	if err := p.Resume(rctx); err != nil {
		return api.Sandbox{}, m.failedOp(l, id, "resume", err)
	}
	took := time.Since(t0)
	m.mu.Lock()
	l.paused = false
	m.mu.Unlock()
	rec, err := m.setState(ctx, l, id, api.StateRunning)
	if err != nil {
		return api.Sandbox{}, err
	}
	if err := m.wake(rctx, l, rec); err != nil {
		return api.Sandbox{}, m.failedOp(l, id, "resume", err)
	}
	m.log.Info("sandbox resumed", "sandbox", id, "memory_mb", rec.MemoryMB, "took", took)
	return m.view(rec), nil
}

// wake steps the clock of sandbox l (rec), which stood still while its
// machine was paused or held, to the host's, when it keeps a clock of its
// own. Its identity is sent as it was, and its agent keeps it.
func (m *Manager) wake(ctx context.Context, l *live, rec store.Sandbox) error {
	if !ownsClock(l.inst) {
		return nil
	}
	init := &controlpb.InitRequest{SandboxId: rec.ID, Hostname: rec.ID, Envs: rec.Env}
	if err := initAgent(ctx, l.inst, l.conn, init); err != nil {
		return fmt.Errorf("set the clock of sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// failedOp is the answer to a pause or resume (op) whose runtime call
// failed with err: a 409 when a delete stopped the sandbox meanwhile, else
// err.
func (m *Manager) failedOp(l *live, id, op string, err error) error {
	m.mu.Lock()
	deleting := l.deleting
	m.mu.Unlock()
	if deleting {
		return api.Errorf(api.CodeConflict, "sandbox %s is being deleted", id)
	}
	m.log.Warn("sandbox "+op+" failed", "sandbox", id, "err", err)
	return fmt.Errorf("%s sandbox %s: %w", op, id, err)
}

// pauseTimeout bounds a pause or a resume (a memory save or load under TCG
// takes seconds per GiB).
const pauseTimeout = 2 * time.Minute

// setState moves a live sandbox between running and paused, recording its
// runtime state. A teardown that got there first wins: the move is refused
// and the record says how the sandbox ended.
func (m *Manager) setState(ctx context.Context, l *live, id, state string) (store.Sandbox, error) {
	from := api.StateRunning
	if state == api.StateRunning {
		from = api.StatePaused
	}
	rec, err := m.deps.Store.Transition(context.WithoutCancel(ctx), id, store.Transition{
		From: []string{from}, To: state, RuntimeState: l.inst.State(),
	})
	if errors.Is(err, store.ErrTransition) {
		return rec, nil
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("record sandbox %s %s: %w", id, state, err)
	}
	return rec, nil
}
