package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agentconn"
	"warren/internal/cleanup"
	"warren/internal/disk"
	"warren/internal/ident"
	"warren/internal/metrics"
	"warren/internal/reqid"
	"warren/internal/runtime"
	"warren/internal/store"
	"warren/internal/template"
)

// Create starts a sandbox and returns once its agent answers.
func (m *Manager) Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (sb api.Sandbox, err error) {
	t0 := time.Now()
	defer func() {
		if err == nil {
			m.observe(metrics.OpCreate, t0)
		}
	}()
	rt, err := m.pickRuntime(req.Runtime)
	if err != nil {
		return api.Sandbox{}, err
	}
	tpl, err := m.template(req.Template)
	if pinned := strings.Contains(req.Template, "@"); err != nil || pinned {
		// Not built in: one of the tenant's own, if it has it.
		tv, terr := m.TemplateVersion(ctx, tenant, req.Template)
		switch {
		case terr == nil:
			return m.createFromTemplate(ctx, tenant, req, tv)
		case pinned || !api.IsCode(terr, api.CodeNotFound):
			return api.Sandbox{}, terr
		}
		return api.Sandbox{}, err
	}
	src := templateSource(tpl)
	rec, err := m.validate(ctx, tenant, req, src)
	if err != nil {
		return api.Sandbox{}, err
	}
	if sb, ok, err := m.fromPool(ctx, rt, rec, tpl); ok {
		return sb, err
	}
	ids, err := m.admit(rec, rt, 1)
	if err != nil {
		return api.Sandbox{}, err
	}
	rec.ID = ids[0]
	return m.launch(ctx, rt, rec, src)
}

// template returns the template name ("": the default).
func (m *Manager) template(name string) (template.Info, error) {
	if name == "" {
		name = m.cfg.DefaultTemplate
	}
	tpl, err := m.deps.Templates.Get(name)
	switch {
	case errors.Is(err, template.ErrInvalidName):
		return template.Info{}, api.Errorf(api.CodeBadRequest, "template: %v", template.ValidName(name))
	case errors.Is(err, template.ErrNotFound):
		return template.Info{}, api.Errorf(api.CodeNotFound, "template %q not found", name)
	case err != nil:
		return template.Info{}, fmt.Errorf("template %s: %w", name, err)
	}
	return tpl, nil
}

// admit checks a validated sandbox against the host and claims n of it
// from the node and the tenant (all or none); it returns their new IDs.
func (m *Manager) admit(rec store.Sandbox, rt runtime.Runtime, n int) ([]string, error) {
	if err := m.ledger.fits(rec.MemoryMB, rec.Pids); err != nil {
		return nil, err
	}
	if err := m.CheckDiskFree("creates and restores are"); err != nil {
		return nil, err
	}
	rec.Runtime = rt.Name()
	c := claimOf(rec)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ident.New("sb-")
	}
	for {
		err := m.ledger.admit(ids, c)
		if err == nil {
			return ids, nil
		}
		// The warm pools' members give way to sandboxes that were asked for.
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.Code != api.CodeConflict && ae.Code != api.CodeInsufficientStorage) || !m.evictMember() {
			return nil, err
		}
	}
}

// The names of the runtimes whose sandboxes hold more of the node than
// the container runtime's (runtime/vm, runtime/gvisor).
const (
	vmRuntime     = "vm"
	gvisorRuntime = "gvisor"
)

// claimOf is what sandbox rec holds of its node.
func claimOf(rec store.Sandbox) claim {
	c := claim{tenant: rec.Tenant, cpus: rec.CPUs, memoryMB: rec.MemoryMB, diskMB: rec.DiskMB + rec.WorkspaceMB}
	switch rec.Runtime {
	case vmRuntime:
		c.memoryMB += vmOverheadMB
	case gvisorRuntime:
		c.memoryMB += runtime.AgentMemoryMB + runtime.SentryMemoryMB
	default:
		c.memoryMB += runtime.AgentMemoryMB
	}
	return c
}

