// Package sandbox is the node's sandbox manager: it turns API requests into
// sandboxes (clone the template's disk, start a runtime, wait for the agent),
// keeps their records in the store, deletes them when their time is up, and
// after a daemon restart reconciles what the store says with what is really
// running, so no sandbox is left half-alive. It does not speak HTTP (that is
// internal/server) and does not know how a runtime isolates (internal/runtime).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agentconn"
	"warren/internal/cleanup"
	"warren/internal/disk"
	"warren/internal/ident"
	"warren/internal/network"
	"warren/internal/reqid"
	"warren/internal/runtime"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
)

// Config holds the manager's defaults and bounds. Zero fields take the
// values of DefaultConfig.
type Config struct {
	DefaultTemplate string
	DefaultTTL      time.Duration
	MaxTTL          time.Duration
	DefaultCPUs     float64
	DefaultMemoryMB int64
	DefaultPids     int64
	MaxMemoryMB     int64
	MaxPids         int64
	MaxDiskMB       int64
	// KeepFinal is how long records of stopped and failed sandboxes stay
	// visible before they are forgotten.
	KeepFinal time.Duration
	// ReapEvery is how often expired sandboxes are looked for.
	ReapEvery time.Duration
	// StartTimeout bounds a sandbox's start, agent readiness included.
	StartTimeout time.Duration
	// RequireIsolation, when set (api.IsolationVM or api.IsolationContainer),
	// refuses to create or restore a sandbox in a weaker runtime.
	RequireIsolation string
	// Admission bounds what the node promises (admit.go).
	Admission Admission
}

// minWorkspaceMB is the smallest workspace disk: room for ext4's own
// metadata and journal.
const minWorkspaceMB = 64

// DefaultConfig is what a single node uses unless told otherwise.
func DefaultConfig() Config {
	return Config{
		DefaultTemplate: "default",
		DefaultTTL:      15 * time.Minute,
		MaxTTL:          24 * time.Hour,
		DefaultCPUs:     1,
		DefaultMemoryMB: 512,
		DefaultPids:     1024,
		MaxMemoryMB:     64 << 10,
		MaxPids:         65536,
		MaxDiskMB:       256 << 10,
		KeepFinal:       time.Hour,
		ReapEvery:       time.Second,
		StartTimeout:    30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = d.DefaultTemplate
	}
	for _, p := range []struct{ v, def *time.Duration }{
		{&c.DefaultTTL, &d.DefaultTTL}, {&c.MaxTTL, &d.MaxTTL}, {&c.KeepFinal, &d.KeepFinal},
		{&c.ReapEvery, &d.ReapEvery}, {&c.StartTimeout, &d.StartTimeout},
	} {
		if *p.v == 0 {
			*p.v = *p.def
		}
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = d.DefaultCPUs
	}
	set(&c.DefaultMemoryMB, d.DefaultMemoryMB)
	set(&c.DefaultPids, d.DefaultPids)
	set(&c.MaxMemoryMB, d.MaxMemoryMB)
	set(&c.MaxPids, d.MaxPids)
	set(&c.MaxDiskMB, d.MaxDiskMB)
	return c
}

// Deps are the subsystems the manager drives.
type Deps struct {
	Log       *slog.Logger
	Store     *store.Store
	Pool      *disk.Pool
	Templates *template.Catalog
	Snapshots *snapshot.Engine
	// Runtimes in order of strength, strongest first; "auto" picks the first
	// available one.
	Runtimes []runtime.Runtime
	// StateDir holds one private directory per sandbox (sockets, logs).
	StateDir string
	// Network gives sandboxes their networks; nil: loopback only.
	Network *network.Node
	// CgroupVersion is shown in node info.
	CgroupVersion int
	Version       string
	// Host is what the node's host has, for admission.
	Host HostCapacity
}

// Manager runs the node's sandboxes. It is safe for concurrent use.
//
// A sandbox's record changes only by the store's state machine
// (store.Transition, a compare-and-set): a create, a delete, a timeout, a
// crash and a pause that race each other cannot overwrite one another, and
// the one that lost is told. Locks, in the order they may be taken: a
// live sandbox's op (its pause and resume), then Manager.mu (the live map
// and each live sandbox's flags: never held across a store or runtime
// call), then whatever a runtime locks inside its own calls.
type Manager struct {
	log  *slog.Logger
	deps Deps
	cfg  Config

	mu   sync.Mutex       // guards live
	live map[string]*live // sandboxes this process runs, by ID

	// ledger holds what the node's sandboxes claim of it.
	ledger *ledger

	stop   context.CancelFunc // stops the reaper
	reaper sync.WaitGroup
}

