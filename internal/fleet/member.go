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
	"sync/atomic"
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
	st    *store.Store
	node  store.Node // as registered: its epoch is the lease
	hooks Hooks
	cfg   Config
	log   *slog.Logger
	// draining is set while Hooks.Drain runs.
	draining atomic.Bool
}

// Hooks are what a membership calls on the node.
type Hooks struct {
	// Report tells the node's figures at each heartbeat.
	Report func() Report
	// Fence stops everything the node runs, when it loses its lease.
	Fence func(ctx context.Context)
	// Drain moves the node's sandboxes away: called, in a goroutine of
	// its own, at a heartbeat that finds the node draining, unless the
	// call before has not returned.
	Drain func(ctx context.Context)
	// Renewed is told, after each registration and heartbeat that renewed
	// the lease, when it was sent (the store granted the lease from then),
	// from one goroutine at a time.
	Renewed func(sent time.Time)
}

// Join registers node n (its ID, address, region, cluster and labels) and
// returns its membership, whose Run keeps the lease and calls hooks.
func Join(ctx context.Context, st *store.Store, n store.Node, hooks Hooks, cfg Config, log *slog.Logger) (*Member, error) {
	m := &Member{st: st, node: n, hooks: hooks, cfg: cfg.withDefaults(), log: log}
	if err := m.register(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Member) register(ctx context.Context) error {
	b, err := json.Marshal(m.hooks.Report())
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
	m.hooks.Renewed(sent)
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
		b, err := json.Marshal(m.hooks.Report())
		// The lease runs from the heartbeat's sending, not from its answer:
		// the store may have taken a while.
		sent := time.Now()
		state := ""
		if err == nil {
			state, err = m.st.Heartbeat(ctx, m.node.ID, m.node.Epoch, b, sent)
		}
		switch {
		case err == nil:
			renewed = sent
			m.hooks.Renewed(sent)
			if state == store.NodeDraining && m.draining.CompareAndSwap(false, true) {
				go func() {
					defer m.draining.Store(false)
					m.hooks.Drain(ctx)
				}()
			}
		case errors.Is(err, store.ErrFenced):
			m.log.Error("fenced: this node's lease was revoked; stopping its sandboxes", "node", m.node.ID, "epoch", m.node.Epoch)
			m.hooks.Fence(ctx)
			lost = true
		case ctx.Err() != nil:
			return
		case time.Since(renewed) > m.cfg.Lease:
			m.log.Error("fencing itself: the lease could not be renewed in time", "node", m.node.ID, "since", time.Since(renewed), "err", err)
			m.hooks.Fence(ctx)
			lost = true
		default:
			m.log.Warn("heartbeat failed", "node", m.node.ID, "err", err)
		}
	}
}

// rejoin registers the fenced node again, with a new epoch; what the
// store still shows it running moves or fails (lose): nothing runs there
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
		lose(ctx, m.st, rec, time.Now(), "its node lost its lease in the fleet and stopped it", m.log)
	}
	return nil
}

// lose records a sandbox whose node was lost at lostAt as moving, for a
// control replica to place from its checkpoint, or failed when it has
// none (store.Lose), unless its record moved on meanwhile.
func lose(ctx context.Context, st *store.Store, rec store.Sandbox, lostAt time.Time, reason string, log *slog.Logger) {
	now, err := st.Lose(ctx, rec, "", lostAt, reason)
	switch {
	case errors.Is(err, store.ErrTransition):
	case err != nil:
		log.Error("record a lost sandbox", "sandbox", rec.ID, "err", err)
	case now.State == api.StateMoving:
		log.Warn("sandbox lost with its node; it moves from its checkpoint", "sandbox", rec.ID, "node", rec.Node, "checkpoint", now.Restored.Snapshot)
	default:
		log.Warn("sandbox lost with its node", "sandbox", rec.ID, "node", rec.Node)
	}
}