// CheckDiskFree refuses what would write to the node's disk once its free
// space is below the reserve; what says what is refused.
func (m *Manager) CheckDiskFree(what string) error {
	free, err := m.freeDiskMB()
	if err != nil {
		return err
	}
	return m.ledger.diskFree(free, what)
}

// HoldScratch holds n bytes of the node's free disk for scratch files of
// a build or an import that write at most that much, until release: the
// node's disk keeps its reserve whatever every build and import running
// at once writes (507 otherwise, naming what).
func (m *Manager) HoldScratch(n int64, what string) (release func(), err error) {
	free, err := m.freeDiskMB()
	if err != nil {
		return nil, err
	}
	return m.ledger.holdScratch(free, (n+1<<20-1)>>20, what)
}

// freeDiskMB is the free space of the filesystem holding the data
// directory, which the disk pool's images take their blocks from.
func (m *Manager) freeDiskMB() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.deps.StateDir, &st); err != nil {
		return 0, fmt.Errorf("free disk: %w", err)
	}
	return int64(st.Bavail) * st.Bsize >> 20, nil
}

// source is the disk a new sandbox starts from: its template's image, or a
// snapshot's disk in the snapshot cache.
type source struct {
	template string
	image    string
	size     int64
	built    time.Time // the template's build, when image is its disk
	origin   string    // the snapshot, if any
	// memory is the memory file of the vm whose disk image is, held when
	// the snapshot origin was taken: a live fork's (snapshots.go).
	memory string
	// workspace is the workspace disk to clone, "" for a new empty one;
	// workspaceOrigin the snapshot it comes from.
	workspace       string
	workspaceOrigin string
	// recover says an always-on disk is the sandbox's own volume, taken
	// from the tiers as its last flush left it (a move from a lost node).
	recover bool
	// itself says the sandbox wakes as itself: its disk holds the machine
	// ID it was given already, and its memory, if any, is its own.
	itself bool
}

// templateSource is the disk of template tpl.
func templateSource(tpl template.Info) source {
	return source{template: tpl.Name, image: tpl.Path, size: tpl.SizeBytes, built: tpl.BuiltAt}
}

// launch records a validated, admitted sandbox (its ID set) and starts it;
// if it does not start, its claim is released.
func (m *Manager) launch(ctx context.Context, rt runtime.Runtime, rec store.Sandbox, src source) (_ api.Sandbox, err error) {
	defer func() {
		if err != nil {
			m.ledger.release(rec.ID)
		}
	}()
	rec.Runtime, rec.Node = rt.Name(), m.deps.NodeID
	// Per launch: a fork never shares its origin's tokens.
	rec.PreviewToken, rec.AgentToken = newToken(), newToken()
	rec.Origin, rec.WorkspaceOrigin = src.origin, src.workspaceOrigin
	if err := m.deps.Store.InsertSandbox(ctx, &rec); err != nil {
		if qe := quotaRefusal(err); qe != nil {
			return api.Sandbox{}, qe
		}
		return api.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	return m.run(ctx, rt, rec, src)
}

// run starts sandbox rec, recorded starting and admitted, and records a
// start that failed.
func (m *Manager) run(ctx context.Context, rt runtime.Runtime, rec store.Sandbox, src source) (api.Sandbox, error) {
	if err := m.start(ctx, rt, &rec, src); err != nil {
		return api.Sandbox{}, m.startFailed(ctx, rec, err)
	}
	m.log.Info("sandbox running", "sandbox", rec.ID, "runtime", rt.Name(), "template", rec.Template, "origin", rec.Origin)
	return m.view(rec), nil
}

// startFailed records that sandbox rec, starting, failed to start with err
// (unless it ended meanwhile), and returns the caller's answer.
func (m *Manager) startFailed(ctx context.Context, rec store.Sandbox, err error) error {
	log := m.log.With("sandbox", rec.ID)
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
		return api.Errorf(api.CodeConflict, "sandbox %s ended while it was starting: it is %s (deleted, or lost to a daemon restart)", rec.ID, ended.state)
	}
	if ctx.Err() != nil {
		return api.Errorf(api.CodeTimeout, "sandbox start cancelled: %v", ctx.Err())
	}
	return err
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
	b, err := m.boot(ctx, rt, rec, src)
	if err != nil {
		return err
	}
	defer b.undo.RunIf(&err)
	return m.goLive(ctx, rt, rec, b, func() (store.Sandbox, error) {
		moved, err := m.deps.Store.Transition(context.WithoutCancel(ctx), rec.ID, store.Transition{
			From: []string{api.StateStarting}, To: api.StateRunning, Version: rec.Version,
			RuntimeState: b.inst.State(), NetSlot: &b.slot,
		})
		if errors.Is(err, store.ErrTransition) {
			return moved, &endedWhileStarting{state: moved.State}
		}
		if err != nil {
			return moved, failed("the node could not record it", fmt.Errorf("record running sandbox: %w", err))
		}
		return moved, nil
	})
}

