// Package fleet joins a fleet's nodes and control replicas through the
// metadata store they share (docs/ARCHITECTURE.md, "The fleet"); there is
// no other channel between them and no consensus of warren's own.
//
// A node is a Member: it registers its record (store.RegisterNode), which
// gives it a lease epoch, and renews the lease with a heartbeat that also
// carries its Report. When a heartbeat finds the epoch stale, the node was
// fenced: it stops everything it runs (its sandboxes may run elsewhere
// now) and registers again, empty. When it cannot reach the store for
// longer than its lease, it fences itself the same way, before any control
// replica fences it (Config.FenceAfter is longer than the lease): two live
// copies of a sandbox never run at once.
//
// A control replica keeps a Directory: the nodes as their last reports show
// them, for the front to route to (it is a control.Fleet), for the
// scheduler to place on, and for fencing the nodes that stopped renewing.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"warren/api"
	"warren/internal/scheduler"
	"warren/internal/store"
)

// Report is what a node says of itself at each heartbeat: what the
// scheduler needs (store.Node.Report holds its JSON).
type Report struct {
	// Capacity is what the node may promise, its own overcommit applied;
	// Allocated what its sandboxes hold of it.
	Capacity, Allocated scheduler.Resources
	Sandboxes           int
	Runtimes            []scheduler.Runtime
	CPU                 scheduler.CPU
	// Layers are the snapshot and template base layers the node holds
	// materialized: a restore of their lineage fetches less there.
	Layers []scheduler.Layer
}

// Config times the leases.
type Config struct {
	// Heartbeat is how often a node renews its lease (default 1s).
	Heartbeat time.Duration
	// Lease is how long a node that cannot renew runs on before it fences
	// itself (default 5s).
	Lease time.Duration
	// FenceAfter is how long after its last heartbeat a control replica
	// fences a node (default twice the lease): longer than the lease, so
	// that the node has stopped by then.
	FenceAfter time.Duration
}

// Defaults is c with its zero fields set to their defaults: the timing a
// Member keeps.
func (c Config) Defaults() Config { return c.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 5 * time.Second
	}
	if c.FenceAfter <= 0 {
		c.FenceAfter = 2 * c.Lease
	}
	return c
}

// Check reports a timing that would let two copies of a sandbox run: a
// node must renew its lease more often than it lasts, and stop its
// sandboxes before any replica fences it.
func (c Config) Check() error {
	c = c.withDefaults()
	switch {
	case c.Heartbeat >= c.Lease:
		return fmt.Errorf("the heartbeat (%v) must be shorter than the lease (%v)", c.Heartbeat, c.Lease)
	case c.FenceAfter <= c.Lease:
		return fmt.Errorf("fence-after (%v) must be longer than the lease (%v): a node stops its sandboxes when its lease lapses, and only after that may they run elsewhere", c.FenceAfter, c.Lease)
	}
	return nil
}

// Member is a node's membership of the fleet.
type Member struct {
	st     *store.Store
	node   store.Node // as registered: its epoch is the lease
	report func() Report
	fence  func(ctx context.Context)
	// renewed is told, after each registration and heartbeat that renewed
	// the lease, when it was sent: the store granted the lease from then.
	renewed func(sent time.Time)
	cfg     Config
	log     *slog.Logger
}

// Join registers node n (its ID, address, region, cluster and labels) and
// returns its membership, whose Run keeps the lease. report tells the node's
// figures at each heartbeat; fence stops everything the node runs, when it
// loses its lease; renewed is told the time each renewal of the lease was
// sent (its registration's too), from one goroutine at a time.
func Join(ctx context.Context, st *store.Store, n store.Node, report func() Report, fence func(context.Context), renewed func(sent time.Time), cfg Config, log *slog.Logger) (*Member, error) {
	m := &Member{st: st, node: n, report: report, fence: fence, renewed: renewed, cfg: cfg.withDefaults(), log: log}
	if err := m.register(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Member) register(ctx context.Context) error {
	b, err := json.Marshal(m.report())
	if err != nil {
		return err
	}
	m.node.Report = b
	sent := time.Now()
	rec, err := m.st.RegisterNode(ctx, m.node, sent)
	if err != nil {
		return err
	}
	m.node = rec
	m.renewed(sent)
	m.log.Info("joined the fleet", "node", rec.ID, "epoch", rec.Epoch, "state", rec.State, "addr", rec.Addr)
	return nil
}

// Run renews the lease every Config.Heartbeat until ctx ends, fencing the
// node when it loses it (see the package comment).
func (m *Member) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	renewed := time.Now()
	lost := false // fenced, and not registered again yet
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if lost {
			if err := m.rejoin(ctx); err != nil {
				m.log.Warn("cannot join the fleet again", "err", err)
				continue
			}
			lost, renewed = false, time.Now()
			continue
		}
		b, err := json.Marshal(m.report())
		// The lease runs from the heartbeat's sending, not from its answer:
		// the store may have taken a while.
		sent := time.Now()
		if err == nil {
			err = m.st.Heartbeat(ctx, m.node.ID, m.node.Epoch, b, sent)
		}
		switch {
		case err == nil:
			renewed = sent
			m.renewed(sent)
		case errors.Is(err, store.ErrFenced):
			m.log.Error("fenced: this node's lease was revoked; stopping its sandboxes", "node", m.node.ID, "epoch", m.node.Epoch)
			m.fence(ctx)
			lost = true
		case ctx.Err() != nil:
			return
		case time.Since(renewed) > m.cfg.Lease:
			m.log.Error("fencing itself: the lease could not be renewed in time", "node", m.node.ID, "since", time.Since(renewed), "err", err)
			m.fence(ctx)
			lost = true
		default:
			m.log.Warn("heartbeat failed", "node", m.node.ID, "err", err)
		}
	}
}

// rejoin registers the fenced node again, with a new epoch, and records
// as failed what the store still shows it running: nothing runs there
// now, and no control replica moved it on.
func (m *Member) rejoin(ctx context.Context) error {
	if err := m.register(ctx); err != nil {
		return err
	}
	recs, err := m.st.NodeSandboxes(ctx, m.node.ID, store.Live)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		failLost(ctx, m.st, rec, "its node lost its lease in the fleet and stopped it", m.log)
	}
	return nil
}

// failLost records a sandbox whose node was lost as failed, unless its
// record moved on meanwhile.
func failLost(ctx context.Context, st *store.Store, rec store.Sandbox, reason string, log *slog.Logger) {
	none := time.Time{}
	_, err := st.Transition(ctx, rec.ID, store.Transition{
		From: store.Live, Version: rec.Version, To: api.StateFailed, Error: reason, Expires: &none,
	})
	if err != nil && !errors.Is(err, store.ErrTransition) {
		log.Error("record a lost sandbox failed", "sandbox", rec.ID, "err", err)
		return
	}
	if err == nil {
		log.Warn("sandbox lost with its node", "sandbox", rec.ID, "node", rec.Node)
	}
}
