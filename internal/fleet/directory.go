package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/internal/control"
	"warren/internal/metrics"
	"warren/internal/scheduler"
	"warren/internal/store"
)

// Directory is a control replica's view of the fleet's nodes, refreshed
// from the store: it routes (control.Fleet), places (package scheduler)
// and fences. It is safe for concurrent use.
type Directory struct {
	st     *store.Store
	remote func(node, addr string) http.Handler
	local  map[string]http.Handler // nodes in this process
	cfg    Config
	dcfg   DirectoryConfig
	log    *slog.Logger

	mu       sync.Mutex // guards the fields below
	view     *scheduler.View
	nodes    map[string]store.Node // as last read
	handlers map[string]routed
	rng      *rand.Rand
	// owners caches the node of each live sandbox looked up, with the
	// node's lease epoch then: a sandbox changes node only when its node
	// is fenced (a new epoch) or drained.
	owners map[string]owner
	// layers caches durable snapshots' lineage links, which never change.
	layers map[string]link
}

// link is a durable snapshot's place in its lineage.
type link struct {
	layer  scheduler.Layer
	parent string
	disk   int64
}

// cacheMax bounds each cache; a full one starts again empty.
const cacheMax = 1 << 16

// owner is a sandbox's node under one lease epoch.
type owner struct {
	node  string
	epoch int64
}

// routed is the handler of a node at an address.
type routed struct {
	addr string
	h    http.Handler
}

var _ control.Fleet = (*Directory)(nil)

// DirectoryConfig tunes a directory.
type DirectoryConfig struct {
	// Refresh is how often the view is read again and stale nodes are
	// fenced (default 1s).
	Refresh time.Duration
	// Defaults are what a create or restore that names no resources holds
	// (the node's own defaults: sandbox.Config).
	DefaultCPUs     float64
	DefaultMemoryMB int64
}