// booted is a sandbox whose runtime runs it and whose agent has answered,
// not recorded running yet; undo tears it down.
type booted struct {
	inst runtime.Instance
	conn *agentconn.Conn
	slot int // its router's (0: no network)
	undo cleanup.Stack
	// restored says it started from a memory image.
	restored bool
}

// boot starts sandbox rec: from src's memory (a live fork's child), or
// from the memory image of its template and shape when the node has one
// ready (images.go), else by booting, which the node counts toward
// preparing that image. A start from an image that fails
// drops the image and boots instead. On failure it leaves nothing behind.
func (m *Manager) boot(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, src source) (*booted, error) {
	if src.memory != "" {
		return m.bootFrom(ctx, rt, rec, src, &image{disk: src.image, memory: src.memory})
	}
	key, ok := m.imageKeyOf(rt, *rec, src)
	if !ok {
		return m.bootFrom(ctx, rt, rec, src, nil)
	}
	if img := m.takeImage(key); img != nil {
		b, err := m.bootFrom(ctx, rt, rec, src, img)
		m.releaseImage(img, err != nil)
		if err == nil || ctx.Err() != nil {
			return b, err
		}
		m.log.Warn("start from a memory image failed: booting instead", "sandbox", rec.ID, "err", err)
	}
	b, err := m.bootFrom(ctx, rt, rec, src, nil)
	if err == nil {
		m.booted(rt, key, src)
	}
	return b, err
}