// live is a running sandbox.
type live struct {
	tenant string
	rt     runtime.Runtime
	inst   runtime.Instance
	conn   *agentconn.Conn
	// deleting is set (under Manager.mu) once Delete owns the teardown, so
	// the exit watcher does not report the exit as a failure.
	deleting bool
	// paused is set (under Manager.mu) while the sandbox is pausing, paused
	// or resuming: the agent is not to be called.
	paused bool
	// op serializes Pause and Resume.
	op sync.Mutex
}

// New makes the manager, reconciles the store with what is running on the
// node (after a daemon restart), and starts the reaper of expired sandboxes.
func New(ctx context.Context, deps Deps, cfg Config) (*Manager, error) {
	if err := os.MkdirAll(deps.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.MkdirAll(disksDir(deps.Pool), 0o700); err != nil {
		return nil, fmt.Errorf("disks dir: %w", err)
	}
	m := &Manager{log: deps.Log, deps: deps, cfg: cfg.withDefaults(), live: map[string]*live{}}
	capacity, adm := newCapacity(deps.Host, m.cfg.Admission)
	m.cfg.Admission = adm
	m.ledger = newLedger(capacity, adm.Tenant)
	m.log.Info("admission", "cpus", capacity.cpus, "memory_mb", capacity.memoryMB, "disk_mb", capacity.diskMB,
		"max_pids", capacity.maxPids, "reserve_disk_mb", capacity.reserveDiskMB, "tenant", adm.Tenant)
	if err := m.reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if err := m.prepareBases(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.reaper.Add(1)
	go m.reap(rctx)
	return m, nil
}

// prepareBases starts the upload of every template's base layer that is not
// in the blob store yet, so that no first snapshot waits for one.
func (m *Manager) prepareBases(ctx context.Context) error {
	infos, err := m.deps.Templates.List()
	if err != nil {
		return fmt.Errorf("list templates: %w", err)
	}
	for _, t := range infos {
		if _, err := m.deps.Snapshots.EnsureBase(ctx, t.Name, t.Path, t.BuiltAt); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	return nil
}

// Close stops the reaper. Running sandboxes keep running: the next daemon
// process adopts them.
func (m *Manager) Close() {
	m.stop()
	m.reaper.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.live {
		l.conn.Close()
	}
}

func disksDir(p *disk.Pool) string { return filepath.Join(p.Dir(), "sandboxes") }

func (m *Manager) diskPath(id string) string { return filepath.Join(disksDir(m.deps.Pool), id+".img") }
func (m *Manager) workspacePath(id string) string {
	return filepath.Join(disksDir(m.deps.Pool), id+".ws.img")
}
func (m *Manager) stateDir(id string) string { return filepath.Join(m.deps.StateDir, id) }

// Create starts a sandbox and returns once its agent answers.
func (m *Manager) Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	rt, err := m.pickRuntime(req.Runtime)
	if err != nil {
		return api.Sandbox{}, err
	}
	name := req.Template
	if name == "" {
		name = m.cfg.DefaultTemplate
	}
	tpl, err := m.deps.Templates.Get(name)
	switch {
	case errors.Is(err, template.ErrInvalidName):
		return api.Sandbox{}, api.Errorf(api.CodeBadRequest, "template: %v", template.ValidName(name))
	case errors.Is(err, template.ErrNotFound):
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "template %q not found", name)
	case err != nil:
		return api.Sandbox{}, fmt.Errorf("template %s: %w", name, err)
	}
	src := source{template: tpl.Name, image: tpl.Path, size: tpl.SizeBytes}
	rec, err := m.validate(tenant, req, src)
	if err != nil {
		return api.Sandbox{}, err
	}
	ids, err := m.admit(rec, rt, 1)
	if err != nil {
		return api.Sandbox{}, err
	}
	rec.ID = ids[0]
	return m.launch(ctx, rt, rec, src)
}

// admit checks a validated sandbox against the host and claims n of it
// from the node and the tenant (all or none); it returns their new IDs.
func (m *Manager) admit(rec store.Sandbox, rt runtime.Runtime, n int) ([]string, error) {
	if err := m.ledger.fits(rec.MemoryMB, rec.Pids); err != nil {
		return nil, err
	}
	if err := m.checkDiskFree("creates and restores are"); err != nil {
		return nil, err
	}
	rec.Runtime = rt.Name()
	c := claimOf(rec)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ident.New("sb-")
	}
	if err := m.ledger.admit(ids, c); err != nil {
		return nil, err
	}
	return ids, nil
}