// NewDirectory returns the directory of the fleet in st. remote makes the
// handler of a node across the network (control.Remote); local are the
// handlers of nodes in this process, by node ID, handed requests directly.
func NewDirectory(ctx context.Context, st *store.Store, remote func(node, addr string) http.Handler, local map[string]http.Handler,
	cfg Config, dcfg DirectoryConfig, log *slog.Logger) (*Directory, error) {
	if dcfg.Refresh <= 0 {
		dcfg.Refresh = time.Second
	}
	d := &Directory{
		st: st, remote: remote, local: local, cfg: cfg.withDefaults(), dcfg: dcfg, log: log,
		handlers: map[string]routed{}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		owners: map[string]owner{}, layers: map[string]link{},
	}
	if err := d.refresh(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Run refreshes the view, fences stale nodes and places moving sandboxes
// and the wakes of sleeping ones every Refresh until ctx ends.
func (d *Directory) Run(ctx context.Context) {
	t := time.NewTicker(d.dcfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.fenceStale(ctx)
		if err := d.refresh(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("read the fleet's nodes", "err", err)
		}
		d.placeMoving(ctx)
		d.placeSleeping(ctx)
		d.placeStandbys(ctx)
	}
}

// refresh reads every node's record and report into a new view: the
// nodes' own figures supersede what was placed since they last reported.
func (d *Directory) refresh(ctx context.Context) error {
	recs, err := d.st.ListNodes(ctx)
	if err != nil {
		return err
	}
	view := scheduler.NewView(scheduler.Config{
		// A node reports what it may promise with its overcommit applied.
		Overcommit: scheduler.Overcommit{CPU: 1, Memory: 1, Disk: 1},
	})
	nodes := map[string]store.Node{}
	cutoff := time.Now().Add(-d.cfg.FenceAfter)
	for _, rec := range recs {
		var r Report
		if len(rec.Report) > 0 {
			if err := json.Unmarshal(rec.Report, &r); err != nil {
				d.log.Warn("node's report does not decode", "node", rec.ID, "err", err)
			}
		}
		n := scheduler.Node{
			ID: rec.ID, Region: orUnset(rec.Region), Cluster: orUnset(rec.Cluster), Labels: rec.Labels,
			Capacity: r.Capacity, Allocated: r.Allocated,
			Healthy:  rec.State != store.NodeFenced && rec.HeartbeatAt.After(cutoff),
			Draining: rec.State == store.NodeCordoned || rec.State == store.NodeDraining,
			Runtimes: r.Runtimes, CPU: r.CPU,
		}
		if err := view.Upsert(n); err != nil {
			d.log.Warn("node left out of the view", "node", rec.ID, "err", err)
			continue
		}
		if err := view.SetLayers(rec.ID, r.Layers); err != nil {
			d.log.Warn("node's layers left out of the view", "node", rec.ID, "err", err)
		}
		nodes[rec.ID] = rec
	}
	d.mu.Lock()
	// A node that stopped taking sandboxes has its own moved or woken
	// elsewhere: what was remembered of it is forgotten, not brought back
	// by an uncordon. Looked for only when a node changed.
	changed := len(nodes) != len(d.nodes)
	for id, n := range nodes {
		if old, ok := d.nodes[id]; !ok || old.State != n.State || old.Epoch != n.Epoch {
			changed = true
		}
	}
	d.view, d.nodes = view, nodes
	if changed {
		for id, o := range d.owners {
			if n := nodes[o.node]; n.State != store.NodeActive || n.Epoch != o.epoch {
				delete(d.owners, id)
			}
		}
	}
	d.mu.Unlock()
	return nil
}

// orUnset names an unset region or cluster, which the scheduler requires.
func orUnset(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// fenceStale revokes the leases of nodes that stopped heartbeating; the
// sandboxes they ran move (from their checkpoints) or fail (lose).
func (d *Directory) fenceStale(ctx context.Context) {
	fenced, err := d.st.FenceStale(ctx, time.Now().Add(-d.cfg.FenceAfter))
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("fence stale nodes", "err", err)
		}
		return
	}
	for _, n := range fenced {
		d.log.Error("node fenced: it stopped heartbeating", "node", n.ID, "last_heartbeat", n.HeartbeatAt, "epoch", n.Epoch)
		recs, err := d.st.NodeSandboxes(ctx, n.ID, store.Live)
		if err != nil {
			d.log.Error("sandboxes of a fenced node", "node", n.ID, "err", err)
			continue
		}
		for _, rec := range recs {
			lose(ctx, d.st, rec, n.HeartbeatAt, fmt.Sprintf("its node %s stopped answering", n.ID), d.log)
		}
	}
}

// movesAtOnce bounds the moving sandboxes a refresh places.
const movesAtOnce = 64

// placeMoving places the moving sandboxes no node has yet, each on the
// node the scheduler picks for a restore of its checkpoint, in the region
// of the node it left; of the replicas placing at once, one wins each
// (store.AssignMove). One whose time is up stops instead. One no node can
// take now waits for the next refresh.
func (d *Directory) placeMoving(ctx context.Context) {
	recs, err := d.st.MovingSandboxes(ctx, "", movesAtOnce)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("find moving sandboxes", "err", err)
		}
		return
	}
	for _, rec := range recs {
		if !rec.ExpiresAt.IsZero() && !rec.ExpiresAt.After(time.Now()) {
			none := time.Time{}
			_, err := d.st.Transition(ctx, rec.ID, store.Transition{
				From: []string{api.StateMoving}, Version: rec.Version, To: api.StateStopped,
				Error: "timeout expired while it was moving", Expires: &none,
			})
			if err != nil && !errors.Is(err, store.ErrTransition) {
				d.log.Error("stop an expired moving sandbox", "sandbox", rec.ID, "err", err)
			}
			continue
		}
		spec := api.SandboxSpec{Runtime: rec.Runtime, CPUs: rec.CPUs, MemoryMB: rec.MemoryMB}
		snap := ""
		if rec.Restored != nil {
			snap = rec.Restored.Snapshot
			d.mu.Lock()
			spec.Region = d.nodes[rec.Restored.From].Region
			d.mu.Unlock()
		}
		node, err := d.Place(ctx, control.Placement{Spec: spec, Snapshot: snap})
		if err != nil {
			d.log.Debug("moving sandbox not placed yet", "sandbox", rec.ID, "err", err)
			continue
		}
		if _, err := d.st.AssignMove(ctx, rec.ID, rec.Version, "", node); err != nil {
			if !errors.Is(err, store.ErrTransition) {
				d.log.Error("place a moving sandbox", "sandbox", rec.ID, "err", err)
			}
			continue
		}
		d.log.Info("moving sandbox placed", "sandbox", rec.ID, "node", node, "snapshot", snap)
	}
}

