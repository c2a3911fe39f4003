package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
	"warren/internal/ident"
	"warren/internal/metrics"
	"warren/internal/reqid"
	"warren/internal/runtime"
	"warren/internal/snapshot"
	"warren/internal/store"
)

// Sleep and wake (docs/API.md, "Pause, sleep and wake"). Every pause is
// durable: the sandbox's root disk reaches the blob store as a snapshot,
// recorded as its checkpoint, before the pause is done, so a paused
// sandbox wakes under its ID with its files, on its node or on any other.
// A runtime with memory checkpoints (runtime.Pauser: vm, gvisor) keeps its
// processes too, held on its node, and resumes them where they were; a
// container stops, the node lets go of it, and it wakes from its disk with
// its processes started again, which its record says (api.Paused.Memory).

// Pause pauses a running sandbox at its owner's request.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return m.pause(ctx, id, l, api.Paused{Reason: "requested"})
}

// pause pauses sandbox id (l) for why: its Reason, and Auto when its
// lifecycle asks.
func (m *Manager) pause(ctx context.Context, id string, l *live, why api.Paused) (api.Sandbox, error) {
	l.op.Lock()
	defer l.op.Unlock()
	m.mu.Lock()
	switch {
	case l.deleting || m.live[id] != l:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is being deleted", id)
	case l.paused:
		m.mu.Unlock()
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is paused", id)
	}
	l.paused = true // no new agent calls from here on
	m.mu.Unlock()
	// A caller that leaves must not leave a half-paused sandbox.
	ctx = context.WithoutCancel(ctx)
	t0 := time.Now()
	rec, err := m.pauseDurably(ctx, id, l, why)
	if err != nil {
		m.mu.Lock()
		if m.live[id] == l {
			l.paused = false
		}
		m.mu.Unlock()
		return api.Sandbox{}, err
	}
	m.observe(metrics.OpPause, t0)
	m.log.Info("sandbox paused", "sandbox", id, "memory", rec.Paused.Memory, "snapshot", rec.Paused.Snapshot,
		"auto", why.Auto, "reason", why.Reason, "took", time.Since(t0))
	return m.view(rec), nil
}

// pauseDurably pauses sandbox id (l, flagged paused): with its memory when
// its runtime can, else by a final snapshot and a stop. An error leaves it
// running, unless it says the sandbox was lost.
func (m *Manager) pauseDurably(ctx context.Context, id string, l *live, why api.Paused) (store.Sandbox, error) {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	if alwaysOn(&rec) {
		return store.Sandbox{}, api.Errorf(api.CodeConflict,
			"sandbox %s has an always-on disk, whose every flushed write is kept already: it cannot pause", id)
	}
	src, mountpoint, err := m.snapshotSource(rec, api.ScopeRoot)
	if err != nil {
		return store.Sandbox{}, err
	}
	why.At = time.Now()
	if p, ok := l.inst.(runtime.Pauser); ok {
		return m.pauseHeld(ctx, id, l, p, rec, src, mountpoint, why)
	}
	return m.pauseStopped(ctx, id, l, rec, src, mountpoint, why)
}

// takeWorkspace takes a snapshot of sandbox rec's workspace disk, if it
// has one, with quiesce readying it (a Quiesce, or nothing for a disk
// frozen already); its upload goes on (the zero snapshot for none).
func (m *Manager) takeWorkspace(ctx context.Context, rec store.Sandbox, quiesce snapshot.Quiesce) (store.Snapshot, error) {
	if rec.WorkspaceMB == 0 {
		return store.Snapshot{}, nil
	}
	src, _, err := m.snapshotSource(rec, api.ScopeWorkspace)
	if err == nil {
		var sn store.Snapshot
		if sn, err = m.deps.Snapshots.Take(ctx, src, quiesce); err == nil {
			return sn, nil
		}
	}
	return store.Snapshot{}, fmt.Errorf("its workspace snapshot: %w", err)
}

// durableWorkspace waits until workspace snapshot ws (none when zero) is
// durable.
func (m *Manager) durableWorkspace(ctx context.Context, ws store.Snapshot) error {
	if ws.ID == "" {
		return nil
	}
	if _, err := m.durable(ctx, ws); err != nil {
		return fmt.Errorf("its workspace snapshot: %w", err)
	}
	return nil
}

