//go:build linux

// Package network gives every sandbox on a node its network, as
// docs/NETWORK.md describes: a router namespace of its own (R) linked to the
// host by a veth pair from the node's pool, and to the sandbox by a veth
// pair into a container's namespace or a tap device for a VM; the rules
// that enforce its egress policy (package firewall) and the node's DNS
// resolver that answers by that policy (package resolver).
//
// Links, addresses, routes and qdiscs are made over netlink; rules over
// nftables' netlink API. Nothing shells out. A few routers are kept ready
// with the default policy (Config.Warm), so that a create takes one instead
// of waiting for the kernel. Router namespaces are bound under the node's
// run directory, so sandboxes keep their network while the daemon
// restarts; Adopt takes them back and Sweep removes what no sandbox owns.
//
// It does not decide policies (package policy parses them; the sandbox
// manager stores them) and does not configure the inside of a sandbox: the
// container's and the guest's inits do that with package guest.
package network

import (
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"warren/internal/network/firewall"
	"warren/internal/network/policy"
	"warren/internal/network/resolver"
	"warren/internal/warmpool"
)

// Interface names. Host ends of sandbox links are IfacePrefix followed by
// the 8 hex digits of their address (unique on the host: pools do not
// overlap), so that a router is made before its sandbox has an ID.
const (
	IfacePrefix        = "ws"
	tapPrefix          = "wt"
	routerSandboxIface = "sb0"
	routerUplinkIface  = "up0"
)

// Defaults of Config.
var (
	DefaultPool = netip.MustParsePrefix("10.201.0.0/16")
)

const (
	DefaultRunDir   = "/run/warren/net"
	DefaultMbps     = 1000
	DefaultConnRate = 200
	DefaultWarm     = 4
	// warmDelay is how long the pool waits after a router was taken before
	// it makes another: making one while a burst of creates runs would
	// slow them down.
	warmDelay = 100 * time.Millisecond
	// dialTimeout bounds a connection to a sandbox's port.
	dialTimeout = 10 * time.Second
	// queueLatency bounds how long a packet waits in a rate limit's queue.
	queueLatency = 50 * time.Millisecond
)

// alwaysDeny are destinations no policy opens (besides the node's pool).
var alwaysDeny = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Config configures a node's sandbox networking.
type Config struct {
	// Pool is the node's sandbox address pool: a /30 per sandbox, the first
	// for the resolver. IPv4, /16 to /28. Two warren servers on one host
	// need two pools; New refuses one that overlaps another server's pool
	// or the host's addresses and routes. Default DefaultPool.
	Pool netip.Prefix
	// PoolFile, when set, makes the pool automatic: the one recorded in
	// this file, else the first free one of AutoPools, then recorded
	// there (so that a restarted server finds its sandboxes' addresses
	// again). Pool is ignored.
	PoolFile string
	// RunDir holds the router namespaces' files; default DefaultRunDir.
	RunDir string
	// Upstreams are the DNS servers the resolver asks; default the host's
	// /etc/resolv.conf.
	Upstreams []netip.AddrPort
	// Mbps is each sandbox's bandwidth limit in each direction, in
	// megabits per second; default DefaultMbps.
	Mbps int
	// ConnRate is how many new connections per second a sandbox may open;
	// default DefaultConnRate.
	ConnRate uint32
	// Warm is how many routers are kept ready (with the default policy);
	// 0: none, every create makes its own.
	Warm int
	// EgressRoots verify the servers the egress interceptor connects to;
	// nil: the host's trust store.
	EgressRoots *x509.CertPool
	Log         *slog.Logger
}

// Node is one daemon's sandbox networking. It is safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	dir      string
	lock     *os.File
	table    string
	resolver netip.AddrPort
	dns      *resolver.Server

	mu     sync.Mutex
	byID   map[string]*Sandbox
	bySlot map[int]*Sandbox // every router, warm ones included
	// retired are the refusals of the routers removed since the node
	// started, so that Refusals only grows.
	retired Counters

	pool *warmpool.Pool[*Sandbox] // ready routers no sandbox has taken yet
}

