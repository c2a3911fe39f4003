package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/internal/listing"
	"warren/internal/metrics"
	"warren/internal/runtime"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
)

// Snapshot limits.
const (
	defaultSnapshotWait = 10 * time.Minute
	maxRestoreCount     = 256
	// restoreParallel × cores sandboxes of one restore start at once: more
	// only makes them fight over the kernel's locks.
	restoreParallel = 4
)

// Snapshot saves a running sandbox's disk, or the disk a failed one kept.
// It answers once the disk is cloned (pending), or with req.Wait once the
// snapshot is durable or failed.
func (m *Manager) Snapshot(ctx context.Context, tenant, id string, req api.CreateSnapshotRequest) (api.Snapshot, error) {
	return m.snapshot(ctx, tenant, id, req, nil)
}

// snapshot is Snapshot with quiesceFS in place of the running sandbox's
// Quiesce, when not nil.
func (m *Manager) snapshot(ctx context.Context, tenant, id string, req api.CreateSnapshotRequest,
	quiesceFS func(ctx context.Context, mountpoint string) (func() error, error)) (api.Snapshot, error) {
	snaps := m.deps.Snapshots
	wait := defaultSnapshotWait
	if req.WaitTimeoutSeconds < 0 || req.WaitTimeoutSeconds > int64(m.cfg.MaxTTL/time.Second) {
		return api.Snapshot{}, api.Errorf(api.CodeBadRequest, "wait_timeout_seconds must be between 0 (the default, 600) and %d, got %d",
			int64(m.cfg.MaxTTL/time.Second), req.WaitTimeoutSeconds)
	}
	if req.WaitTimeoutSeconds > 0 {
		wait = time.Duration(req.WaitTimeoutSeconds) * time.Second
	}
	if l, err := m.running(ctx, tenant, id); err == nil {
		if quiesceFS == nil {
			quiesceFS = l.inst.Quiesce
		}
	} else if rec, rerr := m.record(ctx, tenant, id); rerr == nil && keepsDisks(rec) {
		// A failed sandbox's disks are mounted nowhere: nothing to quiesce.
		quiesceFS = func(context.Context, string) (func() error, error) { return func() error { return nil }, nil }
	} else {
		return api.Snapshot{}, err
	}
	if err := m.CheckDiskFree("snapshots are"); err != nil {
		return api.Snapshot{}, err
	}
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	src, mountpoint, err := m.snapshotSource(rec, req.Scope)
	if err != nil {
		return api.Snapshot{}, err
	}
	src.Name = req.Name
	quiesce := func(ctx context.Context) (func() error, error) { return quiesceFS(ctx, mountpoint) }
	var sn store.Snapshot
	if alwaysOn(&rec) && src.Scope == api.ScopeRoot {
		sn, err = snaps.TakeLayer(ctx, src, quiesce, m.volumeSnapshot(rec.ID))
	} else {
		sn, err = snaps.Take(ctx, src, quiesce)
	}
	if qe := quotaRefusal(err); qe != nil {
		return api.Snapshot{}, qe
	}
	if api.IsCode(err, api.CodeConflict) { // its name is another snapshot's
		return api.Snapshot{}, err
	}
	if err != nil {
		return api.Snapshot{}, api.Errorf(api.CodeInternal, "snapshot of %s: %v", id, err)
	}
	m.deps.Metrics.Observe(metrics.OpSnapshotAck, sn.Ack)
	if req.Wait {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		waited, err := snaps.Wait(wctx, sn.ID)
		if err != nil {
			return api.Snapshot{}, api.Errorf(api.CodeTimeout, "snapshot %s is not durable yet: %v", sn.ID, err)
		}
		sn = waited
	}
	return snaps.View(sn), nil
}

// snapshotSource is what a snapshot of sandbox rec's disk of scope saves,
// and where that disk is mounted in the sandbox.
func (m *Manager) snapshotSource(rec store.Sandbox, scope string) (snapshot.Source, string, error) {
	src := snapshot.Source{Tenant: rec.Tenant, SandboxID: rec.ID, Template: rec.Template, Scope: scope}
	switch scope {
	case "", api.ScopeRoot:
		src.Scope, src.Image, src.Origin = api.ScopeRoot, m.diskPath(rec.ID), rec.Origin
		// The template is needed only for a sandbox's first snapshot, and
		// only when it was not restored from one.
		if tpl, err := m.deps.Templates.Get(rec.Template); err == nil {
			src.TemplateImage, src.TemplateBuilt = tpl.Path, tpl.BuiltAt
		} else if !errors.Is(err, template.ErrNotFound) {
			return snapshot.Source{}, "", fmt.Errorf("template %s: %w", rec.Template, err)
		}
		return src, "/", nil
	case api.ScopeWorkspace:
		if rec.WorkspaceMB == 0 {
			return snapshot.Source{}, "", api.Errorf(api.CodeBadRequest, "sandbox %s has no workspace disk (create it with workspace_mb)", rec.ID)
		}
		src.Image, src.Origin = m.workspacePath(rec.ID), rec.WorkspaceOrigin
		return src, "/workspace", nil
	}
	return snapshot.Source{}, "", api.Errorf(api.CodeBadRequest, "scope must be root or workspace, got %q", scope)
}