// pauseHeld pauses sandbox id with its memory: its runtime pauses it,
// its memory saved to an image and its disks synced, nothing running;
// then its disks are snapshotted and its image stored, and the pause is
// recorded once all are durable. What does not get there resumes it: a
// pause that is not durable is none.
func (m *Manager) pauseHeld(ctx context.Context, id string, l *live, p runtime.Pauser, rec store.Sandbox,
	src snapshot.Source, mountpoint string, why api.Paused) (store.Sandbox, error) {
	pctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	t0 := time.Now()
	if err := p.Pause(pctx); err != nil {
		return store.Sandbox{}, m.failedOp(l, id, "pause", err)
	}
	tPause := time.Now()
	// Its disks are what its memory image expects: nothing to quiesce.
	still := func(context.Context) (func() error, error) { return func() error { return nil }, nil }
	var sn store.Snapshot
	var image snapshot.MemoryImage
	ws, err := m.takeWorkspace(ctx, rec, still)
	if err == nil {
		if sn, err = m.deps.Snapshots.Take(ctx, src, still); err != nil {
			err = fmt.Errorf("its disk snapshot: %w", err)
		}
	}
	tDisks := time.Now()
	if err == nil {
		image, err = m.storeImage(ctx, rec, p) // while the disks upload
	}
	tImage := time.Now()
	if err == nil {
		if sn, err = m.durable(ctx, sn); err != nil {
			err = fmt.Errorf("its disk snapshot: %w", err)
		}
	}
	if err == nil {
		err = m.durableWorkspace(ctx, ws)
	}
	why.Memory, why.Snapshot, why.Workspace, why.Image = true, sn.ID, ws.ID, image.ID
	if err != nil {
		m.dropCheckpoint(ctx, rec.Tenant, sn.ID)
		m.dropSlept(ctx, rec.Tenant, &why)
		if rerr := p.Resume(pctx); rerr != nil {
			if m.gone(id, l) {
				return store.Sandbox{}, m.failedOp(l, id, "pause", rerr)
			}
			m.lost(ctx, id, l, "its pause failed and it could not run again")
			return store.Sandbox{}, fmt.Errorf("pause sandbox %s: %w; resume: %w", id, err, rerr)
		}
		return store.Sandbox{}, m.failedOp(l, id, "pause", fmt.Errorf("%w: not durable, so it runs on", err))
	}
	m.log.Debug("sandbox pause timings", "sandbox", id, "runtime", tPause.Sub(t0), "disks", tDisks.Sub(tPause),
		"image", tImage.Sub(tDisks), "durable", time.Since(tImage), "image_bytes", image.Bytes, "image_stored", image.Stored)
	return m.recordPaused(ctx, rec, sn, why, l.inst.State())
}

// storeImage stores the memory image paused instance p (of sandbox rec)
// left, for a wake on another node, and returns it once it is durable;
// none (the zero image) when its runtime cannot tell its images' format,
// and its memory is then held on this node only.
func (m *Manager) storeImage(ctx context.Context, rec store.Sandbox, p runtime.Pauser) (snapshot.MemoryImage, error) {
	r, ok := m.runtimeNamed(rec.Runtime).(runtime.Restorer)
	path := p.Image()
	if !ok || path == "" || r.ImageFormat() == "" {
		return snapshot.MemoryImage{}, nil
	}
	image, err := m.deps.Snapshots.PutImage(ctx, rec.Tenant, r.ImageFormat(), path)
	if err != nil {
		return snapshot.MemoryImage{}, fmt.Errorf("its memory image: %w", err)
	}
	return image, nil
}