// Owner implements control.Fleet: the node a live sandbox's record names,
// while that node is not fenced. A sandbox found once is remembered while
// its node keeps the lease it had then and is not draining: a request for
// it after it ended still goes to its node, which answers for it from the
// store as any node would.
func (d *Directory) Owner(ctx context.Context, id string) (string, error) {
	d.mu.Lock()
	o, ok := d.owners[id]
	if ok {
		if n := d.nodes[o.node]; n.State != store.NodeFenced && n.State != store.NodeDraining && n.Epoch == o.epoch {
			d.mu.Unlock()
			return o.node, nil
		}
		// Its sandboxes move or wake elsewhere: an uncordon must not
		// bring the entry back.
		delete(d.owners, id)
	}
	d.mu.Unlock()
	rec, err := d.st.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", control.ErrNoOwner
	}
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	n, ok := d.nodes[rec.Node]
	d.mu.Unlock()
	if rec.State == api.StatePaused && !rec.Held() && (!ok || n.State != store.NodeActive) {
		return d.placeWake(ctx, rec)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !ok || n.State == store.NodeFenced || !slices.Contains(store.Live, rec.State) {
		return "", control.ErrNoOwner
	}
	if !slices.Contains(store.OnNode, rec.State) {
		return rec.Node, nil // moving: its node changes as it is placed
	}
	if n.State != store.NodeActive {
		return rec.Node, nil // draining: what it runs is on its way elsewhere
	}
	if len(d.owners) >= cacheMax {
		clear(d.owners)
	}
	d.owners[id] = owner{node: rec.Node, epoch: n.Epoch}
	return rec.Node, nil
}

// placeSleeping places the wakes of the paused sandboxes no node holds
// and none is to wake (their node was lost or drained): the node placed
// fetches their pause snapshots ahead of a call (the manager's prefetch),
// so that a wake finds their disks on it.
func (d *Directory) placeSleeping(ctx context.Context) {
	recs, err := d.st.SleepingSandboxes(ctx, "", time.Time{}, movesAtOnce)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("find sleeping sandboxes", "err", err)
		}
		return
	}
	for _, rec := range recs {
		if _, err := d.placeWake(ctx, rec); err != nil {
			d.log.Debug("sleeping sandbox's wake not placed yet", "sandbox", rec.ID, "err", err)
		}
	}
}

// placeStandbys gives each paused sandbox its node holds a standby on
// another node (the scheduler's choice for a restore of its pause
// snapshot), which fetches what it wakes from in the background, so that
// it wakes there at once should its node be lost or drained; and another
// to one whose standby takes no sandboxes any more.
func (d *Directory) placeStandbys(ctx context.Context) {
	d.mu.Lock()
	var active []string
	for id, n := range d.nodes {
		if n.State == store.NodeActive {
			active = append(active, id)
		}
	}
	d.mu.Unlock()
	if len(active) < 2 {
		return // no other node to stand by
	}
	recs, err := d.st.WithoutStandby(ctx, active, movesAtOnce)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("find paused sandboxes without a standby", "err", err)
		}
		return
	}
	for _, rec := range recs {
		spec := api.SandboxSpec{Runtime: rec.Runtime, CPUs: rec.CPUs, MemoryMB: rec.MemoryMB}
		node, err := d.Place(ctx, control.Placement{Spec: spec, Snapshot: rec.Paused.Snapshot, Avoid: rec.Node})
		if err != nil {
			d.log.Debug("paused sandbox's standby not placed yet", "sandbox", rec.ID, "err", err)
			continue
		}
		if _, err := d.st.SetStandby(ctx, rec, node); err == nil {
			d.log.Info("paused sandbox's standby placed", "sandbox", rec.ID, "node", rec.Node, "standby", node)
		}
	}
}