// GetSnapshot returns one of the tenant's snapshots, from this node or from
// the shared blob store.
func (m *Manager) GetSnapshot(ctx context.Context, tenant, id string) (api.Snapshot, error) {
	sn, err := m.deps.Snapshots.Lookup(ctx, tenant, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	return m.deps.Snapshots.View(sn), nil
}

// ListSnapshots returns a page of the tenant's snapshots on this node, of
// one sandbox when sandboxID is not "" (which must then be the tenant's),
// in one of states (any when empty).
func (m *Manager) ListSnapshots(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]api.Snapshot, error) {
	if sandboxID != "" {
		if _, err := m.record(ctx, tenant, sandboxID); err != nil {
			return nil, err
		}
	}
	return m.deps.Snapshots.List(ctx, tenant, sandboxID, states, page)
}

// SnapshotLineage returns a page of the ancestors of one of the tenant's
// snapshots, nearest first (snapshot.Engine.Lineage).
func (m *Manager) SnapshotLineage(ctx context.Context, tenant, id, after string, limit int) ([]string, bool, error) {
	return m.deps.Snapshots.Lineage(ctx, tenant, id, after, limit)
}

// DeleteSnapshot deletes one of the tenant's snapshots.
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	if _, err := m.deps.Snapshots.Lookup(ctx, tenant, id); err != nil {
		return err // another tenant's is not found, whatever uses it
	}
	use, err := m.deps.Store.TemplateSnapshotUse(ctx, id)
	if err != nil {
		return err
	}
	if strings.HasPrefix(use, "template ") {
		return api.Errorf(api.CodeConflict, "snapshot %s is the disk of %s: delete the template version first", id, use)
	}
	if err := m.deps.Snapshots.Delete(ctx, tenant, id); err != nil {
		return err
	}
	if use != "" {
		return m.deps.Store.DropTemplateStep(ctx, id)
	}
	return nil
}

// Restore starts req.Count sandboxes from a snapshot, each with a fresh
// identity, in parallel. It returns them all running, or an error and none:
// the ones that did start are deleted again.
func (m *Manager) Restore(ctx context.Context, tenant, id string, req api.RestoreRequest) ([]api.Sandbox, error) {
	t0 := time.Now()
	out, err := m.restore(ctx, tenant, id, req, heldMachine{}, fromVersion{})
	if err == nil {
		m.observe(metrics.OpRestore, t0)
	}
	return out, err
}

// fromVersion is the template version a restore starts from, if any: its
// NAME@VERSION, and the tenant that owns its snapshot ("": the restoring
// tenant; the admin's for a published one).
type fromVersion struct{ ref, owner string }

// heldMachine is what a live fork saved of a vm held while its root disk's
// snapshot was taken: its memory file, and a clone of its workspace disk
// ("" when it has none).
type heldMachine struct{ memory, workspace string }