// pauseStopped pauses sandbox id, whose runtime keeps no memory, by a
// final snapshot (frozen, then stopped) and lets go of it: it holds
// nothing of the node while it sleeps.
func (m *Manager) pauseStopped(ctx context.Context, id string, l *live, rec store.Sandbox,
	src snapshot.Source, mountpoint string, why api.Paused) (store.Sandbox, error) {
	// Its workspace, if any, is frozen from its snapshot until the
	// sandbox stops, as its root is by the final snapshot.
	thawWorkspace := func() error { return nil }
	if rec.WorkspaceMB > 0 {
		thaw, err := l.inst.Freeze(ctx, "/workspace")
		if err != nil {
			return store.Sandbox{}, m.failedOp(l, id, "pause", fmt.Errorf("freeze its workspace: %w", err))
		}
		thawWorkspace = thaw
	}
	ws, err := m.takeWorkspace(ctx, rec, func(context.Context) (func() error, error) {
		return func() error { return nil }, nil
	})
	if err != nil {
		thawWorkspace()
		return store.Sandbox{}, m.failedOp(l, id, "pause", err)
	}
	m.mu.Lock()
	l.stopping = true
	m.mu.Unlock()
	sn, stopped, err := m.finalSnapshot(ctx, src, mountpoint, l)
	if terr := thawWorkspace(); terr != nil && !stopped {
		err = errors.Join(err, terr)
	}
	if err != nil && !stopped {
		m.mu.Lock()
		l.stopping = false
		m.mu.Unlock()
		m.dropCheckpoint(ctx, rec.Tenant, ws.ID)
		return store.Sandbox{}, m.failedOp(l, id, "pause", fmt.Errorf("its disk snapshot: %w", err))
	}
	if err == nil {
		err = m.durableWorkspace(ctx, ws)
	}
	if err != nil {
		m.dropCheckpoint(ctx, rec.Tenant, ws.ID)
		if m.gone(id, l) {
			return store.Sandbox{}, m.failedOp(l, id, "pause", err)
		}
		m.lost(ctx, id, l, "its pause stopped it and its disk snapshot failed")
		return store.Sandbox{}, fmt.Errorf("pause sandbox %s: its disk snapshot: %w", id, err)
	}
	why.Snapshot, why.Workspace = sn.ID, ws.ID
	paused, err := m.recordPaused(ctx, rec, sn, why, nil)
	if err == nil {
		// Before it leaves the live map: a call that wakes it meanwhile
		// waits for this pause (l.op), then finds it gone.
		if err := m.release(ctx, id, nil, false); err != nil {
			m.log.Warn("what a paused sandbox left on the node", "sandbox", id, "err", err)
		}
	}
	m.mu.Lock()
	if m.live[id] == l {
		delete(m.live, id)
	}
	m.mu.Unlock()
	if err != nil {
		return store.Sandbox{}, err // a delete won, and tore it down
	}
	return paused, nil
}

// lost ends sandbox id (l) that a pause left unable to run: it failed,
// keeping its disk (teardown) for a snapshot to save its work.
func (m *Manager) lost(ctx context.Context, id string, l *live, reason string) {
	m.mu.Lock()
	l.deleting = true
	if m.live[id] == l {
		delete(m.live, id)
	}
	m.mu.Unlock()
	m.teardown(ctx, id, l, api.StateFailed, reason)
}

// recordPaused moves sandbox rec, running, to paused with its durable
// snapshot sn as its checkpoint (the one before it goes) and runtime
// state state (nil: no node holds it). A delete that got there first wins:
// the snapshot goes, and the answer is a conflict.
func (m *Manager) recordPaused(ctx context.Context, rec store.Sandbox, sn store.Snapshot, why api.Paused, state []byte) (store.Sandbox, error) {
	expires := time.Now().Add(time.Duration(rec.Lifecycle.PausedTTLSeconds) * time.Second)
	if rec.Lifecycle.PausedTTLSeconds == 0 {
		expires = time.Now().Add(m.cfg.DefaultPausedTTL)
	}
	paused, err := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StateRunning}, To: api.StatePaused, RuntimeState: state, Expires: &expires,
		Paused: &why, Checkpoint: &api.Checkpoint{Snapshot: sn.ID, At: sn.CreatedAt},
	})
	if err != nil {
		m.dropCheckpoint(ctx, rec.Tenant, sn.ID)
		m.dropSlept(ctx, rec.Tenant, &why)
		if errors.Is(err, store.ErrTransition) {
			return store.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is %s: it was deleted while it paused", rec.ID, paused.State)
		}
		return store.Sandbox{}, fmt.Errorf("record sandbox %s paused: %w", rec.ID, err)
	}
	if rec.Checkpoint != sn.ID {
		m.dropCheckpoint(ctx, rec.Tenant, rec.Checkpoint)
	}
	return paused, nil
}