// bootFrom clones sandbox rec's disk (img's, when it starts from memory
// image img, else src's), makes its router, starts its runtime and
// initializes its agent (ID, hostname, env, machine ID; the clock and a
// random seed for a guest restored from img). On failure it leaves nothing
// behind.
func (m *Manager) bootFrom(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, src source, img *image) (_ *booted, err error) {
	b := &booted{restored: img != nil}
	defer b.undo.RunIf(&err)
	if img != nil {
		src.image = img.disk
	}

	t0 := time.Now()
	// The router is made while the disk is cloned and the runtime starts;
	// the runtime waits for it only when it links the sandbox to it.
	att := m.attachNetwork(ctx, rec)
	b.undo.Add(att.undo)
	diskPath := m.diskPath(rec.ID)
	if alwaysOn(rec) {
		if err := m.volumeDisk(ctx, rec, src); err != nil {
			return nil, failed("its always-on disk could not be served", err)
		}
		// A recovered volume is the sandbox's data: a failed start leaves
		// it in the tiers.
		b.undo.Add(func() { m.dropVolume(context.WithoutCancel(ctx), rec.ID, src.recover) })
	} else {
		if err := m.deps.Pool.Clone(ctx, src.image, diskPath); err != nil {
			return nil, failed("its disk could not be made", fmt.Errorf("clone disk: %w", err))
		}
		b.undo.Add(func() { os.Remove(diskPath) })
		if want := rec.DiskMB << 20; want > src.size {
			if err := m.deps.Pool.Grow(diskPath, want); err != nil {
				return nil, failed("its disk could not be made", fmt.Errorf("grow disk: %w", err))
			}
		}
	}
	if rec.WorkspaceMB > 0 {
		ws := m.workspacePath(rec.ID)
		if err := m.workspaceDisk(ctx, src.workspace, ws, rec.WorkspaceMB<<20); err != nil {
			return nil, failed("its workspace disk could not be made", err)
		}
		b.undo.Add(func() { os.Remove(ws) })
	}
	dir := m.stateDir(rec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, failed("the node could not prepare it", fmt.Errorf("sandbox dir: %w", err))
	}
	b.undo.Add(func() { os.RemoveAll(dir) })

	tClone := time.Now()
	spec := m.spec(rec)
	if att != nil {
		spec.Network = att
	}
	if img != nil {
		spec.Memory = img.memory
	}
	b.inst, err = rt.Start(ctx, spec)
	if err != nil {
		return nil, failed("its runtime could not start it", err)
	}
	tStart := time.Now()
	b.undo.Add(func() { b.inst.Stop(context.WithoutCancel(ctx)) })
	b.conn = b.inst.Dial()
	b.undo.Add(b.conn.Close)
	// The runtime returns once the agent is about to serve on a socket that
	// is already listening: Init is also the readiness check.
	init := &controlpb.InitRequest{SandboxId: rec.ID, Hostname: rec.ID, Envs: rec.Env}
	if len(rec.Network.Rules) > 0 {
		init.Envs = maps.Clone(rec.Env)
		if init.Envs == nil {
			init.Envs = map[string]string{}
		}
		maps.Copy(init.Envs, egressEnv)
	}
	if !src.itself {
		init.MachineId = newMachineID()
	}
	if img != nil && ownsClock(b.inst) {
		// A kernel of its own woke with the image's generator state.
		init.RandomSeed = newSeed()
	}
	if err := initAgent(ctx, b.inst, b.conn, init); err != nil {
		return nil, failed("its agent did not answer", fmt.Errorf("init agent: %w", err))
	}
	if b.slot, err = att.slot(); err != nil {
		return nil, failed("its network could not be set up", err)
	}
	if err := m.trustEgressCA(ctx, rec.ID, b.conn); err != nil {
		return nil, failed("it could not be made to trust its egress CA", err)
	}
	m.log.Debug("sandbox boot timings", "sandbox", rec.ID, "from_memory", img != nil, "clone", tClone.Sub(t0), "network", att.took(),
		"runtime", tStart.Sub(tClone), "agent_init", time.Since(tStart))
	return b, nil
}

// initAgent sends init to the agent of inst over conn. A machine with a
// clock of its own is sent the host's time as well, which it sets when the
// request reaches it.
func initAgent(ctx context.Context, inst runtime.Instance, conn *agentconn.Conn, init *controlpb.InitRequest) error {
	if ownsClock(inst) {
		init.ClockUnixNano = time.Now().UnixNano()
	}
	_, err := conn.Control.Init(ctx, connect.NewRequest(init))
	return err
}

// ownsClock says whether inst keeps a clock of its own (runtime.Clocked).
func ownsClock(inst runtime.Instance) bool {
	c, ok := inst.(runtime.Clocked)
	return ok && c.OwnClock()
}

// goLive makes booted sandbox rec live: in the live map first, so that a
// delete that sees the record running finds what to tear down, then
// recorded running by record (one that saw it starting has moved it to
// stopped already, and record then fails: the caller unwinds b). It
// starts the watch of its exit.
func (m *Manager) goLive(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, b *booted, record func() (store.Sandbox, error)) error {
	l := newLive(rec, rt, b.inst, b.conn)
	m.mu.Lock()
	m.live[rec.ID] = l
	m.mu.Unlock()
	b.undo.Add(func() {
		m.mu.Lock()
		if m.live[rec.ID] == l {
			delete(m.live, rec.ID)
		}
		m.mu.Unlock()
	})
	moved, err := record()
	if err != nil {
		return err
	}
	*rec = moved
	go m.watch(rec.ID, l)
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
		DiskNBD:   alwaysOn(rec) && rec.Runtime == vmRuntime,
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
