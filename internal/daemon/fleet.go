package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"warren/api"
	"warren/internal/fleet"
	"warren/internal/leasewatch"
	"warren/internal/node"
	"warren/internal/pki"
	"warren/internal/sandbox"
	"warren/internal/scheduler"
	"warren/internal/server"
	"warren/internal/snapshot"
	"warren/internal/store"
)

// FleetNode makes the daemon a node of a fleet.
type FleetNode struct {
	// Member is the node's certificate from the fleet's CA: its name is
	// the node's ID.
	Member *pki.Member
	// Listen is the address of the node's API; Advertise the address
	// control replicas reach it at (default: the one Listen bound).
	Listen, Advertise string
	Region, Cluster   string
	Labels            map[string]string
	Lease             fleet.Config
	// ControlSecrets are the control replicas' fleet listeners
	// (host:port), which resolve the secrets of the node's sandboxes'
	// egress rules; none: rules that name secrets are refused.
	ControlSecrets []string
}

// joinFleet starts the node's lease watchdog, registers the node and
// returns its membership.
func joinFleet(ctx context.Context, st *store.Store, o Options, bound string, mgr *sandbox.Manager, nd *node.Node, snaps *snapshot.Engine) (*fleet.Member, error) {
	f := o.Fleet
	if err := f.Lease.Check(); err != nil {
		return nil, err
	}
	if f.Member.ID != (pki.Identity{Role: pki.Node, Name: o.NodeID}) {
		return nil, fmt.Errorf("the fleet certificate names %s, not this node (%s): make one with warren fleet cert --role node --name %s", f.Member.ID, o.NodeID, o.NodeID)
	}
	rec := store.Node{ID: o.NodeID, Addr: cmp.Or(f.Advertise, bound), Region: f.Region, Cluster: f.Cluster, Labels: f.Labels}
	log := subsystem(o.Log, "fleet")
	// What does not change while the node runs is read once; its usage
	// and what its cache holds, at every heartbeat.
	static := fleet.Report{Runtimes: runtimesOf(nd.Info(ctx, "", true))}
	static.CPU.Model, static.CPU.Flags = node.CPU()
	report := func() fleet.Report { return nodeReport(static, mgr, snaps, log) }
	drain := func(ctx context.Context) {
		if n := mgr.Drain(ctx, fmt.Sprintf("its node %s was drained", o.NodeID)); n > 0 {
			log.Info("drained: sandboxes moved away", "sandboxes", n)
		}
	}
	// Before the first renewal: should this daemon die, the watchdog
	// kills what it leaves running once the lease lapses. It outlives a
	// clean exit too (the sandboxes do, for the next daemon to adopt).
	timing := f.Lease.Defaults()
	watch, err := leasewatch.Start(leasewatch.Options{
		DataDir: o.DataDir, StateDir: sandboxStateDir(o.DataDir), Lease: timing.Lease, Log: subsystem(o.Log, "leasewatch"),
	})
	if err != nil {
		return nil, err
	}
	return fleet.Join(ctx, st, rec, fleet.Hooks{Report: report, Fence: mgr.Fence, Drain: drain, Renewed: watch.Renew}, timing, log)
}

// runtimesOf are the available runtimes of info, as the scheduler names
// them.
func runtimesOf(info api.NodeInfo) []scheduler.Runtime {
	var out []scheduler.Runtime
	for _, ri := range info.Runtimes {
		if !ri.Available {
			continue
		}
		iso := scheduler.IsolationContainer
		switch {
		case strings.HasPrefix(ri.Isolation, "vm"):
			iso = scheduler.IsolationVM
		case strings.HasPrefix(ri.Isolation, "gvisor"):
			iso = scheduler.IsolationGVisor
		}
		out = append(out, scheduler.Runtime{Name: ri.Name, Isolation: iso, Accel: ri.Accel})
	}
	return out
}

// nodeReport is what the node tells the fleet at a heartbeat: static, with
// its usage and the layers its cache holds now.
func nodeReport(static fleet.Report, mgr *sandbox.Manager, snaps *snapshot.Engine, log *slog.Logger) fleet.Report {
	u := mgr.Usage()
	amounts := func(a sandbox.Amounts) scheduler.Resources {
		return scheduler.Resources{MilliCPUs: int64(a.CPUs * 1000), MemoryMB: a.MemoryMB, DiskMB: a.DiskMB}
	}
	r := static
	r.Capacity, r.Allocated, r.Sandboxes = amounts(u.Capacity), amounts(u.Claimed), u.Sandboxes
	held, err := snaps.Held()
	if err != nil {
		log.Warn("the fleet is not told what the node holds", "err", err)
	}
	for _, l := range held {
		r.Layers = append(r.Layers, scheduler.Layer{ID: l.ID, Size: l.Bytes})
	}
	return r
}

// Fleet lists, cordons and drains the fleet's nodes in st, for the API.
func Fleet(st *store.Store) server.Fleet { return storeFleet{st} }

// storeFleet is server.Fleet over the store.
type storeFleet struct{ st *store.Store }

func (f storeFleet) Nodes(ctx context.Context) ([]api.FleetNode, error) {
	recs, err := f.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.FleetNode, 0, len(recs))
	for _, rec := range recs {
		out = append(out, fleetNode(rec))
	}
	return out, nil
}

// nodeActions are what each node action moves a node to, and from.
var nodeActions = map[string]struct {
	from []string
	to   string
}{
	api.NodeCordon:   {[]string{store.NodeActive}, store.NodeCordoned},
	api.NodeUncordon: {[]string{store.NodeCordoned, store.NodeDraining}, store.NodeActive},
	api.NodeDrain:    {[]string{store.NodeActive, store.NodeCordoned}, store.NodeDraining},
}

func (f storeFleet) NodeAction(ctx context.Context, id, action string) (api.FleetNode, error) {
	move, ok := nodeActions[action]
	if !ok {
		return api.FleetNode{}, api.Errorf(api.CodeBadRequest, "node action %q: want cordon, uncordon or drain", action)
	}
	from, to := move.from, move.to
	rec, err := f.st.GetNode(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.FleetNode{}, api.Errorf(api.CodeNotFound, "node %s not found", id)
	case err != nil:
		return api.FleetNode{}, err
	case rec.State == to:
		return fleetNode(rec), nil
	}
	rec, err = f.st.SetNodeState(ctx, id, from, to)
	if errors.Is(err, store.ErrNodeState) {
		return api.FleetNode{}, api.Errorf(api.CodeConflict, "node %s cannot be made %s: %v", id, to, err)
	}
	if err != nil {
		return api.FleetNode{}, err
	}
	return fleetNode(rec), nil
}

// fleetNode is a node's record as the API shows it.
func fleetNode(rec store.Node) api.FleetNode {
	var r fleet.Report
	json.Unmarshal(rec.Report, &r) // a record without a report shows none
	amounts := func(res scheduler.Resources) api.Amounts {
		return api.Amounts{CPUs: float64(res.MilliCPUs) / 1000, MemoryMB: res.MemoryMB, DiskMB: res.DiskMB}
	}
	n := api.FleetNode{
		ID: rec.ID, Addr: rec.Addr, Region: rec.Region, Cluster: rec.Cluster, Labels: rec.Labels,
		State: rec.State, Epoch: rec.Epoch, HeartbeatAt: rec.HeartbeatAt, Sandboxes: r.Sandboxes,
		Capacity: amounts(r.Capacity), Allocated: amounts(r.Allocated), Runtimes: []string{},
	}
	for _, rt := range r.Runtimes {
		n.Runtimes = append(n.Runtimes, rt.Name)
	}
	return n
}
