package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"warren/api"
	"warren/internal/guest"
	"warren/internal/network"
	"warren/internal/network/policy"
	"warren/internal/runtime"
	"warren/internal/store"
)

// validNetwork checks a requested egress policy. A node without sandbox
// networking gives sandboxes loopback only, which satisfies none and
// nothing else.
func (m *Manager) validNetwork(p *api.NetworkPolicy) (api.NetworkPolicy, error) {
	if p == nil {
		return api.NetworkPolicy{}, nil
	}
	if m.deps.Network == nil && (!p.None || len(p.Allow) > 0 || len(p.Deny) > 0) {
		return api.NetworkPolicy{}, api.Errorf(api.CodeBadRequest,
			"this node has no sandbox networking (its sandboxes have loopback only): network may only be {\"none\": true}")
	}
	if _, err := policy.Parse(*p); err != nil {
		return api.NetworkPolicy{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return *p, nil
}

// attaching is a sandbox's router in the making (network.Node.Attach, in
// its own goroutine). It is the runtime's runtime.Network: a runtime that
// links the sandbox waits for the router then.
type attaching struct {
	done  chan struct{} // closed when Attach has returned
	n     *network.Node
	s     *network.Sandbox
	err   error
	spent time.Duration
}

var _ runtime.Network = (*attaching)(nil)

// attachNetwork starts making the sandbox's router, when the node has
// networking (else it returns nil). The policy was checked by
// validNetwork.
func (m *Manager) attachNetwork(ctx context.Context, rec *store.Sandbox) *attaching {
	if m.deps.Network == nil {
		return nil
	}
	a := &attaching{done: make(chan struct{}), n: m.deps.Network}
	go func() {
		defer close(a.done)
		t0 := time.Now()
		defer func() { a.spent = time.Since(t0) }()
		pol, err := policy.Parse(rec.Network)
		if err != nil {
			a.err = err
			return
		}
		eg, err := m.egressOf(ctx, rec.ID, rec.Tenant, pol)
		if err != nil {
			a.err = fmt.Errorf("network: %w", err)
			return
		}
		a.s, a.err = a.n.Attach(ctx, rec.ID, pol, eg)
		if a.err != nil {
			a.err = fmt.Errorf("network: %w", a.err)
		}
	}()
	return a
}

// wait returns the router once it is made.
func (a *attaching) wait() (*network.Sandbox, error) {
	<-a.done
	return a.s, a.err
}

// PlugNetNS implements runtime.Network once the router is made.
func (a *attaching) PlugNetNS(path string) error {
	s, err := a.wait()
	if err != nil {
		return err
	}
	return s.PlugNetNS(path)
}

// Tap implements runtime.Network once the router is made.
func (a *attaching) Tap() (*os.File, error) {
	s, err := a.wait()
	if err != nil {
		return nil, err
	}
	return s.Tap()
}

// slot is the router's slot in the pool (0 without networking), once made.
func (a *attaching) slot() (int, error) {
	if a == nil {
		return 0, nil
	}
	s, err := a.wait()
	if err != nil {
		return 0, err
	}
	return s.Slot(), nil
}

// undo removes the router, once made, after a failed start.
func (a *attaching) undo() {
	if a == nil {
		return
	}
	if s, err := a.wait(); err == nil {
		a.n.Detach(s)
	}
}

// took is how long making the router took, for the start's timings.
func (a *attaching) took() time.Duration {
	if a == nil {
		return 0
	}
	<-a.done
	return a.spent
}

// adoptNetwork takes back the router of a sandbox an earlier daemon
// started and gives it to spec. A sandbox started without a network (by a
// daemon with networking off) stays without.
func (m *Manager) adoptNetwork(rec *store.Sandbox, spec *runtime.Spec) error {
	if m.deps.Network == nil || rec.NetSlot == 0 {
		return nil
	}
	pol, err := policy.Parse(rec.Network)
	if err != nil {
		return err
	}
	eg, err := m.egressOf(context.Background(), rec.ID, rec.Tenant, pol)
	if err != nil {
		return err
	}
	s, err := m.deps.Network.Adopt(rec.ID, rec.NetSlot, pol, eg)
	if err != nil {
		return err
	}
	spec.Network = s
	return nil
}

// lookupNetwork is the sandbox's router, if the node has networking and the
// sandbox a router.
func (m *Manager) lookupNetwork(id string) (*network.Sandbox, bool) {
	if m.deps.Network == nil {
		return nil, false
	}
	return m.deps.Network.Lookup(id)
}

// detachNetwork removes the sandbox's router, if it has one.
func (m *Manager) detachNetwork(id string) error {
	if m.deps.Network == nil {
		return nil
	}
	if s, ok := m.deps.Network.Lookup(id); ok {
		return m.deps.Network.Detach(s)
	}
	return nil
}

// Network answers a running or paused sandbox's egress policy and counters.
func (m *Manager) Network(ctx context.Context, tenant, id string) (api.NetworkStatus, error) {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.NetworkStatus{}, err
	}
	return m.networkStatus(rec)
}

func (m *Manager) networkStatus(rec store.Sandbox) (api.NetworkStatus, error) {
	st := api.NetworkStatus{Policy: rec.Network, Address: guest.Address.String(), Gateway: guest.Gateway.String()}
	if m.deps.Network == nil {
		return st, nil
	}
	s, ok := m.deps.Network.Lookup(rec.ID)
	if !ok {
		return st, nil
	}
	c, err := s.Counters()
	if err != nil {
		return api.NetworkStatus{}, fmt.Errorf("network counters of %s: %w", rec.ID, err)
	}
	st.Denied, st.RateLimited = c.Denied, c.RateLimited
	return st, nil
}

// SetNetwork replaces the egress policy of a running sandbox: the
// router's rules change at once (and the sandbox trusts its CA, at its
// first rules), then the record.
func (m *Manager) SetNetwork(ctx context.Context, tenant, id string, p api.NetworkPolicy) (api.NetworkStatus, error) {
	l, err := m.alive(ctx, tenant, id, api.StateRunning)
	if err != nil {
		return api.NetworkStatus{}, err
	}
	if _, err := m.validNetwork(&p); err != nil {
		return api.NetworkStatus{}, err
	}
	if err := m.checkRules(ctx, tenant, p); err != nil {
		return api.NetworkStatus{}, err
	}
	if s, ok := m.lookupNetwork(id); ok {
		pol, _ := policy.Parse(p) // checked above
		eg, err := m.egressOf(ctx, id, tenant, pol)
		if err != nil {
			return api.NetworkStatus{}, err
		}
		if err := s.SetPolicy(pol, eg); err != nil {
			return api.NetworkStatus{}, fmt.Errorf("set network of %s: %w", id, err)
		}
		if err := m.trustEgressCA(ctx, id, l.conn); err != nil {
			return api.NetworkStatus{}, fmt.Errorf("set network of %s: %w", id, err)
		}
	}
	if err := m.deps.Store.SetSandboxNetwork(ctx, id, p); err != nil {
		return api.NetworkStatus{}, err
	}
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.NetworkStatus{}, err
	}
	m.log.Info("sandbox network policy changed", "sandbox", id, "none", p.None, "allow", len(p.Allow), "deny", len(p.Deny), "rules", len(p.Rules))
	return m.networkStatus(rec)
}