// Resume wakes a paused sandbox at its owner's request.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return m.resume(ctx, tenant, id, store.Cause{Reason: "requested"})
}

// resume wakes paused sandbox id for cause: in place when this node holds
// it, else from its pause snapshot, here. Calls at once wait for one wake.
// CodeConflict for a sandbox that is not paused, or sleeps held by
// another node.
func (m *Manager) resume(ctx context.Context, tenant, id string, cause store.Cause) (api.Sandbox, error) {
	// A caller that leaves must not leave a half-woken sandbox.
	ctx = context.WithoutCancel(ctx)
	for range 3 {
		m.mu.Lock()
		l := m.live[id]
		ok := l != nil && l.tenant == tenant && !l.deleting
		m.mu.Unlock()
		if ok {
			sb, again, err := m.resumeHeld(ctx, id, l, cause)
			if again {
				continue // a pause let go of it meanwhile
			}
			return sb, err
		}
		rec, err := m.record(ctx, tenant, id)
		if err != nil {
			return api.Sandbox{}, err
		}
		switch {
		case rec.State != api.StatePaused:
			return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is not paused (state %s)", id, rec.State)
		case rec.Held() || (rec.Node != "" && rec.Node != m.deps.NodeID):
			return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s sleeps on node %s, not on this one (%s): retry", id, rec.Node, m.deps.NodeID)
		}
		sb, err := m.wakeOnce(ctx, rec, cause)
		if errors.Is(err, store.ErrTransition) {
			continue // its record moved on meanwhile: read it again
		}
		return sb, err
	}
	return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s changed while it was woken: retry", id)
}

// resumeHeld resumes sandbox id, which this node holds (l), in place;
// again says l is no longer the sandbox (a pause without memory let go of
// it) and the caller should look again.
func (m *Manager) resumeHeld(ctx context.Context, id string, l *live, cause store.Cause) (_ api.Sandbox, again bool, _ error) {
	l.op.Lock()
	defer l.op.Unlock()
	m.mu.Lock()
	gone, deleting, paused := m.live[id] != l, l.deleting, l.paused
	m.mu.Unlock()
	switch {
	case gone && !deleting:
		return api.Sandbox{}, true, nil
	case deleting:
		return api.Sandbox{}, false, api.Errorf(api.CodeConflict, "sandbox %s is being deleted", id)
	case !paused:
		return api.Sandbox{}, false, api.Errorf(api.CodeConflict, "sandbox %s is not paused (state %s)", id, api.StateRunning)
	}
	p, ok := l.inst.(runtime.Pauser)
	if !ok {
		return api.Sandbox{}, false, fmt.Errorf("sandbox %s: paused in a runtime that cannot resume", id)
	}
	rctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	t0 := time.Now()
	if err := p.Resume(rctx); err != nil {
		return api.Sandbox{}, false, m.failedOp(l, id, "resume", err)
	}
	m.mu.Lock()
	l.paused = false
	m.mu.Unlock()
	l.used.touch()
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	slept := rec.Paused
	if err == nil {
		expires := time.Now().Add(cmp.Or(rec.Timeout, m.cfg.DefaultTTL))
		rec, err = m.deps.Store.Transition(ctx, id, store.Transition{
			From: []string{api.StatePaused}, To: api.StateRunning, RuntimeState: l.inst.State(), Expires: &expires, Cause: &cause,
		})
	}
	if err == nil {
		m.dropSleptLater(ctx, rec.Tenant, slept) // it runs on its own workspace and memory
	}
	switch {
	case errors.Is(err, store.ErrTransition):
		return api.Sandbox{}, false, api.Errorf(api.CodeConflict, "sandbox %s is %s: it was deleted while it resumed", id, rec.State)
	case err != nil:
		return api.Sandbox{}, false, fmt.Errorf("record sandbox %s running: %w", id, err)
	}
	if err := m.setClock(rctx, l, rec); err != nil {
		return api.Sandbox{}, false, m.failedOp(l, id, "resume", err)
	}
	m.observe(metrics.OpResume, t0)
	m.log.Info("sandbox resumed", "sandbox", id, "memory_mb", rec.MemoryMB, "auto", cause.Auto, "reason", cause.Reason, "took", time.Since(t0))
	return m.view(rec), false, nil
}

