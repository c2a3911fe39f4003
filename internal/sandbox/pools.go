package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/guest"
	"warren/internal/ident"
	"warren/internal/network"
	"warren/internal/network/policy"
	"warren/internal/runtime"
	"warren/internal/store"
	"warren/internal/template"
	"warren/internal/warmpool"
)

// Warm pools (docs/API.md, "Warm pools"). A pool keeps sandboxes of one
// template and runtime booted ahead of demand: disk cloned and mounted,
// runtime started, agent answering, router attached. A member is a
// sandbox with no tenant, no record and no env, and it has run nothing
// but its agent; its ID is drawn when it is made and shown to nobody
// before a create claims it. A create that matches the pool (same
// template, runtime and resources, no workspace disk) takes a member
// (claim): its agent gets the tenant's env, its router the tenant's
// egress policy, and then its record is inserted, running, in one write.
// Until then a marker beside its state directory (ID.pooled) says what it
// is, so that a daemon that restarts sweeps the members an earlier
// process left.
//
// The pools' settings are in the store, for the whole fleet; each node
// keeps its share (poolShare), reads the settings every poolSync, and
// reports its shares back (store.ReportPools), which GET /v1/pools sums.

const (
	// poolSync is how often a node reads the pools' settings and reports
	// its shares.
	poolSync = 2 * time.Second
	// poolQuiet is how long a pool waits after a create before it makes a
	// member: a refill never competes with a burst of creates.
	poolQuiet = 200 * time.Millisecond
	// poolDecay is how long a pool grown by misses waits, without a miss,
	// before it shrinks by one toward its minimum.
	poolDecay = 30 * time.Second
	// MaxPoolSize bounds a pool's Max.
	MaxPoolSize = 1000
	// pooledSuffix names a member's marker in the state directory.
	pooledSuffix = ".pooled"
)

type poolKey struct{ template, runtime string }

// warm is the node's share of one pool.
type warm struct {
	set  store.Pool
	rt   runtime.Runtime
	pool *warmpool.Pool[*member]

	hits, misses atomic.Int64

	// Under Manager.poolsMu: the share's bounds, the growth that misses
	// added, its size now, when the growth last changed, the misses seen
	// at the last sync, why the share cannot fill ("" when it can).
	min, max, grown, target int
	grownAt                 time.Time
	seenMisses              int64
	err                     string
}

// share is w as node reports it at now; Manager.poolsMu is held.
func (w *warm) share(node string, now time.Time) store.PoolShare {
	return store.PoolShare{
		Template: w.set.Template, Runtime: w.set.Runtime, Node: node, Target: w.target, Ready: len(w.pool.Ready()),
		Hits: w.hits.Load(), Misses: w.misses.Load(), Error: w.err, ReportedAt: now,
	}
}

// member is a pooled sandbox.
type member struct {
	rec   store.Sandbox // its ID, template, runtime and resources; tenant pooled
	built time.Time     // the template's build it boots
	b     *booted
}

// gone reports whether the member's init has exited while it waited.
func (mb *member) gone() bool {
	select {
	case <-mb.b.inst.Done():
		return true
	default:
		return false
	}
}

// matches reports whether validated create rec, in runtime rt, may take a
// member of w. A create with egress rules starts cold: its CA is trusted
// as it boots.
func (w *warm) matches(rec store.Sandbox, rt runtime.Runtime) bool {
	s := w.set
	return rt == w.rt && rec.Template == s.Template && rec.WorkspaceMB == 0 && !alwaysOn(&rec) && len(rec.Network.Rules) == 0 &&
		rec.CPUs == s.CPUs && rec.MemoryMB == s.MemoryMB && rec.Pids == s.Pids && rec.DiskMB == s.DiskMB
}