// claimOf is what sandbox rec holds of its node.
func claimOf(rec store.Sandbox) claim {
	c := claim{tenant: rec.Tenant, cpus: rec.CPUs, memoryMB: rec.MemoryMB, diskMB: rec.DiskMB + rec.WorkspaceMB}
	if rec.Runtime == "vm" {
		c.memoryMB += vmOverheadMB
	} else {
		c.memoryMB += runtime.AgentMemoryMB
	}
	return c
}

// checkDiskFree refuses what would write to the node's disk once its free
// space is below the reserve; what says what is refused.
func (m *Manager) checkDiskFree(what string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(m.deps.StateDir, &st); err != nil {
		return fmt.Errorf("free disk: %w", err)
	}
	return m.ledger.diskFree(int64(st.Bavail)*st.Bsize>>20, what)
}

// source is the disk a new sandbox starts from: its template's image, or a
// snapshot's disk in the snapshot cache.
type source struct {
	template string
	image    string
	size     int64
	origin   string // the snapshot, if any
	// workspace is the workspace disk to clone, "" for a new empty one;
	// workspaceOrigin the snapshot it comes from.
	workspace       string
	workspaceOrigin string
}

// launch records a validated, admitted sandbox (its ID set) and starts it;
// if it does not start, its claim is released.
func (m *Manager) launch(ctx context.Context, rt runtime.Runtime, rec store.Sandbox, src source) (_ api.Sandbox, err error) {
	defer func() {
		if err != nil {
			m.ledger.release(rec.ID)
		}
	}()
	rec.Runtime = rt.Name()
	rec.PreviewToken = newPreviewToken() // per launch: a fork never shares its origin's
	rec.Origin, rec.WorkspaceOrigin = src.origin, src.workspaceOrigin
	if err := m.deps.Store.InsertSandbox(ctx, &rec); err != nil {
		return api.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	log := m.log.With("sandbox", rec.ID)

	if err := m.start(ctx, rt, &rec, src); err != nil {
		ended := (*endedWhileStarting)(nil)
		if !errors.As(err, &ended) {
			log.Warn("sandbox failed to start", "request_id", reqid.From(ctx), "err", err)
			none := time.Time{}
			now, terr := m.deps.Store.Transition(context.WithoutCancel(ctx), rec.ID, store.Transition{
				From: []string{api.StateStarting}, To: api.StateFailed,
				Error: startReason(ctx, err, m.cfg.StartTimeout), Expires: &none,
			})
			switch {
			case errors.Is(terr, store.ErrTransition):
				ended = &endedWhileStarting{state: now.State}
			case terr != nil:
				log.Error("record failed sandbox", "err", terr)
			}
		}
		if ended != nil {
			log.Info("sandbox ended while it was starting", "state", ended.state)
			return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s ended while it was starting: it is %s (deleted, or lost to a daemon restart)", rec.ID, ended.state)
		}
		if ctx.Err() != nil {
			return api.Sandbox{}, api.Errorf(api.CodeTimeout, "sandbox start cancelled: %v", ctx.Err())
		}
		return api.Sandbox{}, err
	}
	log.Info("sandbox running", "runtime", rt.Name(), "template", rec.Template, "origin", rec.Origin)
	return m.view(rec), nil
}

// endedWhileStarting is start's answer when its sandbox was moved on
// before it could record it running: a delete stopped it, or a restarted
// daemon marked it failed.
type endedWhileStarting struct{ state string }

func (e *endedWhileStarting) Error() string { return "it is " + e.state + " already" }

// startFailure is a step of start that failed, in words for the sandbox's
// owner; the error under it, with host paths and internal detail, goes to
// the node's log only.
type startFailure struct {
	step string
	err  error
}

func (f *startFailure) Error() string { return f.step + ": " + f.err.Error() }
func (f *startFailure) Unwrap() error { return f.err }

// failed wraps err, if any, as the failure of step.
func failed(step string, err error) error {
	if err == nil {
		return nil
	}
	return &startFailure{step: step, err: err}
}

// startReason is a failed start's record error: what failed, and the
// request whose log lines say why.
func startReason(ctx context.Context, err error, timeout time.Duration) string {
	step := "the node could not start it"
	var f *startFailure
	if errors.As(err, &f) {
		step = f.step
	}
	if errors.Is(err, context.DeadlineExceeded) {
		step = fmt.Sprintf("it did not start within %s", timeout)
	}
	if id := reqid.From(ctx); id != "" {
		return fmt.Sprintf("start failed: %s (request %s: the node's log has the detail)", step, id)
	}
	return "start failed: " + step
}

// start clones the disk and boots the sandbox; on failure it leaves nothing
// behind but the record.
func (m *Manager) start(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, src source) (err error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	var undo cleanup.Stack
	defer undo.RunIf(&err)

	t0 := time.Now()
	// The router is made while the disk is cloned and the runtime starts;
	// the runtime waits for it only when it links the sandbox to it.
	att := m.attachNetwork(ctx, rec)
	undo.Add(att.undo)
	diskPath := m.diskPath(rec.ID)
	if err := m.deps.Pool.Clone(ctx, src.image, diskPath); err != nil {
		return failed("its disk could not be made", fmt.Errorf("clone disk: %w", err))
	}
	undo.Add(func() { os.Remove(diskPath) })
	if want := rec.DiskMB << 20; want > src.size {
		if err := m.deps.Pool.Grow(diskPath, want); err != nil {
			return failed("its disk could not be made", fmt.Errorf("grow disk: %w", err))
		}
	}
	if rec.WorkspaceMB > 0 {
		ws := m.workspacePath(rec.ID)
		if err := m.workspaceDisk(ctx, src.workspace, ws, rec.WorkspaceMB<<20); err != nil {
			return failed("its workspace disk could not be made", err)
		}
		undo.Add(func() { os.Remove(ws) })
	}
	dir := m.stateDir(rec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return failed("the node could not prepare it", fmt.Errorf("sandbox dir: %w", err))
	}
	undo.Add(func() { os.RemoveAll(dir) })

	tClone := time.Now()
	spec := m.spec(rec)
	if att != nil {
		spec.Network = att
	}
	inst, err := rt.Start(ctx, spec)
	if err != nil {
		return failed("its runtime could not start it", err)
	}
	tStart := time.Now()
	undo.Add(func() { inst.Stop(context.WithoutCancel(ctx)) })
	conn := inst.Dial()
	undo.Add(conn.Close)
	// The runtime returns once the agent is about to serve on a socket that
	// is already listening: Init is also the readiness check.
	_, err = conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{
		SandboxId: rec.ID, Hostname: rec.ID, Envs: rec.Env,
	}))
	if err != nil {
		return failed("its agent did not answer", fmt.Errorf("init agent: %w", err))
	}
	tReady := time.Now()

	slot, err := att.slot()
	if err != nil {
		return failed("its network could not be set up", err)
	}
	// Live before running: a delete that sees the record running finds
	// what to tear down. One that saw it starting has moved it to stopped
	// already, and this move then fails: the undo stack unwinds.
	l := &live{tenant: rec.Tenant, rt: rt, inst: inst, conn: conn}
	m.mu.Lock()
	m.live[rec.ID] = l
	m.mu.Unlock()
	undo.Add(func() {
		m.mu.Lock()
		if m.live[rec.ID] == l {
			delete(m.live, rec.ID)
		}
		m.mu.Unlock()
	})
	moved, err := m.deps.Store.Transition(context.WithoutCancel(ctx), rec.ID, store.Transition{
		From: []string{api.StateStarting}, To: api.StateRunning, Version: rec.Version,
		RuntimeState: inst.State(), NetSlot: &slot,
	})
	if errors.Is(err, store.ErrTransition) {
		return &endedWhileStarting{state: moved.State}
	}
	if err != nil {
		return failed("the node could not record it", fmt.Errorf("record running sandbox: %w", err))
	}
	*rec = moved
	go m.watch(rec.ID, l)
	m.log.Debug("sandbox start timings", "sandbox", rec.ID, "clone", tClone.Sub(t0), "network", att.took(),
		"runtime", tStart.Sub(tClone), "agent_init", tReady.Sub(tStart), "record", time.Since(tReady))
	return nil
}