// waking is one wake of a sandbox from its pause snapshot, which the
// calls that want it at once wait for.
type waking struct {
	done chan struct{}
	sb   api.Sandbox
	err  error
}

// wakeOnce wakes sandbox rec from its pause snapshot, here, or waits for
// the wake already under way.
func (m *Manager) wakeOnce(ctx context.Context, rec store.Sandbox, cause store.Cause) (api.Sandbox, error) {
	m.mu.Lock()
	w := m.wakes[rec.ID]
	if w != nil {
		m.mu.Unlock()
		<-w.done
		return w.sb, w.err
	}
	w = &waking{done: make(chan struct{})}
	m.wakes[rec.ID] = w
	m.mu.Unlock()
	w.sb, w.err = m.wake(ctx, rec, cause)
	m.mu.Lock()
	delete(m.wakes, rec.ID)
	m.mu.Unlock()
	close(w.done)
	return w.sb, w.err
}

// wake starts paused sandbox rec, which no node holds, on this node from
// its pause snapshot, under its ID: admitted, claimed (paused → starting,
// its node this one), started as a restore is. A wake that cannot start
// leaves it paused, saying why; a delete meanwhile wins.
func (m *Manager) wake(ctx context.Context, rec store.Sandbox, cause store.Cause) (api.Sandbox, error) {
	t0 := time.Now()
	rt := m.runtimeNamed(rec.Runtime)
	if rt == nil {
		return api.Sandbox{}, api.Errorf(api.CodeUnavailable, "sandbox %s sleeps in the %s runtime, which node %s does not have", rec.ID, rec.Runtime, m.deps.NodeID)
	}
	sn, err := m.deps.Snapshots.Lookup(ctx, rec.Tenant, rec.Paused.Snapshot)
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("wake sandbox %s: its pause snapshot %s: %w", rec.ID, rec.Paused.Snapshot, err)
	}
	if sn.State != api.SnapshotDurable {
		return api.Sandbox{}, fmt.Errorf("wake sandbox %s: its pause snapshot %s is %s", rec.ID, sn.ID, sn.State)
	}
	if err := m.admitMoved(rec); err != nil {
		return api.Sandbox{}, err
	}
	started := false
	defer func() {
		if !started {
			m.ledger.release(rec.ID)
		}
	}()
	self := m.deps.NodeID
	expires := time.Now().Add(cmp.Or(rec.Timeout, m.cfg.DefaultTTL))
	claimed, err := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StatePaused}, To: api.StateStarting, Version: rec.Version, Node: &self, Expires: &expires, Cause: &cause,
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	src, err := m.pauseSource(ctx, rec, sn)
	var memory string
	if err == nil && rec.Paused.Memory {
		memory, err = m.wakeImage(ctx, rt, rec)
		defer os.RemoveAll(memory)
	}
	if err == nil {
		src.memory = memory
		err = m.start(ctx, rt, &claimed, src)
		var ended *endedWhileStarting
		if err != nil && memory != "" && ctx.Err() == nil && !errors.As(err, &ended) {
			m.log.Warn("sandbox did not wake from its memory image: waking from its disk alone",
				"sandbox", rec.ID, "image", rec.Paused.Image, "err", err)
			src.memory, memory = "", ""
			err = m.start(ctx, rt, &claimed, src)
		}
	}
	if err != nil {
		return api.Sandbox{}, m.wakeFailed(ctx, rec, err)
	}
	started = true
	// Its workspace and memory are its own now: their pause snapshot and
	// image go (its root's snapshot stays, as its checkpoint).
	m.dropSleptLater(ctx, rec.Tenant, rec.Paused)
	m.observe(metrics.OpWake, t0)
	m.log.Info("sandbox woke from its pause snapshot", "sandbox", rec.ID, "snapshot", sn.ID, "memory", memory != "",
		"auto", cause.Auto, "reason", cause.Reason, "took", time.Since(t0))
	return m.view(claimed), nil
}

