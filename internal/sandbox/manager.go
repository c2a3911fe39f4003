// Package sandbox is the node's sandbox manager: the lifecycle of the
// sandboxes that run on this node, and nothing else. It admits them within
// what the node holds (admit.go), creates them from a built-in template, a
// tenant's template version or a warm pool (clone the disk, start a
// runtime, wait for the agent), restores and forks them from snapshots and
// memory images, pauses, resumes, moves and deletes them, keeps their
// records in the store by its state machine, deletes them when their time
// is up, and after a daemon restart reconciles what the store says with
// what is really running, so no sandbox is left half-alive.
//
// It is not the API (internal/server speaks HTTP), not a runtime (how a
// sandbox is isolated is internal/runtime's), not the snapshot engine
// (internal/snapshot), and not the template builder: tenants' templates
// are built, listed and deleted by internal/tenanttpl, a client of the
// manager through its exported methods.
package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/blockserver"
	"warren/internal/disk"
	"warren/internal/listing"
	"warren/internal/metrics"
	"warren/internal/network"
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
	// EventsWindow is how long events stay for a stream to replay, and
	// EventsKept how many at most (docs/API.md, "Events").
	EventsWindow time.Duration
	EventsKept   int64
	// DefaultPausedTTL is how long a paused sandbox is kept when its
	// lifecycle does not say; MaxPausedTTL the most it may say.
	DefaultPausedTTL time.Duration
	MaxPausedTTL     time.Duration
	// ReapEvery is how often expired sandboxes are looked for.
	ReapEvery time.Duration
	// StartTimeout bounds a sandbox's start, agent readiness included.
	StartTimeout time.Duration
	// RequireIsolation, when set (api.IsolationVM, api.IsolationGVisor or api.IsolationContainer),
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
		// A sleeping sandbox costs the blob store its disk's changes and
		// nothing else: a week by default, as long as a month.
		DefaultPausedTTL: 7 * 24 * time.Hour,
		MaxPausedTTL:     30 * 24 * time.Hour,
		EventsWindow:     time.Hour,
		EventsKept:       100000,
		ReapEvery:        time.Second,
		StartTimeout:     30 * time.Second,
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
		{&c.EventsWindow, &d.EventsWindow}, {&c.ReapEvery, &d.ReapEvery}, {&c.StartTimeout, &d.StartTimeout},
		{&c.DefaultPausedTTL, &d.DefaultPausedTTL}, {&c.MaxPausedTTL, &d.MaxPausedTTL},
	} {
		if *p.v == 0 {
			*p.v = *p.def
		}
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = d.DefaultCPUs
	}
	set(&c.DefaultMemoryMB, d.DefaultMemoryMB)
	set(&c.EventsKept, d.EventsKept)
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
	// Secrets resolves the secrets egress rules name; nil: rules that
	// name secrets are refused.
	Secrets Secrets
	// Host is what the node's host has, for admission.
	Host HostCapacity
	// NodeID names this node in the fleet: its sandboxes' records carry
	// it, and it adopts and reaps only those. Region and Labels are the
	// fleet's for it ("" and none on a single machine): it refuses a
	// request that names others.
	NodeID string
	Region string
	Labels map[string]string
	// Metrics, when not nil, gets the manager's gauges and the times of
	// its operations.
	Metrics *metrics.Registry
	// Blocks is the node's block server, which serves always-on disks;
	// nil: the node refuses them.
	Blocks *blockserver.Lazy
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

	mu   sync.Mutex       // guards live, arriving, wakes and the prefetch's
	live map[string]*live // sandboxes this process runs, by ID
	// arriving are the moved sandboxes being started here (move.go), and
	// wakes the paused ones being woken here (pause.go); prefetching is
	// set while the sleeping sandboxes placed here changed at or after
	// prefetched have their pause snapshots fetched (pause.go).
	arriving    map[string]bool
	wakes       map[string]*waking
	prefetching bool
	prefetched  time.Time
	sweptWakes  time.Time // when the fetched memory images were last swept
	// imageFetches are the fetches of sleeping sandboxes' memory images
	// under way, by path (pause.go).
	imageFetches singleflight.Group

	// ledger holds what the node's sandboxes claim of it.
	ledger *ledger

	// pools are the node's shares of the warm pools (pools.go), guarded
	// by poolsMu; poolSyncMu serializes their syncs and guards
	// poolsReported, whether the node's last report held a share.
	poolsMu       sync.Mutex
	pools         map[poolKey]*warm
	poolSyncMu    sync.Mutex
	poolsReported bool

	// images are the node's memory images (images.go).
	images *images

	stop  context.CancelFunc // stops the loops: the reaper, checkpoints and moves
	loops sync.WaitGroup
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
	// every is the sandbox's checkpoint policy (0: none); checkpointed
	// when its last checkpoint was taken (or it started), and
	// checkpointing set while one is under way (both under Manager.mu).
	every         time.Duration
	checkpointed  time.Time
	checkpointing bool
	// lifecycle is its record's: how it sleeps and wakes. used counts the
	// calls that use it (activity). stopping is set (under Manager.mu)
	// once a pause without memory stops it: its exit is no failure;
	// timingOut while its lifecycle pauses or ends it.
	lifecycle api.Lifecycle
	used      activity
	stopping  bool
	timingOut bool
}