// workspaceDisk makes the workspace disk at path: a clone of from (grown to
// size if it is smaller), or an empty ext4 filesystem of size bytes.
func (m *Manager) workspaceDisk(ctx context.Context, from, path string, size int64) error {
	if from != "" {
		if err := m.deps.Pool.Clone(ctx, from, path); err != nil {
			return fmt.Errorf("clone workspace disk: %w", err)
		}
		if st, err := os.Stat(path); err == nil && st.Size() < size {
			if err := m.deps.Pool.Grow(path, size); err != nil {
				return fmt.Errorf("grow workspace disk: %w", err)
			}
		}
		return nil
	}
	if err := disk.MakeExt4(ctx, path, size); err != nil {
		return fmt.Errorf("workspace disk: %w", err)
	}
	return nil
}

func (m *Manager) spec(rec *store.Sandbox) runtime.Spec {
	ws := ""
	if rec.WorkspaceMB > 0 {
		ws = m.workspacePath(rec.ID)
	}
	return runtime.Spec{
		ID:        rec.ID,
		Disk:      m.diskPath(rec.ID),
		Workspace: ws,
		Hostname:  rec.ID,
		Dir:       m.stateDir(rec.ID),
		Limits: runtime.Limits{
			CPUs:        rec.CPUs,
			MemoryBytes: rec.MemoryMB << 20,
			Pids:        rec.Pids,
		},
	}
}