// New sets up the node's part: it takes the pool (one server per pool on a
// host), turns on IPv4 forwarding, makes the resolver's interface, the
// host's rules and starts the resolver.
func New(cfg Config) (_ *Node, err error) {
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	cfg.Pool = cfg.Pool.Masked()
	if cfg.RunDir == "" {
		cfg.RunDir = DefaultRunDir
	}
	if cfg.Mbps == 0 {
		cfg.Mbps = DefaultMbps
	}
	if cfg.ConnRate == 0 {
		cfg.ConnRate = DefaultConnRate
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Upstreams == nil {
		if cfg.Upstreams, err = resolver.Upstreams("/etc/resolv.conf"); err != nil {
			return nil, err
		}
	}
	pool, lock, err := claimPool(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	cfg.Pool = pool
	n := &Node{
		cfg: cfg, log: cfg.Log.With("subsystem", "network"),
		dir:      poolDir(cfg.RunDir, cfg.Pool),
		lock:     lock,
		table:    hostTable(cfg.Pool),
		resolver: netip.AddrPortFrom(slotAddr(cfg.Pool, 0, 1), 53),
		byID:     map[string]*Sandbox{}, bySlot: map[int]*Sandbox{},
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	if err := n.resolverAddress(); err != nil {
		return nil, err
	}
	if err := firewall.ApplyHost(firewall.Host{
		Table: n.table, Pool: cfg.Pool, IfacePrefix: IfacePrefix, Resolver: n.resolver,
	}); err != nil {
		return nil, fmt.Errorf("host rules: %w", err)
	}
	if n.dns, err = resolver.Start(resolver.Config{
		Listen: n.resolver, Upstreams: cfg.Upstreams, Lookup: n.lookup, Log: n.log,
	}); err != nil {
		return nil, err
	}
	n.pool = warmpool.New(warmpool.Config[*Sandbox]{
		Size: cfg.Warm, Make: n.makeWarm, Discard: (*Sandbox).destroy, Quiet: warmDelay, Log: n.log,
	})
	n.log.Info("sandbox networking ready", "pool", cfg.Pool, "resolver", n.resolver,
		"upstreams", cfg.Upstreams, "mbps", cfg.Mbps, "conn_rate", cfg.ConnRate, "warm", cfg.Warm)
	return n, nil
}

// Close stops the resolver, removes the warm routers and lets the pool go.
// Sandboxes keep their routers and the host keeps its rules: a restarted
// daemon adopts them.
func (n *Node) Close() error {
	errs := []error{n.pool.Close(), n.dns.Close()}
	n.lock.Close()
	return errors.Join(errs...)
}

// resolverAddress puts the resolver's address on the host's loopback
// interface (a /32: the rest of slot 0 stays unrouted), where packets from
// every router reach it.
func (n *Node) resolverAddress() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(n.resolver.Addr(), 32))}
	if err := netlink.AddrReplace(lo, addr); err != nil {
		return fmt.Errorf("resolver address: %w", err)
	}
	return nil
}

// slotAddr is host number i (1: the host end, 2: the router end) of slot's
// /30 in pool.
func slotAddr(pool netip.Prefix, slot, i int) netip.Addr {
	b := pool.Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(slot)*4 + uint32(i)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// slots is how many sandbox slots the pool has (slot 0 is the resolver's).
func (n *Node) slots() int { return 1<<(32-n.cfg.Pool.Bits())/4 - 1 }

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

// register claims a slot for sandbox id (the lowest free one when slot is
// 0); id "" is a warm router's.
func (n *Node) register(id string, slot int, pol policy.Policy) (*Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id != "" && n.byID[id] != nil {
		return nil, fmt.Errorf("sandbox %s already has a network", id)
	}
	if slot == 0 {
		for i := 1; i <= n.slots(); i++ {
			if n.bySlot[i] == nil {
				slot = i
				break
			}
		}
		if slot == 0 {
			return nil, fmt.Errorf("network pool %s is full (%d sandboxes)", n.cfg.Pool, n.slots())
		}
	} else if slot > n.slots() || n.bySlot[slot] != nil {
		return nil, fmt.Errorf("network slot %d of sandbox %s is not free", slot, id)
	}
	s := n.newSandbox(id, slot, pol)
	n.bySlot[slot] = s
	if id != "" {
		n.byID[id] = s
	}
	return s, nil
}

// unregister forgets s, and keeps its last counters c in the node's.
func (n *Node) unregister(s *Sandbox, c Counters) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.bySlot[s.slot] == s {
		delete(n.bySlot, s.slot)
		n.retired.Denied += c.Denied
		n.retired.RateLimited += c.RateLimited
	}
	if s.id != "" && n.byID[s.id] == s {
		delete(n.byID, s.id)
	}
}

// Refusals are the refusals of every router the node has had since it
// started: those it has now and those removed.
func (n *Node) Refusals() Counters {
	n.mu.Lock()
	live := slices.Collect(maps.Values(n.byID))
	n.mu.Unlock()
	read := make(map[*Sandbox]Counters, len(live))
	for _, s := range live {
		if c, err := s.Counters(); err == nil {
			read[s] = c
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	sum := n.retired
	for s, c := range read {
		if n.bySlot[s.slot] == s { // not retired since: its counters are not in sum
			sum.Denied += c.Denied
			sum.RateLimited += c.RateLimited
		}
	}
	return sum
}

// Lookup returns the network of an attached or adopted sandbox.
func (n *Node) Lookup(id string) (*Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.byID[id]
	return s, ok
}

// lookup tells the resolver which sandbox a query comes from: the router's
// uplink address, after its source NAT.
func (n *Node) lookup(src netip.Addr) (resolver.Client, bool) {
	if !n.cfg.Pool.Contains(src) {
		return resolver.Client{}, false
	}
	b, p := src.As4(), n.cfg.Pool.Addr().As4()
	off := binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(p[:])
	if off%4 != 2 {
		return resolver.Client{}, false
	}
	n.mu.Lock()
	s := n.bySlot[int(off/4)]
	n.mu.Unlock()
	if s == nil || s.id == "" {
		return resolver.Client{}, false
	}
	s.mu.Lock()
	pol := s.pol
	s.mu.Unlock()
	return resolver.Client{
		ID:     s.id,
		Policy: &pol,
		Pin: func(v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error {
			return s.withNS(func(fd int) error { return firewall.Pin(fd, v, addrs, ttl) })
		},
		Denied:    func() { s.dnsDenied.Add(1) },
		Intercept: s.intercept,
	}, true
}