// newLive is running sandbox rec as the node holds it.
func newLive(rec *store.Sandbox, rt runtime.Runtime, inst runtime.Instance, conn *agentconn.Conn) *live {
	l := &live{tenant: rec.Tenant, rt: rt, inst: inst, conn: conn, every: rec.CheckpointEvery,
		checkpointed: time.Now(), lifecycle: rec.Lifecycle}
	l.used.touch()
	return l
}

// activity is what uses a sandbox: calls in flight, and when the last one
// ended (Unix nanoseconds). Its zero value is unused since ever.
type activity struct {
	inflight atomic.Int64
	last     atomic.Int64
}

// hold counts a call that uses the sandbox until ctx ends (its request is
// answered, or its stream closed).
func (a *activity) hold(ctx context.Context) { context.AfterFunc(ctx, a.begin()) }

// begin counts a use of the sandbox until end is called (once).
func (a *activity) begin() (end func()) {
	a.inflight.Add(1)
	a.touch()
	return sync.OnceFunc(func() {
		a.touch()
		a.inflight.Add(-1)
	})
}

// touch records a use of the sandbox now.
func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// idle is how long the sandbox has gone unused at now: 0 while a call is
// in flight.
func (a *activity) idle(now time.Time) time.Duration {
	if a.inflight.Load() > 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, a.last.Load())))
}

// New makes the manager, reconciles the store with what is running on the
// node (after a daemon restart), and starts its loops: the reaper of
// expired sandboxes, the checkpoints, the starts of moved sandboxes and the
// warm pools' syncs.
func New(ctx context.Context, deps Deps, cfg Config) (*Manager, error) {
	if deps.NodeID == "" {
		return nil, errors.New("the node has no ID")
	}
	if err := os.MkdirAll(deps.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.MkdirAll(disksDir(deps.Pool), 0o700); err != nil {
		return nil, fmt.Errorf("disks dir: %w", err)
	}
	imgs, err := newImages(filepath.Join(deps.Pool.Dir(), "images"))
	if err != nil {
		return nil, err
	}
	m := &Manager{log: deps.Log, deps: deps, cfg: cfg.withDefaults(), live: map[string]*live{}, arriving: map[string]bool{}, wakes: map[string]*waking{},
		pools: map[poolKey]*warm{}, images: imgs}
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
	if deps.Metrics != nil {
		m.registerMetrics(deps.Metrics)
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.loops.Add(4)
	go m.reap(rctx)
	go m.checkpoints(rctx)
	go m.moves(rctx)
	go m.syncPools(rctx)
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

// Close stops the loops, discards the warm pools' members and removes the
// memory images. Running
// sandboxes keep running: the next daemon process adopts them.
func (m *Manager) Close() {
	m.stop()
	m.loops.Wait()
	m.closePools()
	m.images.close()
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

// record returns the sandbox's record if tenant may see it.
func (m *Manager) record(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.Tenant != tenant && tenant != listing.AnyTenant) {
		return store.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox: %w", err)
	}
	return rec, nil
}

// Usage is what the node may promise and what its sandboxes hold.
func (m *Manager) Usage() Usage { return m.ledger.usage() }

// Running counts the sandboxes this process runs for tenant, or for every
// tenant with listing.AnyTenant.
func (m *Manager) Running(tenant string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.live {
		if tenant == listing.AnyTenant || l.tenant == tenant {
			n++
		}
	}
	return n
}

// Get returns one of the tenant's sandboxes.
func (m *Manager) Get(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	v := m.view(rec)
	if alwaysOn(&rec) && m.isVolume(id) {
		v.Volume = m.volumeState(ctx, id)
	}
	return v, nil
}

// List returns a page of the tenant's sandboxes in one of states (any when
// empty), the recently ended ones included. A listed sandbox carries no
// env: Get shows it.
func (m *Manager) List(ctx context.Context, tenant string, states []string, page listing.Page) ([]api.Sandbox, error) {
	if tenant == listing.AnyTenant {
		tenant = "" // the store's every tenant
	}
	recs, err := m.deps.Store.ListSandboxes(ctx, tenant, states, page)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]api.Sandbox, 0, len(recs))
	for _, r := range recs {
		r.Env, r.AgentToken = nil, ""
		out = append(out, m.view(r))
	}
	return out, nil
}

// Agent returns the connection to a running sandbox's guest agent, for a
// call that uses it until ctx ends: a paused sandbox with auto_resume
// wakes first.
func (m *Manager) Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error) {
	l, err := m.use(ctx, tenant, id, "a call to its agent")
	if err != nil {
		return nil, err
	}
	return l.conn, nil
}