// watch marks a sandbox failed when its init exits without Delete asking.
func (m *Manager) watch(id string, l *live) {
	<-l.inst.Done()
	m.mu.Lock()
	if l.deleting || m.live[id] != l {
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
// state. Its disks go too, except when a sandbox that ran fails (its agent
// died, or it could not be adopted after a restart): those stay until its
// owner deletes it or its expiry passes (dropDisks), so that a crash never
// loses the user's work, which a snapshot of the failed sandbox saves.
func (m *Manager) teardown(ctx context.Context, id string, l *live, state, reason string) error {
	m.ledger.release(id)
	var errs []error
	if l != nil {
		l.conn.Close()
		errs = append(errs, l.inst.Stop(ctx))
	}
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	keep := err == nil && state == api.StateFailed && (rec.State == api.StateRunning || rec.State == api.StatePaused) &&
		rec.ExpiresAt.After(time.Now())
	expires := rec.ExpiresAt
	if keep {
		m.ledger.restore(id, diskClaim(rec))
		reason += fmt.Sprintf("; its disk is kept until %s (or until it is deleted): snapshot it to save its work",
			rec.ExpiresAt.UTC().Format(time.RFC3339))
	} else {
		errs = append(errs, m.removeDisks(id))
		expires = time.Time{}
	}
	if rerr := os.RemoveAll(m.stateDir(id)); rerr != nil {
		errs = append(errs, rerr)
	}
	errs = append(errs, m.detachNetwork(id))
	if err == nil && !slices.Contains(store.Live, rec.State) {
		return errors.Join(errs...) // already final: another teardown recorded how it ended
	}
	if err == nil {
		// From any live state: the end wins over a pause or resume that
		// moved the record since it was read, and over a timeout.
		_, err = m.deps.Store.Transition(ctx, id, store.Transition{
			From: store.Live, To: state, Error: reason, Expires: &expires,
		})
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

// removeDisks removes a sandbox's disk images.
func (m *Manager) removeDisks(id string) error {
	var errs []error
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

// isolationRank orders runtimes by strength; unknown names rank lowest.
func isolationRank(name string) int {
	switch name {
	case api.IsolationVM:
		return 2
	case api.IsolationContainer:
		return 1
	}
	return 0
}

// accelerated is a runtime that runs its sandboxes under an accelerator
// ("kvm", "tcg"): the vm runtime.
type accelerated interface{ Accel() string }

func accelOf(rt runtime.Runtime) string {
	if a, ok := rt.(accelerated); ok {
		return a.Accel()
	}
	return ""
}

// pickRuntime resolves the requested runtime name. "auto" (or "") takes the
// strongest available runtime, but not a vm under TCG (software emulation,
// seconds per boot: for testing, asked for by name) unless the node
// requires vm isolation. A runtime weaker than Config.RequireIsolation is
// refused.
func (m *Manager) pickRuntime(name string) (runtime.Runtime, error) {
	req := m.cfg.RequireIsolation
	if name == "" || name == "auto" {
		var reasons []string
		for _, rt := range m.deps.Runtimes {
			switch err := rt.Available(); {
			case err != nil:
				reasons = append(reasons, rt.Name()+": "+err.Error())
			case isolationRank(rt.Name()) < isolationRank(req):
				reasons = append(reasons, rt.Name()+": weaker than the required isolation "+req)
			case accelOf(rt) == "tcg" && req != api.IsolationVM:
				reasons = append(reasons, rt.Name()+": runs under tcg software emulation, picked only by name")
			default:
				return rt, nil
			}
		}
		if req != "" {
			return nil, api.Errorf(api.CodeConflict, "this node requires %s isolation and no such runtime is available (%s)", req, strings.Join(reasons, "; "))
		}
		return nil, api.Errorf(api.CodeUnavailable, "no runtime available on this node (%s)", strings.Join(reasons, "; "))
	}
	for _, rt := range m.deps.Runtimes {
		if rt.Name() == name {
			if isolationRank(name) < isolationRank(req) {
				return nil, api.Errorf(api.CodeBadRequest, "this node requires %s isolation: runtime %s is weaker", req, name)
			}
			if err := rt.Available(); err != nil {
				return nil, api.Errorf(api.CodeUnavailable, "runtime %s is not available on this node: %v", name, err)
			}
			return rt, nil
		}
	}
	var names []string
	for _, rt := range m.deps.Runtimes {
		names = append(names, rt.Name())
	}
	return nil, api.Errorf(api.CodeBadRequest, "unknown runtime %q (this node has: auto, %s)", name, strings.Join(names, ", "))
}

// validate checks a create request against the node's bounds and fills in
// defaults; every refusal is a bad_request saying what is allowed.
func (m *Manager) validate(tenant string, req api.CreateSandboxRequest, src source) (store.Sandbox, error) {
	c := m.cfg
	bad := func(format string, args ...any) (store.Sandbox, error) {
		return store.Sandbox{}, api.Errorf(api.CodeBadRequest, format, args...)
	}
	maxCPUs := float64(goruntime.NumCPU())
	cpus := req.CPUs
	if cpus == 0 {
		cpus = min(c.DefaultCPUs, maxCPUs)
	}
	if cpus < 0.01 || cpus > maxCPUs {
		return bad("cpus must be between 0.01 and %g (this node's cores), got %g", maxCPUs, req.CPUs)
	}
	mem := req.MemoryMB
	if mem == 0 {
		mem = c.DefaultMemoryMB
	}
	if mem < 64 || mem > c.MaxMemoryMB {
		return bad("memory_mb must be between 64 and %d, got %d", c.MaxMemoryMB, req.MemoryMB)
	}
	pids := req.Pids
	if pids == 0 {
		pids = c.DefaultPids
	}
	if pids < 16 || pids > c.MaxPids {
		return bad("pids must be between 16 and %d, got %d", c.MaxPids, req.Pids)
	}
	srcMB := (src.size + 1<<20 - 1) >> 20
	diskMB := req.DiskMB
	if diskMB == 0 {
		diskMB = srcMB
	}
	if diskMB < srcMB || diskMB > c.MaxDiskMB {
		return bad("disk_mb must be between %d (the disk it starts from) and %d, got %d", srcMB, c.MaxDiskMB, req.DiskMB)
	}
	if req.WorkspaceMB != 0 && (req.WorkspaceMB < minWorkspaceMB || req.WorkspaceMB > c.MaxDiskMB) {
		return bad("workspace_mb must be 0 (none) or between %d and %d, got %d", minWorkspaceMB, c.MaxDiskMB, req.WorkspaceMB)
	}
	// Compared in seconds: a huge value would overflow a Duration.
	maxSeconds := int64(c.MaxTTL / time.Second)
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxSeconds {
		return bad("timeout_seconds must be between 1 and %d, got %d", maxSeconds, req.TimeoutSeconds)
	}
	ttl := time.Duration(req.TimeoutSeconds) * time.Second
	if req.TimeoutSeconds == 0 {
		ttl = c.DefaultTTL
	}
	if err := validEnv(req.Env); err != nil {
		return store.Sandbox{}, err
	}
	if err := validMetadata(req.Metadata); err != nil {
		return store.Sandbox{}, err
	}
	netPol, err := m.validNetwork(req.Network)
	if err != nil {
		return store.Sandbox{}, err
	}
	now := time.Now()
	return store.Sandbox{
		Tenant: tenant, Template: src.template, State: api.StateStarting,
		CPUs: cpus, MemoryMB: mem, Pids: pids, DiskMB: diskMB, WorkspaceMB: req.WorkspaceMB,
		Env: req.Env, Metadata: req.Metadata, Network: netPol,
		CreatedAt: now, ExpiresAt: now.Add(ttl),
	}, nil
}

func validEnv(env map[string]string) error {
	if len(env) > 256 {
		return api.Errorf(api.CodeBadRequest, "env has %d variables; at most 256", len(env))
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return api.Errorf(api.CodeBadRequest, "env variable %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
		if len(k)+len(v) > 32<<10 {
			return api.Errorf(api.CodeBadRequest, "env variable %q is longer than 32 KiB", k)
		}
	}
	return nil
}

func validMetadata(md map[string]string) error {
	if len(md) > 64 {
		return api.Errorf(api.CodeBadRequest, "metadata has %d entries; at most 64", len(md))
	}
	for k, v := range md {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return api.Errorf(api.CodeBadRequest, "metadata %q: keys must be 1-128 bytes, values at most 1024", k)
		}
	}
	return nil
}

// record returns the sandbox's record if tenant may see it.
func (m *Manager) record(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.Tenant != tenant && tenant != store.AnyTenant) {
		return store.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox: %w", err)
	}
	return rec, nil
}

// Get returns one of the tenant's sandboxes.
func (m *Manager) Get(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	return m.view(rec), nil
}

// List returns a page of the tenant's sandboxes in one of states (any when
// empty), the recently ended ones included. A listed sandbox carries no
// env: Get shows it.
func (m *Manager) List(ctx context.Context, tenant string, states []string, page store.Page) ([]api.Sandbox, error) {
	if tenant == store.AnyTenant {
		tenant = "" // the store's every tenant
	}
	recs, err := m.deps.Store.ListSandboxes(ctx, tenant, states, page)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]api.Sandbox, 0, len(recs))
	for _, r := range recs {
		r.Env = nil
		out = append(out, m.view(r))
	}
	return out, nil
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
// still starting is only moved to stopped: its create owns what it has
// made so far and unwinds it when its own move to running is refused.
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
			none := time.Time{}
			rec, err := m.deps.Store.Transition(ctx, id, store.Transition{
				From: []string{api.StateStarting}, To: api.StateStopped, Error: reason, Expires: &none,
			})
			switch {
			case err == nil:
				m.log.Info("sandbox stopped while it was starting", "sandbox", id, "reason", reason)
				return nil
			case !errors.Is(err, store.ErrTransition):
				return fmt.Errorf("delete sandbox %s: %w", id, err)
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

// SetTimeout makes the sandbox expire timeout from now.
func (m *Manager) SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (api.Sandbox, error) {
	if timeout < time.Second || timeout > m.cfg.MaxTTL {
		return api.Sandbox{}, api.Errorf(api.CodeBadRequest, "timeout_seconds must be between 1 and %d", int64(m.cfg.MaxTTL/time.Second))
	}
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	rec, err = m.deps.Store.SetExpiry(ctx, id, time.Now().Add(timeout), store.Live...)
	if errors.Is(err, store.ErrTransition) {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is %s", id, rec.State)
	}
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("set timeout: %w", err)
	}
	return m.view(rec), nil
}

// Agent returns the connection to a running sandbox's guest agent.
func (m *Manager) Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return l.conn, nil
}

// running returns one of tenant's running sandboxes; not_found or conflict
// otherwise.
func (m *Manager) running(ctx context.Context, tenant, id string) (*live, error) {
	l, err := m.alive(ctx, tenant, id, api.StateRunning)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	paused := l.paused
	m.mu.Unlock()
	if paused {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s is paused: resume it first", id)
	}
	return l, nil
}

// alive returns one of tenant's sandboxes that this process runs, running
// or paused; not_found, or a conflict saying it is not in the state want.
func (m *Manager) alive(ctx context.Context, tenant, id, want string) (*live, error) {
	m.mu.Lock()
	l := m.live[id]
	ok := l != nil && l.tenant == tenant && !l.deleting
	m.mu.Unlock()
	if ok {
		return l, nil
	}
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return nil, api.Errorf(api.CodeConflict, "sandbox %s is not %s (state %s)", id, want, rec.State)
}

// Info describes the node.
func (m *Manager) Info(ctx context.Context, tenant string, admin bool) api.NodeInfo {
	info := api.NodeInfo{
		Version:       m.deps.Version,
		Kernel:        kernelName(),
		CloneMode:     m.deps.Pool.Mode().String(),
		CgroupVersion: m.deps.CgroupVersion,
	}
	if admin {
		info.BlobStore = m.deps.Snapshots.BlobStore()
	}
	for _, rt := range m.deps.Runtimes {
		ri := api.RuntimeInfo{Name: rt.Name(), Isolation: rt.Isolation(), Available: true, Accel: accelOf(rt)}
		if err := rt.Available(); err != nil {
			ri.Available, ri.Reason = false, err.Error()
		}
		info.Runtimes = append(info.Runtimes, ri)
	}
	m.mu.Lock()
	for _, l := range m.live {
		if admin || l.tenant == tenant {
			info.Sandboxes++
		}
	}
	m.mu.Unlock()
	return info
}

// Templates lists the node's templates.
func (m *Manager) Templates(ctx context.Context) ([]api.Template, error) {
	infos, err := m.deps.Templates.List()
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]api.Template, 0, len(infos))
	for _, t := range infos {
		out = append(out, templateView(t))
	}
	return out, nil
}