// placeWake gives paused sandbox rec, which no node holds and whose node
// (if any) takes no sandboxes, to the node the fleet places it on, which
// wakes it there from its pause snapshot (its answer to the request
// routed to it).
func (d *Directory) placeWake(ctx context.Context, rec store.Sandbox) (string, error) {
	spec := api.SandboxSpec{Runtime: rec.Runtime, CPUs: rec.CPUs, MemoryMB: rec.MemoryMB}
	node, err := d.Place(ctx, control.Placement{Spec: spec, Snapshot: rec.Paused.Snapshot})
	if err != nil {
		return "", err
	}
	placed, err := d.st.AssignWake(ctx, rec, node)
	if errors.Is(err, store.ErrTransition) {
		return placed.Node, nil // placed meanwhile, by another request or replica
	}
	if err != nil {
		return "", err
	}
	d.log.Info("paused sandbox placed to wake", "sandbox", rec.ID, "node", node, "snapshot", rec.Paused.Snapshot)
	return node, nil
}

// Place implements control.Fleet: the scheduler's choice for p, which the
// view counts as allocated until the node's next report.
func (d *Directory) Place(ctx context.Context, p control.Placement) (string, error) {
	cpus, mem := p.Spec.CPUs, p.Spec.MemoryMB
	if cpus <= 0 {
		cpus = d.dcfg.DefaultCPUs
	}
	if mem <= 0 {
		mem = d.dcfg.DefaultMemoryMB
	}
	n := int64(max(p.Count, 1))
	req := scheduler.Request{
		Resources: scheduler.Resources{MilliCPUs: int64(cpus*1000) * n, MemoryMB: mem * n},
		Runtime:   runtimeName(p.Spec.Runtime),
		Region:    p.Spec.Region,
		Labels:    p.Spec.NodeLabels,
		Avoid:     p.Avoid,
	}
	if p.Snapshot != "" {
		lineage, err := d.lineage(ctx, p.Tenant, p.Snapshot)
		if err != nil {
			return "", err
		}
		req.Lineage = lineage
	}
	// The view is up to a refresh old: the node picked is read again, and
	// one cordoned, drained or fenced since is left out of the view and
	// another picked.
	for {
		d.mu.Lock()
		dec, err := scheduler.Place(d.view, req, d.rng)
		d.mu.Unlock()
		var nofit *scheduler.NoFitError
		if errors.As(err, &nofit) {
			return "", api.Errorf(api.CodeUnavailable, "no node can take it: %v", err)
		}
		if err != nil {
			return "", err
		}
		rec, err := d.st.GetNode(ctx, dec.Node)
		if err != nil {
			return "", err
		}
		d.mu.Lock()
		if rec.State != store.NodeActive {
			d.nodes[rec.ID] = rec
			d.view.Remove(rec.ID)
			d.mu.Unlock()
			continue
		}
		err = d.view.Allocate(dec.Node, req.Resources)
		d.mu.Unlock()
		return dec.Node, err
	}
}

// Started implements control.Fleet: the sandboxes a node started are its.
func (d *Directory) Started(node string, ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.owners)+len(ids) > cacheMax {
		clear(d.owners)
	}
	for _, id := range ids {
		d.owners[id] = owner{node: node, epoch: d.nodes[node].Epoch}
	}
}

// runtimeName is the runtime a request names for the scheduler: none for
// "auto".
func runtimeName(rt string) string {
	if rt == "auto" {
		return ""
	}
	return rt
}

// maxLineage bounds the ancestors a placement reads.
const maxLineage = 64