// fromPool starts validated create rec from a member of its pool, if it
// has one ready: ok is false when it has none (the create starts cold).
func (m *Manager) fromPool(ctx context.Context, rt runtime.Runtime, rec store.Sandbox, tpl template.Info) (_ api.Sandbox, ok bool, _ error) {
	m.poolsMu.Lock()
	w := m.pools[poolKey{rec.Template, rt.Name()}]
	m.poolsMu.Unlock()
	if w == nil || !w.matches(rec, rt) {
		return api.Sandbox{}, false, nil
	}
	for {
		mb, ok := w.pool.Take()
		if !ok {
			w.misses.Add(1)
			return api.Sandbox{}, false, nil
		}
		if mb.gone() || !mb.built.Equal(tpl.BuiltAt) {
			m.discard(mb)
			continue
		}
		if err := m.ledger.assign(mb.rec.ID, rec.Tenant); err != nil {
			w.pool.Put(mb)
			return api.Sandbox{}, true, err
		}
		w.hits.Add(1)
		sb, err := m.claim(ctx, rt, rec, mb)
		return sb, true, err
	}
}

// claim gives member mb, assigned to rec's tenant in the ledger, the
// identity of validated create rec and records it running. A member that
// fails is discarded.
func (m *Manager) claim(ctx context.Context, rt runtime.Runtime, rec store.Sandbox, mb *member) (_ api.Sandbox, err error) {
	defer func() {
		if err != nil {
			m.discard(mb)
		}
	}()
	id := mb.rec.ID
	t0 := time.Now()
	if !reflect.DeepEqual(rec.Network, mb.rec.Network) {
		if s, ok := m.lookupNetwork(id); ok {
			pol, _ := policy.Parse(rec.Network) // checked by validate
			if err := s.SetPolicy(pol, network.Egress{}); err != nil {
				return api.Sandbox{}, fmt.Errorf("set network of pooled %s: %w", id, err)
			}
		}
	}
	// The member's agent knows its ID and hostname already, and has no env.
	if len(rec.Env) > 0 {
		if _, err := mb.b.conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{
			SandboxId: id, Hostname: id, Envs: rec.Env,
		})); err != nil {
			return api.Sandbox{}, fmt.Errorf("init pooled %s: %w", id, err)
		}
	}
	tInit := time.Now()
	rec.ID, rec.State, rec.Runtime, rec.Node = id, api.StateRunning, rt.Name(), m.deps.NodeID
	rec.PreviewToken, rec.AgentToken = newToken(), newToken()
	rec.RuntimeState, rec.NetSlot = mb.b.inst.State(), mb.b.slot
	now := time.Now()
	rec.ExpiresAt = now.Add(rec.ExpiresAt.Sub(rec.CreatedAt))
	rec.CreatedAt = now
	err = m.goLive(ctx, rt, &rec, mb.b, func() (store.Sandbox, error) {
		if err := m.deps.Store.InsertSandbox(context.WithoutCancel(ctx), &rec); err != nil {
			if qe := quotaRefusal(err); qe != nil {
				return rec, qe
			}
			return rec, fmt.Errorf("record sandbox: %w", err)
		}
		return rec, nil
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	tRecord := time.Now()
	if err := os.Remove(m.pooledMarker(id)); err != nil {
		m.log.Warn("pooled marker not removed", "sandbox", id, "err", err)
	}
	m.log.Debug("sandbox claim timings", "sandbox", id, "init", tInit.Sub(t0), "record", tRecord.Sub(tInit))
	m.log.Info("sandbox running", "sandbox", id, "runtime", rt.Name(), "template", rec.Template, "pool", true)
	return m.view(rec), nil
}

func (m *Manager) pooledMarker(id string) string { return m.stateDir(id) + pooledSuffix }

// makeMember boots a member of w.
func (m *Manager) makeMember(w *warm) (_ *member, err error) {
	tpl, err := m.deps.Templates.Get(w.set.Template)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", w.set.Template, err)
	}
	if err := m.CheckDiskFree("warm pools are"); err != nil {
		return nil, err
	}
	s := w.set
	rec := store.Sandbox{
		ID: ident.New("sb-"), Tenant: pooled, Template: s.Template, Runtime: w.rt.Name(), State: api.StateStarting,
		CPUs: s.CPUs, MemoryMB: s.MemoryMB, Pids: s.Pids, DiskMB: s.DiskMB,
	}
	if err := m.ledger.admit([]string{rec.ID}, claimOf(rec)); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.ledger.release(rec.ID)
		}
	}()
	marker := m.pooledMarker(rec.ID)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return nil, fmt.Errorf("pooled marker: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(marker)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StartTimeout)
	defer cancel()
	b, err := m.boot(ctx, w.rt, &rec, templateSource(tpl))
	if err != nil {
		return nil, err
	}
	warmFiles(ctx, b.conn)
	warmExec(ctx, b.conn)
	return &member{rec: rec, built: tpl.BuiltAt, b: b}, nil
}