// BuildTemplate builds (or rebuilds) a template, writing progress lines.
func (m *Manager) BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
	if err := template.ValidName(name); err != nil {
		return api.Template{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	info, err := m.deps.Templates.Build(ctx, name, progress)
	if errors.Is(err, template.ErrUnknownRecipe) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "no recipe for template %q (known: %s)", name, strings.Join(template.Recipes(), ", "))
	}
	if err != nil {
		return api.Template{}, api.Errorf(api.CodeInternal, "build template %s: %v", name, err)
	}
	if _, err := m.deps.Snapshots.EnsureBase(ctx, info.Name, info.Path, info.BuiltAt); err != nil {
		m.log.Warn("template base layer", "template", info.Name, "err", err)
	}
	return templateView(info), nil
}

func templateView(t template.Info) api.Template {
	return api.Template{Name: t.Name, SizeBytes: t.SizeBytes, UsedBytes: t.UsedBytes, BuiltAt: t.BuiltAt}
}

// view is the API's picture of a record.
func (m *Manager) view(r store.Sandbox) api.Sandbox {
	iso, acc := r.Runtime, ""
	for _, rt := range m.deps.Runtimes {
		if rt.Name() == r.Runtime {
			iso, acc = rt.Isolation(), accelOf(rt)
		}
	}
	return api.Sandbox{
		ID: r.ID, Tenant: r.Tenant, Template: r.Template, Runtime: r.Runtime, Isolation: iso, Accel: acc,
		State: r.State, Error: r.Error, DiskKept: keepsDisks(r),
		CPUs: r.CPUs, MemoryMB: r.MemoryMB, Pids: r.Pids, DiskMB: r.DiskMB,
		Env: r.Env, Metadata: r.Metadata, Origin: r.Origin,
		WorkspaceMB: r.WorkspaceMB, WorkspaceOrigin: r.WorkspaceOrigin, Network: r.Network,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
	}
}

