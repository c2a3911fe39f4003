package sandbox

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/internal/disk"
	"warren/internal/mountinfo"
	"warren/internal/runtime"
	"warren/internal/store"
)

// reconcile makes the node match the store after a daemon (re)start: every
// sandbox the store calls running is adopted if its agent still answers (a
// paused one if its runtime still has it: no agent answers until Resume) and
// torn down otherwise; one caught starting is torn down (its Create died with
// the old process); then what this node's sandboxes left and no live one
// owns — cgroups, processes, loop devices, disks, directories, routers — is
// removed.
// Sandboxes this store does not know as this node's are left alone:
// another warren server on the host (another data directory), or another
// node of the fleet, owns them.
func (m *Manager) reconcile(ctx context.Context) error {
	recs, err := m.deps.Store.NodeSandboxes(ctx, m.deps.NodeID, nil)
	if err != nil {
		return err
	}
	known, keep := map[string]bool{}, map[string]bool{}
	for _, rec := range recs {
		known[rec.ID] = true
		if !slices.Contains(store.OnNode, rec.State) {
			continue // final, or moving: the moves loop starts it if it is placed here
		}
		if rec.State == api.StatePaused && !rec.Held() {
			continue // asleep in the blob store: nothing of it runs here
		}
		log := m.log.With("sandbox", rec.ID)
		rt := m.runtimeNamed(rec.Runtime)
		if rt == nil {
			log.Error("sandbox of an unknown runtime; marking failed", "runtime", rec.Runtime)
			m.teardown(ctx, rec.ID, nil, api.StateFailed, "its runtime is gone from this node")
			continue
		}
		if rec.State == api.StateStarting {
			if inst, err := rt.Adopt(ctx, m.spec(&rec), rec.RuntimeState); err == nil {
				inst.Stop(ctx)
			}
			m.lose(ctx, rec, nil, "the daemon stopped while the sandbox was starting")
			continue
		}
		spec := m.spec(&rec)
		if err := m.adoptNetwork(&rec, &spec); err != nil {
			// The runtime's sweep below ends what still runs of it.
			log.Warn("sandbox network not adopted", "err", err)
			m.teardown(ctx, rec.ID, nil, api.StateFailed, "its network is gone")
			continue
		}
		inst, err := rt.Adopt(ctx, spec, rec.RuntimeState)
		if err != nil {
			reason := "the sandbox stopped while the daemon was down"
			if !errors.Is(err, runtime.ErrGone) {
				reason = "the node could not reattach it after a daemon restart"
			}
			log.Warn("sandbox not adopted", "err", err)
			m.lose(ctx, rec, nil, reason)
			continue
		}
		conn := inst.Dial()
		paused := rec.State == api.StatePaused // no agent answers until Resume
		readyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if !paused {
			err = conn.WaitReady(readyCtx)
		}
		cancel()
		if err != nil {
			log.Warn("adopted sandbox's agent does not answer; stopping it", "err", err)
			m.lose(ctx, rec, &live{tenant: rec.Tenant, rt: rt, inst: inst, conn: conn}, "its agent stopped answering while the daemon was down")
			continue
		}
		l := newLive(&rec, rt, inst, conn)
		l.paused, l.checkpointed = paused, cmp.Or(rec.CheckpointAt, l.checkpointed)
		m.live[rec.ID] = l
		m.ledger.restore(rec.ID, claimOf(rec))
		keep[rec.ID] = true
		go m.watch(rec.ID, l)
		log.Info("sandbox adopted after restart")
	}
	// The warm pools' members an earlier process left are swept with the
	// rest (their markers too: no kept sandbox owns them).
	left, err := m.pooledLeft()
	if err != nil {
		return err
	}
	for _, id := range left {
		known[id] = true
	}
	var errs []error
	for _, rt := range m.deps.Runtimes {
		errs = append(errs, rt.Sweep(ctx, known, keep))
	}
	// Failed sandboxes keep their disks (teardown), those that failed just
	// now included.
	if recs, err = m.deps.Store.NodeSandboxes(ctx, m.deps.NodeID, []string{api.StateFailed}); err != nil {
		return err
	}
	keepDisks := maps.Clone(keep)
	for _, rec := range recs {
		if keepsDisks(rec) {
			keepDisks[rec.ID] = true
			m.ledger.restore(rec.ID, diskClaim(rec))
		}
	}
	errs = append(errs, m.sweepFiles(keep, keepDisks))
	if m.deps.Network != nil {
		errs = append(errs, m.deps.Network.Sweep())
	}
	return errors.Join(errs...)
}