// wakeImage fetches the memory image sleeping sandbox rec paused with,
// for a wake here in runtime rt, unless it is fetched already (prefetch),
// and returns its path; "" to wake from its disk alone, when it has no
// image or rt cannot restore it (another build, another CPU: the reason
// is logged).
func (m *Manager) wakeImage(ctx context.Context, rt runtime.Runtime, rec store.Sandbox) (string, error) {
	if rec.Paused.Image == "" {
		return "", nil
	}
	path, err := m.fetchImage(ctx, rt, rec)
	if errors.Is(err, snapshot.ErrImageFormat) {
		m.log.Warn("sandbox wakes from its disk alone: this node cannot restore its memory image", "sandbox", rec.ID, "err", err)
		return "", nil
	}
	return path, err
}

// fetchImage brings sleeping sandbox rec's memory image to this node,
// for runtime rt, unless it is here, and returns its path.
// A prefetch and a wake at once share one fetch.
func (m *Manager) fetchImage(ctx context.Context, rt runtime.Runtime, rec store.Sandbox) (string, error) {
	path := m.wakeImagePath(rec.ID, rec.Paused.Image)
	_, err, _ := m.imageFetches.Do(path, func() (any, error) {
		if _, err := os.Stat(path); err == nil {
			return nil, nil
		}
		format := ""
		if r, ok := rt.(runtime.Restorer); ok {
			format = r.ImageFormat()
		}
		tmp := path + ident.New(".tmp-")
		if err := m.deps.Snapshots.GetImage(ctx, rec.Tenant, rec.Paused.Image, format, tmp); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, path); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("memory image: %w", err)
		}
		return nil, nil
	})
	if err != nil {
		return "", err
	}
	return path, nil
}

// wakeImagePath is where memory image image of sleeping sandbox id is
// fetched to, with the node's memory images (removed at each start).
func (m *Manager) wakeImagePath(id, image string) string {
	return filepath.Join(m.images.dir, wakePrefix+id+"."+image)
}

// wakePrefix starts the names of the memory images fetched for wakes.
const wakePrefix = "wake-"

// sweepWakesEvery is how often the node removes the memory images it
// fetched for wakes that will not be here: the sandbox woke elsewhere (its
// own node resumed it, when this one stood by), paused again, or ended.
const sweepWakesEvery = 30 * time.Second

// sweepWakes removes the fetched memory images no wake here needs.
func (m *Manager) sweepWakes(ctx context.Context) {
	entries, err := os.ReadDir(m.images.dir)
	if err != nil {
		return
	}
	for _, ent := range entries {
		name, ok := strings.CutPrefix(ent.Name(), wakePrefix)
		id, image, ok2 := strings.Cut(name, ".")
		m.mu.Lock()
		waking := m.wakes[id] != nil
		m.mu.Unlock()
		if !ok || !ok2 || strings.Contains(image, ".tmp-") || waking {
			continue // not a fetched image, one being fetched, or in use
		}
		rec, err := m.deps.Store.GetSandbox(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			continue
		}
		here := rec.Node == m.deps.NodeID && !rec.Held() || rec.Standby == m.deps.NodeID
		if err == nil && rec.State == api.StatePaused && rec.Paused.Image == image && here {
			continue
		}
		os.RemoveAll(filepath.Join(m.images.dir, ent.Name()))
		m.log.Debug("fetched memory image removed", "sandbox", id, "image", image)
	}
}

// pauseSource is what sleeping sandbox rec wakes from: its pause
// snapshot sn's disk, and its workspace's, fetched into the node's cache.
func (m *Manager) pauseSource(ctx context.Context, rec store.Sandbox, sn store.Snapshot) (source, error) {
	image, err := m.deps.Snapshots.Materialize(ctx, sn)
	if err != nil {
		return source{}, err
	}
	src := source{template: rec.Template, image: image, size: sn.DiskBytes, origin: sn.ID, itself: true}
	if ws := rec.Paused.Workspace; ws != "" {
		wsn, err := m.deps.Snapshots.Lookup(ctx, rec.Tenant, ws)
		if err == nil {
			src.workspace, err = m.deps.Snapshots.Materialize(ctx, wsn)
		}
		if err != nil {
			return source{}, fmt.Errorf("its workspace snapshot %s: %w", ws, err)
		}
		src.workspaceOrigin = ws
	}
	return src, nil
}