// reap deletes expired sandboxes and forgets old ended ones until ctx ends.
func (m *Manager) reap(ctx context.Context) {
	defer m.reaper.Done()
	t := time.NewTicker(m.cfg.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		expired, err := m.deps.Store.ExpiredSandboxes(ctx, now)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error("find expired sandboxes", "err", err)
			}
			continue
		}
		for _, rec := range expired {
			switch {
			case rec.State == api.StateStarting:
				continue // Create owns it until it runs or fails
			case keepsDisks(rec):
				if err := m.dropDisks(ctx, rec); err != nil {
					m.log.Error("expire failed sandbox", "sandbox", rec.ID, "err", err)
				}
			default:
				m.kill(ctx, rec.ID, "timeout expired")
			}
		}
		if _, err := m.deps.Store.PurgeFinal(ctx, now.Add(-m.cfg.KeepFinal)); err != nil && ctx.Err() == nil {
			m.log.Error("purge ended sandboxes", "err", err)
		}
	}
}

// Pause saves a running sandbox's memory and ends its process (a runtime
// that implements runtime.Pauser: the vm runtime); its processes carry on
// from where they were at Resume. CodeConflict for a sandbox that is not
// running or whose runtime cannot pause.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	p, ok := l.inst.(runtime.Pauser)
	if !ok {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s runs in the %s runtime, which cannot pause with memory (only vm sandboxes can)", id, l.rt.Name())
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
		m.log.Warn("sandbox pause failed", "sandbox", id, "err", err)
		return api.Sandbox{}, fmt.Errorf("pause sandbox %s: %w", id, err)
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
		m.log.Warn("sandbox resume failed", "sandbox", id, "err", err)
		return api.Sandbox{}, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	took := time.Since(t0)
	m.mu.Lock()
	l.paused = false
	m.mu.Unlock()
	rec, err := m.setState(ctx, l, id, api.StateRunning)
	if err != nil {
		return api.Sandbox{}, err
	}
	m.log.Info("sandbox resumed", "sandbox", id, "memory_mb", rec.MemoryMB, "took", took)
	return m.view(rec), nil
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