// lose ends sandbox rec, which the node lost (it stopped while the
// daemon was down, or while it was starting; l is what is left of it, if
// anything), for reason: a movable one (store.Movable) starts again here
// from its checkpoint, by the moves loop; a paused one sleeps on, held by
// none, and wakes from its pause snapshot; any other fails, as teardown
// records it.
func (m *Manager) lose(ctx context.Context, rec store.Sandbox, l *live, reason string) {
	asleep := rec.State == api.StatePaused && rec.Paused != nil
	if snap, _ := store.Movable(rec); snap == "" && !asleep {
		m.teardown(ctx, rec.ID, l, api.StateFailed, reason)
		return
	}
	if err := m.release(ctx, rec.ID, l, false); err != nil {
		m.log.Warn("what a lost sandbox left", "sandbox", rec.ID, "err", err)
	}
	if _, err := m.deps.Store.Lose(ctx, rec, m.deps.NodeID, time.Now(), reason); err != nil {
		m.log.Error("record a lost sandbox moving", "sandbox", rec.ID, "err", err)
		return
	}
	m.log.Warn("sandbox lost; it starts again from its checkpoint (a paused one when woken)", "sandbox", rec.ID, "reason", reason)
}

func (m *Manager) runtimeNamed(name string) runtime.Runtime {
	for _, rt := range m.deps.Runtimes {
		if rt.Name() == name {
			return rt
		}
	}
	return nil
}

// sweepFiles removes sandbox directories, disks and loop devices that no
// kept sandbox owns.
func (m *Manager) sweepFiles(keep, keepDisks map[string]bool) error {
	// Read once: a leftover directory may hold mounts (a gvisor sandbox's
	// disks), which go before it.
	mounts, err := mountinfo.Read()
	errs := []error{err}
	loops, err := disk.StaleLoops(disksDir(m.deps.Pool))
	errs = append(errs, err)
	for _, dev := range loops {
		if id, ok := loopSandbox(dev); ok && keep[id] {
			continue
		}
		m.log.Info("detaching leftover loop device", "device", dev)
		errs = append(errs, disk.DetachLoop(dev))
	}
	for _, d := range []struct {
		dir   string
		owner func(name string) string
		keep  map[string]bool
	}{{m.deps.StateDir, func(name string) string { return name }, keep}, {disksDir(m.deps.Pool), diskOwner, keepDisks}} {
		entries, err := os.ReadDir(d.dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			id := d.owner(e.Name())
			if d.keep[id] {
				continue
			}
			if d.dir == disksDir(m.deps.Pool) && m.isVolume(id) {
				// An always-on disk no sandbox of this node has: its
				// sandbox moved away while this daemon was down, or was
				// deleted. Its layers stay in the tiers: another node may
				// run it from them.
				m.log.Info("releasing a leftover always-on disk", "sandbox", id)
				errs = append(errs, m.dropVolume(context.Background(), id, true))
				continue
			}
			path := filepath.Join(d.dir, e.Name())
			m.log.Info("removing leftover sandbox file", "path", path)
			errs = append(errs, disk.UnmountUnder(mounts, path), os.RemoveAll(path))
		}
	}
	return errors.Join(errs...)
}

// loopSandbox names the sandbox whose disk backs loop device dev.
func loopSandbox(dev string) (string, bool) {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop/backing_file"))
	if err != nil {
		return "", false
	}
	return diskOwner(filepath.Base(strings.TrimSpace(string(b)))), true
}

// diskOwner is the sandbox whose disk image is named name: ID.img (root) or
// ID.ws.img (workspace).
func diskOwner(name string) string {
	return strings.TrimSuffix(strings.TrimSuffix(name, ".img"), ".ws")
}