// warmExec runs `true` once, as root, in a member, so that the first exec
// after a claim finds its paths ready: a container's agent has then run its
// exec path once, reading the user database and looking up PATH on the
// member's disk (its first exec took 3-4.8 ms against 1.5 ms for later
// ones), and a vm restored from a memory image has its fork,
// exec and exit paths translated (under TCG, which translates guest code
// as it first runs it, a claimed member's first exec took 128 ms without
// it: docs/BENCHMARKS.md). `true` leaves nothing behind: it is reaped, and
// the claimed sandbox's processes are PID 1 alone.
func warmExec(ctx context.Context, conn *agentconn.Conn) {
	conn.Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "true"}}, nil, nil)
}

// warmFiles reads guest.FirstExecFiles through the agent, as root, so that
// a member's (or a memory image's) page cache holds them before a claim; a
// file the image lacks is skipped.
func warmFiles(ctx context.Context, conn *agentconn.Conn) {
	for _, path := range guest.FirstExecFiles {
		r, _, err := conn.ReadFile(ctx, path, "root")
		if err != nil {
			continue
		}
		io.Copy(io.Discard, r)
		r.Close()
	}
}

// discard tears a member down.
func (m *Manager) discard(mb *member) {
	mb.b.undo.Run()
	m.ledger.release(mb.rec.ID)
	os.Remove(m.pooledMarker(mb.rec.ID))
}

// evictMember discards one ready member, of the pool with the most, to
// make room on the node for a sandbox; false when no pool has one.
func (m *Manager) evictMember() bool {
	m.poolsMu.Lock()
	var most *warm
	n := 0
	for _, w := range m.pools {
		if r := len(w.pool.Ready()); r > n {
			most, n = w, r
		}
	}
	m.poolsMu.Unlock()
	if most == nil {
		return false
	}
	mb, ok := most.pool.Take()
	if !ok {
		return false
	}
	m.log.Info("pool member evicted to make room", "sandbox", mb.rec.ID, "template", most.set.Template)
	m.discard(mb)
	return true
}

// newWarm makes the node's share of pool set, kept in runtime rt; it
// fills once its size is set.
func (m *Manager) newWarm(set store.Pool, rt runtime.Runtime) *warm {
	w := &warm{set: set, rt: rt}
	w.pool = warmpool.New(warmpool.Config[*member]{
		Quiet:   poolQuiet,
		Log:     m.log.With("pool", set.Template+"/"+set.Runtime),
		Make:    func() (*member, error) { return m.makeMember(w) },
		Discard: func(mb *member) error { m.discard(mb); return nil },
	})
	w.pool.Start()
	return w
}

// syncPools keeps the node's shares of the pools as the store sets them,
// and reports them, every poolSync.
func (m *Manager) syncPools(ctx context.Context) {
	defer m.loops.Done()
	m.syncPoolsNow(ctx)
	tick(ctx, poolSync, func() { m.syncPoolsNow(ctx) })
}

// syncPoolsNow reads the pools' settings, sets each share's size and
// reports the shares.
func (m *Manager) syncPoolsNow(ctx context.Context) {
	if err := m.syncPoolsOnce(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("warm pools not synced", "err", err)
	}
}