// lineage is the layers a restore of snapshot ref (its ID, or the name of
// one of tenant's) materializes, nearest first, each sized by what it
// added to the blob store, or by its disk when that is not known (a
// snapshot recorded from its manifest). An ancestor the store does not
// know (a base layer of a template built elsewhere) counts as the whole
// disk: what a node that holds none of the lineage fetches at most. A
// snapshot the store does not know places with no lineage, and the node
// answers its 404.
func (d *Directory) lineage(ctx context.Context, tenant, ref string) ([]scheduler.Layer, error) {
	id := ref
	if !strings.HasPrefix(ref, api.SnapshotIDPrefix) {
		sn, err := d.st.SnapshotByName(ctx, tenant, ref)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		id = sn.ID
	}
	var out []scheduler.Layer
	var disk int64
	for i := 0; id != "" && i < maxLineage; i++ {
		l, ok, err := d.link(ctx, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			if disk > 0 {
				out = append(out, scheduler.Layer{ID: id, Size: disk})
			}
			break
		}
		out = append(out, l.layer)
		id, disk = l.parent, l.disk
	}
	return out, nil
}

// link reads snapshot id's place in its lineage, from the cache when it is
// durable; false when the store does not know it.
func (d *Directory) link(ctx context.Context, id string) (link, bool, error) {
	d.mu.Lock()
	l, ok := d.layers[id]
	d.mu.Unlock()
	if ok {
		return l, true, nil
	}
	sn, err := d.st.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return link{}, false, nil
	}
	if err != nil {
		return link{}, false, err
	}
	l = link{layer: scheduler.Layer{ID: sn.ID, Size: cmp.Or(max(sn.StoredBytes, sn.ChangedBytes), sn.DiskBytes)},
		parent: sn.Parent, disk: sn.DiskBytes}
	if sn.State == api.SnapshotDurable {
		d.mu.Lock()
		if len(d.layers) >= cacheMax {
			clear(d.layers)
		}
		d.layers[id] = l
		d.mu.Unlock()
	}
	return l, true, nil
}

// Any implements control.Fleet: a random healthy node.
func (d *Directory) Any(ctx context.Context) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cutoff := time.Now().Add(-d.cfg.FenceAfter)
	var ids []string
	for id, n := range d.nodes {
		if n.State != store.NodeFenced && n.HeartbeatAt.After(cutoff) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", api.Errorf(api.CodeUnavailable, "no node of the fleet is up")
	}
	slices.Sort(ids)
	return ids[d.rng.IntN(len(ids))], nil
}

// Node implements control.Fleet.
func (d *Directory) Node(id string) (http.Handler, error) {
	if h, ok := d.local[id]; ok {
		return h, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.nodes[id]
	if !ok {
		return nil, fmt.Errorf("no node %s in the fleet", id)
	}
	if r, ok := d.handlers[id]; ok && r.addr == n.Addr {
		return r.h, nil
	}
	r := routed{addr: n.Addr, h: d.remote(id, n.Addr)}
	d.handlers[id] = r
	return r.h, nil
}

// RegisterMetrics registers the directory's gauges with reg, read at each
// scrape: the fleet's nodes by state, as the directory last read them.
func (d *Directory) RegisterMetrics(reg *metrics.Registry) {
	states := []string{store.NodeActive, store.NodeCordoned, store.NodeDraining, store.NodeFenced}
	reg.Gauges([]metrics.Family{{
		Name: "warren_fleet_nodes", Help: "The fleet's nodes as this control replica last read them, by state (active, cordoned, draining, fenced).", Labels: []string{"state"},
	}}, func() [][]metrics.Sample {
		counts := map[string]int{}
		d.mu.Lock()
		for _, n := range d.nodes {
			counts[n.State]++
		}
		d.mu.Unlock()
		var samples []metrics.Sample
		for _, st := range states {
			samples = append(samples, metrics.Sample{Labels: []string{st}, Value: float64(counts[st])})
		}
		return [][]metrics.Sample{samples}
	})
}