// wakeFailed puts sandbox rec, whose wake failed with err, back to sleep
// as it was (its record says why it did not wake), unless a delete ended
// it meanwhile; the answer is the caller's.
func (m *Manager) wakeFailed(ctx context.Context, rec store.Sandbox, err error) error {
	if ended := (*endedWhileStarting)(nil); errors.As(err, &ended) {
		return api.Errorf(api.CodeConflict, "sandbox %s ended while it woke: it is %s", rec.ID, ended.state)
	}
	m.log.Warn("sandbox did not wake; it sleeps on", "sandbox", rec.ID, "request_id", reqid.From(ctx), "err", err)
	_, terr := m.deps.Store.Transition(ctx, rec.ID, store.Transition{
		From: []string{api.StateStarting}, To: api.StatePaused, Node: &rec.Node, Expires: &rec.ExpiresAt,
		Paused: rec.Paused, Error: "its last wake failed: " + startReason(ctx, err, m.cfg.StartTimeout),
	})
	switch {
	case errors.Is(terr, store.ErrTransition):
		return api.Errorf(api.CodeConflict, "sandbox %s ended while it woke", rec.ID)
	case terr != nil:
		m.log.Error("record a sandbox back to sleep", "sandbox", rec.ID, "err", terr)
	}
	return fmt.Errorf("wake sandbox %s: %w", rec.ID, err)
}

// prefetch fetches, in the background and one look at a time, the pause
// snapshots and memory images of the sleeping sandboxes placed on this
// node since its last look (a control replica placed their wakes here
// after their node was lost or drained; this node's own pauses are cached
// already) and of those this node stands by for (their nodes hold them),
// so that a wake finds them here; and now and then sweeps the memory
// images no wake here needs any more.
func (m *Manager) prefetch(ctx context.Context) {
	m.mu.Lock()
	if m.prefetching {
		m.mu.Unlock()
		return
	}
	m.prefetching = true
	since := m.prefetched
	sweep := time.Since(m.sweptWakes) > sweepWakesEvery
	if sweep {
		m.sweptWakes = time.Now()
	}
	m.mu.Unlock()
	if sweep {
		m.sweepWakes(ctx)
	}
	recs, err := m.deps.Store.SleepingSandboxes(ctx, m.deps.NodeID, since, movesAtOnce)
	if err != nil || len(recs) == 0 || len(recs) == 1 && !recs[0].UpdatedAt.After(since) {
		if err != nil && ctx.Err() == nil {
			m.log.Warn("find sleeping sandboxes to prefetch", "err", err)
		}
		m.mu.Lock()
		m.prefetching = false
		m.mu.Unlock()
		return
	}
	m.loops.Go(func() {
		defer func() {
			m.mu.Lock()
			m.prefetching = false
			m.mu.Unlock()
		}()
		for _, rec := range recs {
			if rec.Paused != nil {
				m.fetchPaused(ctx, rec)
			}
			m.mu.Lock()
			m.prefetched = rec.UpdatedAt
			m.mu.Unlock()
		}
	})
}

// fetchPaused brings sleeping sandbox rec's pause snapshot into the
// node's cache (nothing to do when it is there), and its memory image.
func (m *Manager) fetchPaused(ctx context.Context, rec store.Sandbox) {
	t0 := time.Now()
	sn, err := m.deps.Snapshots.Lookup(ctx, rec.Tenant, rec.Paused.Snapshot)
	if err == nil {
		_, err = m.deps.Snapshots.Materialize(ctx, sn)
	}
	if rt := m.runtimeNamed(rec.Runtime); err == nil && rt != nil && rec.Paused.Memory {
		_, err = m.wakeImage(ctx, rt, rec)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("pause snapshot not prefetched", "sandbox", rec.ID, "snapshot", rec.Paused.Snapshot, "err", err)
		}
		return
	}
	m.log.Debug("pause snapshot prefetched", "sandbox", rec.ID, "snapshot", sn.ID, "took", time.Since(t0))
}

// setClock steps the clock of sandbox l (rec), which stood still while its
// machine was paused or held, to the host's, when it keeps a clock of its
// own. Its identity is sent as it was, and its agent keeps it.
func (m *Manager) setClock(ctx context.Context, l *live, rec store.Sandbox) error {
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