func (m *Manager) syncPoolsOnce(ctx context.Context) error {
	m.poolSyncMu.Lock()
	defer m.poolSyncMu.Unlock()
	sets, err := m.deps.Store.ListPools(ctx)
	if err != nil {
		return err
	}
	m.poolsMu.Lock()
	idle := len(sets) == 0 && len(m.pools) == 0
	m.poolsMu.Unlock()
	if idle && !m.poolsReported {
		return nil // no pool, and nothing of ours to take back from the store
	}
	share, err := m.poolShare(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	var gone []*warm
	var shares []store.PoolShare
	m.poolsMu.Lock()
	keep := map[poolKey]bool{}
	for _, set := range sets {
		key := poolKey{set.Template, set.Runtime}
		keep[key] = true
		w := m.pools[key]
		if w != nil && !w.set.UpdatedAt.Equal(set.UpdatedAt) {
			gone = append(gone, w) // set again: its members may differ
			w = nil
		}
		if w == nil {
			rt := m.runtimeNamed(set.Runtime)
			w = m.newWarm(set, rt)
			m.pools[key] = w
		}
		w.min, w.max = share(set.Min), share(set.Max)
		switch misses := w.misses.Load(); {
		case misses > w.seenMisses:
			w.grown += int(misses - w.seenMisses)
			w.grownAt, w.seenMisses = now, misses
		case w.grown > 0 && now.Sub(w.grownAt) >= poolDecay:
			w.grown--
			w.grownAt = now
		}
		w.grown = min(w.grown, w.max-w.min)
		w.target = w.min + w.grown
		w.err = m.poolProblem(w)
		if w.err != "" {
			w.target = 0
		}
		if err := w.pool.SetSize(w.target); err != nil {
			m.log.Warn("pool members not discarded", "pool", set.Template+"/"+set.Runtime, "err", err)
		}
		shares = append(shares, w.share(m.deps.NodeID, now))
	}
	for key, w := range m.pools {
		if !keep[key] {
			gone = append(gone, w)
			delete(m.pools, key)
		}
	}
	m.poolsMu.Unlock()
	for _, w := range gone {
		if err := w.pool.Close(); err != nil {
			m.log.Warn("pool members not discarded", "pool", w.set.Template+"/"+w.set.Runtime, "err", err)
		}
	}
	if err := m.deps.Store.ReportPools(ctx, m.deps.NodeID, shares, now); err != nil {
		return err
	}
	m.poolsReported = len(shares) > 0
	return nil
}

// poolProblem says why the node cannot keep its share of w, or "".
func (m *Manager) poolProblem(w *warm) string {
	if w.rt == nil {
		return fmt.Sprintf("this node has no runtime %q", w.set.Runtime)
	}
	if err := w.rt.Available(); err != nil {
		return fmt.Sprintf("runtime %s is not available on this node: %v", w.set.Runtime, err)
	}
	if _, err := m.deps.Templates.Get(w.set.Template); err != nil {
		return fmt.Sprintf("template %s is not on this node", w.set.Template)
	}
	return ""
}

// poolShare returns the node's part of a pool's count: all of it on a
// single machine; in a fleet, an even split over the active nodes by ID,
// the first ones taking the remainder, and none for a node that is not
// active.
func (m *Manager) poolShare(ctx context.Context) (func(int) int, error) {
	nodes, err := m.deps.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return func(n int) int { return n }, nil
	}
	var active []string
	for _, n := range nodes {
		if n.State == store.NodeActive {
			active = append(active, n.ID)
		}
	}
	return splitShare(active, m.deps.NodeID), nil
}

// splitShare is node's part of a count split over nodes (sorted).
func splitShare(nodes []string, node string) func(int) int {
	i := slices.Index(nodes, node)
	return func(n int) int {
		if i < 0 {
			return 0
		}
		s := n / len(nodes)
		if i < n%len(nodes) {
			s++
		}
		return s
	}
}

// closePools discards every pool's members.
func (m *Manager) closePools() {
	m.poolsMu.Lock()
	ws := m.pools
	m.pools = map[poolKey]*warm{}
	m.poolsMu.Unlock()
	for _, w := range ws {
		w.pool.Close()
	}
}

// pooledLeft lists the members an earlier daemon process left: their
// markers in the state directory.
func (m *Manager) pooledLeft() ([]string, error) {
	entries, err := os.ReadDir(m.deps.StateDir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), pooledSuffix); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Pools returns every pool with its state, summed over the nodes' last