// restore is Restore; held, when its memory is not "", is what the
// sandboxes start from besides the snapshot (a live fork's children);
// version, when set, the template version whose disk the snapshot is.
func (m *Manager) restore(ctx context.Context, tenant, id string, req api.RestoreRequest, held heldMachine, version fromVersion) ([]api.Sandbox, error) {
	count := req.Count
	if count == 0 {
		count = 1
	}
	if count < 1 || count > maxRestoreCount {
		return nil, api.Errorf(api.CodeBadRequest, "count must be between 1 and %d, got %d", maxRestoreCount, req.Count)
	}
	rt, err := m.pickRuntime(req.Runtime)
	if err != nil {
		return nil, err
	}
	sn, err := m.deps.Snapshots.Lookup(ctx, cmp.Or(version.owner, tenant), id)
	if err != nil {
		return nil, err
	}
	if sn.State == api.SnapshotFailed {
		return nil, api.Errorf(api.CodeConflict, "snapshot %s failed and cannot be restored: %s", id, sn.Error)
	}
	create := api.CreateSandboxRequest{SandboxSpec: req.SandboxSpec}
	src := source{template: sn.Template, size: sn.DiskBytes, origin: sn.ID, memory: held.memory, workspace: held.workspace}
	if sn.Scope == api.ScopeWorkspace {
		// A workspace comes back on a fresh root from its template.
		tpl, err := m.deps.Templates.Get(sn.Template)
		if errors.Is(err, template.ErrNotFound) {
			return nil, api.Errorf(api.CodeConflict, "snapshot %s is of a workspace on template %q, which this node does not have", id, sn.Template)
		}
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", sn.Template, err)
		}
		if req.WorkspaceMB != 0 {
			return nil, api.Errorf(api.CodeBadRequest, "workspace_mb cannot be set when restoring a workspace snapshot: its disk keeps its size")
		}
		src = templateSource(tpl)
		src.workspaceOrigin = sn.ID
		create.WorkspaceMB = (sn.DiskBytes + 1<<20 - 1) >> 20
	}
	rec, err := m.validate(ctx, tenant, create, src)
	if err != nil {
		return nil, err
	}
	rec.TemplateVersion = version.ref
	ids, err := m.admit(rec, rt, count)
	if err != nil {
		return nil, err
	}
	admitted := true
	defer func() {
		if admitted { // not launched: the claims go
			for _, id := range ids {
				m.ledger.release(id)
			}
		}
	}()
	// An always-on disk reads the snapshot's blocks as they are wanted,
	// from the blob store: nothing is materialized before it starts, but
	// the snapshot must be there.
	if alwaysOn(&rec) && sn.Scope == api.ScopeRoot && sn.State == api.SnapshotPending {
		if sn, err = m.deps.Snapshots.Wait(ctx, sn.ID); err != nil {
			return nil, api.Errorf(api.CodeInternal, "restore %s: %v", id, err)
		}
		if sn.State != api.SnapshotDurable {
			return nil, api.Errorf(api.CodeConflict, "snapshot %s failed and cannot be restored: %s", id, sn.Error)
		}
	}
	if !alwaysOn(&rec) || sn.Scope == api.ScopeWorkspace {
		image, err := m.deps.Snapshots.Materialize(ctx, sn)
		if err != nil {
			return nil, api.Errorf(api.CodeInternal, "restore %s: %v", id, err)
		}
		if sn.Scope == api.ScopeWorkspace {
			src.workspace = image
		} else {
			src.image = image
		}
	}
	out := make([]api.Sandbox, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, restoreParallel*goruntime.NumCPU())
	admitted = false // launch owns each claim from here
	for i := range count {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec := rec
			rec.ID = ids[i]
			out[i], errs[i] = m.launch(ctx, rt, rec, src)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		for _, sb := range out {
			if sb.ID != "" {
				m.kill(context.WithoutCancel(ctx), sb.ID, "restore failed")
			}
		}
		return nil, err
	}
	return out, nil
}

// Fork starts req.Count children of running container sandbox id: a
// snapshot of its root disk (the sandbox frozen only while the disk is
// cloned), restored that many times, each child with a fresh identity.
// Zero fields of the request's spec take the parent's values. The
// snapshot stays the tenant's; a failed restore leaves it.
func (m *Manager) Fork(ctx context.Context, tenant, id string, req api.ForkRequest) (api.ForkResult, error) {
	t0 := time.Now()
	if req.Count < 0 || req.Count > maxRestoreCount {
		return api.ForkResult{}, api.Errorf(api.CodeBadRequest, "count must be between 1 and %d, got %d", maxRestoreCount, req.Count)
	}
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return api.ForkResult{}, err
	}
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.ForkResult{}, err
	}
	f, live := l.inst.(runtime.Forker)
	if live && alwaysOn(&rec) {
		return api.ForkResult{}, api.Errorf(api.CodeConflict,
			"sandbox %s has an always-on disk: a live fork of its memory is not supported yet; snapshot it and restore instead", id)
	}
	if rec.WorkspaceMB > 0 && !live {
		return api.ForkResult{}, api.Errorf(api.CodeConflict,
			"sandbox %s has a workspace disk: a fork of a container copies the root disk only; snapshot each disk and restore instead", id)
	}
	spec := inherit(req.SandboxSpec, rec, m.cfg.MaxTTL)
	var quiesce func(ctx context.Context, mountpoint string) (func() error, error)
	var held heldMachine
	if live {
		if err := sameMachine(spec, rec); err != nil {
			return api.ForkResult{}, err
		}
		spec.WorkspaceMB = rec.WorkspaceMB
		base := filepath.Join(m.images.dir, "fork-"+id+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		held.memory = base + ".mem"
		defer os.RemoveAll(held.memory)
		if rec.WorkspaceMB > 0 {
			held.workspace = base + ".ws.img"
			defer os.Remove(held.workspace)
		}
		quiesce = func(ctx context.Context, _ string) (func() error, error) {
			resume, err := f.Hold(ctx, held.memory)
			if err != nil || held.workspace == "" {
				return resume, err
			}
			// The workspace disk is the machine's too: cloned under the
			// same hold as the root disk the snapshot takes.
			if err := m.deps.Pool.Clone(ctx, m.workspacePath(id), held.workspace); err != nil {
				return nil, errors.Join(fmt.Errorf("clone workspace disk: %w", err), resume())
			}
			return resume, nil
		}
	}
	sn, err := m.snapshot(ctx, tenant, id, api.CreateSnapshotRequest{}, quiesce)
	if live {
		err = errors.Join(err, m.setClock(ctx, l, rec))
	}
	if err != nil {
		return api.ForkResult{}, err
	}
	kids, err := m.restore(ctx, tenant, sn.ID, api.RestoreRequest{Count: req.Count, SandboxSpec: spec}, held, fromVersion{})
	if err != nil {
		return api.ForkResult{}, err
	}
	m.observe(metrics.OpFork, t0)
	m.log.Info("sandbox forked", "sandbox", id, "children", len(kids), "snapshot", sn.ID, "paused_ms", sn.AckMs, "memory", live)
	return api.ForkResult{Snapshot: sn, PausedMs: sn.AckMs, Sandboxes: kids}, nil
}