// use returns one of tenant's running sandboxes for a call (what, for a
// wake's reason) that uses it until ctx ends; a paused one whose lifecycle
// says auto_resume wakes first, and any other is a conflict naming its
// state.
func (m *Manager) use(ctx context.Context, tenant, id, what string) (*live, error) {
	for range 3 {
		m.mu.Lock()
		l := m.live[id]
		ok := l != nil && l.tenant == tenant && !l.deleting
		paused := ok && l.paused
		m.mu.Unlock()
		if ok && !paused {
			l.used.hold(ctx)
			return l, nil
		}
		rec, err := m.record(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		switch {
		case rec.State == api.StateStarting && m.waitWake(ctx, id):
			continue // woken meanwhile, here
		case rec.State == api.StateRunning && l == nil && rec.Node == m.deps.NodeID:
			continue // woken here since the look above
		case rec.State == api.StateRunning && rec.Node != m.deps.NodeID:
			// A request sent to the wrong node (a fleet's front that
			// knew no better): the node that runs it must answer.
			return nil, api.Errorf(api.CodeConflict, "sandbox %s runs on node %s, not on this one (%s): retry", id, rec.Node, m.deps.NodeID)
		case !paused && rec.State != api.StatePaused:
			return nil, api.Errorf(api.CodeConflict, "sandbox %s is not running (state %s)", id, rec.State)
		case !rec.Lifecycle.AutoResume:
			return nil, api.Errorf(api.CodeConflict, "sandbox %s is paused: resume it first (or create it with auto_resume)", id)
		}
		_, err = m.resume(ctx, tenant, id, store.Cause{Auto: true, Reason: what})
		if err != nil && !api.IsCode(err, api.CodeConflict) {
			return nil, err
		}
	}
	return nil, api.Errorf(api.CodeConflict, "sandbox %s did not stay awake for the call: retry", id)
}

// waitWake waits for the wake of sandbox id under way on this node, if
// one is (or until ctx ends), and says whether there was one.
func (m *Manager) waitWake(ctx context.Context, id string) bool {
	m.mu.Lock()
	w := m.wakes[id]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	return true
}

// running returns one of tenant's running sandboxes, as it is: not_found
// or conflict otherwise.
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
	if rec.State == api.StatePaused {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s is paused: resume it first", id)
	}
	return nil, api.Errorf(api.CodeConflict, "sandbox %s is not %s (state %s)", id, want, rec.State)
}

// view is the API's picture of a record.
func (m *Manager) view(r store.Sandbox) api.Sandbox {
	iso, acc := r.Runtime, ""
	for _, rt := range m.deps.Runtimes {
		if rt.Name() == r.Runtime {
			iso, acc = rt.Isolation(), runtime.Accel(rt)
		}
	}
	v := api.Sandbox{
		ID: r.ID, Tenant: r.Tenant, Template: r.Template, TemplateVersion: r.TemplateVersion,
		Runtime: r.Runtime, Isolation: iso, Accel: acc,
		State: r.State, Error: r.Error, DiskKept: keepsDisks(r),
		CPUs: r.CPUs, MemoryMB: r.MemoryMB, Pids: r.Pids, DiskMB: r.DiskMB,
		Env: r.Env, Metadata: r.Metadata, Origin: r.Origin, AgentToken: r.AgentToken,
		WorkspaceMB: r.WorkspaceMB, WorkspaceOrigin: r.WorkspaceOrigin, Network: r.Network,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		CheckpointEverySeconds: int64(r.CheckpointEvery / time.Second),
		Persistence:            cmp.Or(r.Persistence, api.PersistenceSnapshot),
	}
	if r.Checkpoint != "" {
		v.Checkpoint = &api.Checkpoint{Snapshot: r.Checkpoint, At: r.CheckpointAt}
	}
	if r.Restored != nil && !r.Restored.At.IsZero() {
		v.Restored = r.Restored
	}
	v.Lifecycle = r.Lifecycle
	if r.Paused != nil {
		p := *r.Paused
		p.Held, p.Standby = r.Held(), r.Standby
		v.Paused = &p
	}
	return v
}