// reports; this node's share is as it is now.
func (m *Manager) Pools(ctx context.Context) ([]api.Pool, error) {
	sets, err := m.deps.Store.ListPools(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	shares, err := m.deps.Store.PoolShares(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	now := time.Now()
	m.poolsMu.Lock()
	for i, sh := range shares {
		if w := m.pools[poolKey{sh.Template, sh.Runtime}]; sh.Node == m.deps.NodeID && w != nil {
			shares[i] = w.share(m.deps.NodeID, now)
		}
	}
	m.poolsMu.Unlock()
	out := make([]api.Pool, 0, len(sets))
	for _, s := range sets {
		p := api.Pool{Template: s.Template, UpdatedAt: s.UpdatedAt, PoolSpec: api.PoolSpec{
			Runtime: s.Runtime, Min: s.Min, Max: s.Max, CPUs: s.CPUs, MemoryMB: s.MemoryMB, Pids: s.Pids, DiskMB: s.DiskMB,
		}}
		for _, sh := range shares {
			if sh.Template != s.Template || sh.Runtime != s.Runtime {
				continue
			}
			p.Target += sh.Target
			p.Ready += sh.Ready
			p.Hits += sh.Hits
			p.Misses += sh.Misses
			p.Nodes = append(p.Nodes, api.PoolNode{Node: sh.Node, Target: sh.Target, Ready: sh.Ready,
				Hits: sh.Hits, Misses: sh.Misses, ReportedAt: sh.ReportedAt, Error: sh.Error})
		}
		out = append(out, p)
	}
	return out, nil
}

// SetPool sets the pool of template and spec's runtime, replacing the one
// before (its members go: they may differ), and returns it. Its resources
// are checked and defaulted as a create's; the node must hold its share
// of Min members.
func (m *Manager) SetPool(ctx context.Context, name string, spec api.PoolSpec) (api.Pool, error) {
	if spec.Max == 0 {
		spec.Max = spec.Min
	}
	if spec.Min < 0 || spec.Max < spec.Min || spec.Max > MaxPoolSize {
		return api.Pool{}, api.Errorf(api.CodeBadRequest, "a pool's min and max must satisfy 0 <= min <= max <= %d, got min %d, max %d", MaxPoolSize, spec.Min, spec.Max)
	}
	rt, err := m.pickRuntime(spec.Runtime)
	if err != nil {
		return api.Pool{}, err
	}
	tpl, err := m.template(name)
	if err != nil {
		return api.Pool{}, err
	}
	rec, err := m.validate(ctx, pooled, api.CreateSandboxRequest{Template: tpl.Name, DiskMB: spec.DiskMB,
		SandboxSpec: api.SandboxSpec{CPUs: spec.CPUs, MemoryMB: spec.MemoryMB, Pids: spec.Pids}},
		templateSource(tpl))
	if err != nil {
		return api.Pool{}, err
	}
	rec.Runtime = rt.Name()
	share, err := m.poolShare(ctx)
	if err != nil {
		return api.Pool{}, err
	}
	if err := m.ledger.couldHold(claimOf(rec), share(spec.Min)); err != nil {
		return api.Pool{}, err
	}
	set := store.Pool{Template: tpl.Name, Runtime: rt.Name(), Min: spec.Min, Max: spec.Max,
		CPUs: rec.CPUs, MemoryMB: rec.MemoryMB, Pids: rec.Pids, DiskMB: rec.DiskMB}
	if err := m.deps.Store.SetPool(ctx, set, time.Now()); err != nil {
		return api.Pool{}, err
	}
	m.log.Info("pool set", "template", set.Template, "runtime", set.Runtime, "min", set.Min, "max", set.Max)
	m.syncPoolsNow(ctx)
	return m.onePool(ctx, set.Template, set.Runtime)
}

// DeletePool removes the pool of template and runtime ("" or "auto":
// what a create would pick); its members go.
func (m *Manager) DeletePool(ctx context.Context, name, rtName string) error {
	if rtName == "" || rtName == "auto" {
		rt, err := m.pickRuntime(rtName)
		if err != nil {
			return err
		}
		rtName = rt.Name()
	}
	err := m.deps.Store.DeletePool(ctx, name, rtName)
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeNotFound, "no pool of template %q and runtime %q", name, rtName)
	}
	if err != nil {
		return err
	}
	m.log.Info("pool deleted", "template", name, "runtime", rtName)
	m.syncPoolsNow(ctx)
	return nil
}

// onePool returns the pool of template and runtime.
func (m *Manager) onePool(ctx context.Context, name, rtName string) (api.Pool, error) {
	pools, err := m.Pools(ctx)
	if err != nil {
		return api.Pool{}, err
	}
	for _, p := range pools {
		if p.Template == name && p.Runtime == rtName {
			return p, nil
		}
	}
	return api.Pool{}, api.Errorf(api.CodeNotFound, "no pool of template %q and runtime %q", name, rtName)
}