// sameMachine refuses a live fork's spec whose machine differs from its
// parent rec's: the children wake in the parent's memory, with its vCPUs,
// memory and disk.
func sameMachine(spec api.SandboxSpec, rec store.Sandbox) error {
	switch {
	case spec.Runtime != rec.Runtime:
		return api.Errorf(api.CodeBadRequest, "a fork of vm sandbox %s keeps its memory: its children run in the vm runtime, not %q", rec.ID, spec.Runtime)
	case math.Ceil(spec.CPUs) != math.Ceil(rec.CPUs):
		return api.Errorf(api.CodeBadRequest, "a fork of vm sandbox %s keeps its memory: its children have its %g vCPUs (cpus %g), not %g",
			rec.ID, math.Ceil(rec.CPUs), rec.CPUs, math.Ceil(spec.CPUs))
	case spec.MemoryMB != rec.MemoryMB:
		return api.Errorf(api.CodeBadRequest, "a fork of vm sandbox %s keeps its memory: its children have its memory_mb %d, not %d", rec.ID, rec.MemoryMB, spec.MemoryMB)
	case spec.WorkspaceMB != 0 && spec.WorkspaceMB != rec.WorkspaceMB:
		return api.Errorf(api.CodeBadRequest, "a fork of vm sandbox %s keeps its memory: its children have its workspace disk (workspace_mb %d), not %d",
			rec.ID, rec.WorkspaceMB, spec.WorkspaceMB)
	}
	return nil
}

// inherit fills the zero fields of a fork's spec from its parent rec; the
// parent's time to live (at most maxTTL) counts from the fork.
func inherit(spec api.SandboxSpec, rec store.Sandbox, maxTTL time.Duration) api.SandboxSpec {
	if spec.Runtime == "" {
		spec.Runtime = rec.Runtime
	}
	if spec.CPUs == 0 {
		spec.CPUs = rec.CPUs
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = rec.MemoryMB
	}
	if spec.Pids == 0 {
		spec.Pids = rec.Pids
	}
	if spec.Network == nil && !reflect.DeepEqual(rec.Network, api.NetworkPolicy{}) { // the zero policy is the default
		spec.Network = &rec.Network
	}
	if spec.TimeoutSeconds == 0 {
		spec.TimeoutSeconds = int64(min(max(time.Second, rec.ExpiresAt.Sub(rec.CreatedAt)), maxTTL) / time.Second)
	}
	if spec.CheckpointEverySeconds == 0 {
		spec.CheckpointEverySeconds = int64(rec.CheckpointEvery / time.Second)
	}
	if spec.Persistence == "" {
		spec.Persistence = rec.Persistence
	}
	if spec.Lifecycle == (api.Lifecycle{}) {
		spec.Lifecycle = rec.Lifecycle
	}
	if spec.Env == nil {
		spec.Env = rec.Env
	}
	if spec.Metadata == nil {
		spec.Metadata = rec.Metadata
	}
	return spec
}

// GCSnapshots collects unreferenced layers and chunks; grace < 0 takes the
// engine's default.
func (m *Manager) GCSnapshots(ctx context.Context, grace time.Duration) (api.GCResult, error) {
	return m.deps.Snapshots.GC(ctx, grace)
}