// DialPort connects to a TCP port a running sandbox of tenant listens on,
// through its router (docs/NETWORK.md). CodeNotFound for an unknown
// sandbox; CodeConflict for one not running, on a node without sandbox
// networking. Nothing listening on the port is an error that matches
// syscall.ECONNREFUSED.
func (m *Manager) DialPort(ctx context.Context, tenant, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, api.Errorf(api.CodeBadRequest, "port must be between 1 and 65535, got %d", port)
	}
	l, err := m.use(ctx, tenant, id, fmt.Sprintf("a request to its port %d", port))
	if err != nil {
		return nil, err
	}
	if m.deps.Network == nil {
		return nil, api.Errorf(api.CodeConflict, "this node has no sandbox networking: ports cannot be reached")
	}
	s, ok := m.deps.Network.Lookup(id)
	if !ok {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s has no network", id)
	}
	c, err := s.Dial(ctx, port)
	if err != nil {
		return nil, fmt.Errorf("dial port %d of %s: %w", port, id, err)
	}
	return &usedConn{Conn: c, end: l.used.begin()}, nil
}

// usedConn is a connection to a sandbox's port, which uses the sandbox
// until it is closed.
type usedConn struct {
	net.Conn
	end func()
}

func (c *usedConn) Close() error {
	c.end()
	return c.Conn.Close()
}
