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
// container's and the guest's inits do that with package guestnet.
package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"warren/internal/guestnet"
	"warren/internal/netnsfile"
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
	Log  *slog.Logger
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

// StartWarm starts keeping Config.Warm routers ready. The daemon calls it
// once every sandbox of an earlier process was adopted at its slot and the
// rest swept.
func (n *Node) StartWarm() {
	n.pool.Start()
}

// Close stops the resolver, removes the warm routers and lets the pool go.
// Sandboxes keep their routers and the host keeps its rules: a restarted
// daemon adopts them.
func (n *Node) Close() error {
	errs := []error{n.pool.Close(), n.dns.Close()}
	n.lock.Close()
	return errors.Join(errs...)
}

// makeWarm makes a router with the default policy for the pool.
func (n *Node) makeWarm() (*Sandbox, error) {
	s, err := n.register("", 0, policy.Policy{})
	if err != nil {
		return nil, err
	}
	if err := s.build(filepath.Join(n.dir, fmt.Sprintf("warm-%d", s.slot))); err != nil {
		return nil, err
	}
	return s, nil
}

// takeWarm takes a ready router for sandbox id, or returns nil when there
// is none: its namespace is bound again under id's name.
func (n *Node) takeWarm(id string) *Sandbox {
	n.mu.Lock()
	dup := n.byID[id] != nil
	n.mu.Unlock()
	if dup {
		return nil
	}
	s, ok := n.pool.Take()
	if !ok {
		return nil
	}
	path := filepath.Join(n.dir, id)
	if err := netnsfile.Rebind(s.nsPath, path); err != nil {
		n.log.Warn("take warm router", "err", err)
		s.destroy()
		return nil
	}
	n.mu.Lock()
	s.id, s.nsPath = id, path
	n.byID[id] = s
	n.mu.Unlock()
	return s
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

// Sandbox is one sandbox's network: its router and links. Its PlugNetNS
// and Tap are what a runtime needs of a network (runtime.Network); this
// package does not import the runtimes' (the sandbox manager, which hands
// a Sandbox to a runtime, is where the two meet).
type Sandbox struct {
	n        *Node
	id       string
	slot     int
	nsPath   string
	host     string     // the host end's interface
	nodeAddr netip.Addr // the router's uplink address
	hostAddr netip.Addr // the host end's address

	// mu guards pol and ns: ns is closed only under it, so that no one
	// uses its number after (the resolver pins from its own goroutines).
	mu        sync.Mutex
	pol       policy.Policy
	ns        netns.NsHandle // the router namespace, open while attached
	dnsDenied atomic.Uint64
}

// Slot is the sandbox's slot in the pool, which the manager records so that
// Adopt finds the same addresses.
func (s *Sandbox) Slot() int { return s.slot }

func (n *Node) newSandbox(id string, slot int, pol policy.Policy) *Sandbox {
	host := slotAddr(n.cfg.Pool, slot, 1)
	return &Sandbox{
		n: n, id: id, slot: slot, pol: pol, ns: netns.None(),
		nsPath:   filepath.Join(n.dir, id),
		host:     hostIface(host),
		nodeAddr: slotAddr(n.cfg.Pool, slot, 2),
		hostAddr: host,
	}
}

// hostIface names the host end of a sandbox's link by its address.
func hostIface(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%s%08x", IfacePrefix, binary.BigEndian.Uint32(b[:]))
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

// Attach gives sandbox id its router: a warm one when the pool has one, else
// a new one (its namespace, the link to the host with the slot's
// addresses, the rate limits), with the rules of pol. The runtime then
// links the sandbox to it (runtime.Network). On error nothing is left.
func (n *Node) Attach(ctx context.Context, id string, pol policy.Policy) (*Sandbox, error) {
	t0 := time.Now()
	if s := n.takeWarm(id); s != nil {
		if !pol.IsDefault() {
			if err := s.SetPolicy(pol); err != nil {
				n.Detach(s)
				return nil, err
			}
		}
		n.log.Debug("sandbox network attached", "sandbox", id, "slot", s.slot, "warm", true, "took", time.Since(t0))
		return s, nil
	}
	s, err := n.register(id, 0, pol)
	if err != nil {
		return nil, err
	}
	if err := s.build(s.nsPath); err != nil {
		return nil, err
	}
	n.log.Debug("sandbox network attached", "sandbox", id, "slot", s.slot, "warm", false, "took", time.Since(t0))
	return s, nil
}

// build makes s's router, bound at path: its namespace, its uplink and its
// rules. On error nothing is left and s is unregistered.
func (s *Sandbox) build(path string) (err error) {
	s.nsPath = path
	defer func() {
		if err != nil {
			s.destroy()
		}
	}()
	if err := netnsfile.Make(s.nsPath, routerSysctls); err != nil {
		return err
	}
	if err := s.openNS(); err != nil {
		return fmt.Errorf("open router namespace: %w", err)
	}
	if err := s.uplink(); err != nil {
		return err
	}
	return s.apply()
}

// uplink links the router to the host.
func (s *Sandbox) uplink() error {
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: s.host},
		PeerName:  routerUplinkIface, PeerNamespace: netlink.NsFd(s.ns),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("router uplink: %w", err)
	}
	if err := up(nil, s.host, netip.PrefixFrom(s.hostAddr, 30)); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(s.ns)
	if err != nil {
		return fmt.Errorf("router netlink: %w", err)
	}
	defer h.Close()
	if err := up(h, "lo", netip.Prefix{}); err != nil {
		return err
	}
	if err := up(h, routerUplinkIface, netip.PrefixFrom(s.nodeAddr, 30)); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{Gw: s.hostAddr.AsSlice()}); err != nil {
		return fmt.Errorf("router default route: %w", err)
	}
	return s.n.shape(h, routerUplinkIface)
}

// up gives the interface name (through h, or the host's netlink when nil)
// the address addr, if valid, and sets it up.
func up(h *netlink.Handle, name string, addr netip.Prefix) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	if addr.IsValid() {
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipNet(addr)}); err != nil {
			return fmt.Errorf("address of %s: %w", name, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("interface %s up: %w", name, err)
	}
	return nil
}

// shape limits what leaves the router's interface name to the node's
// bandwidth per sandbox: a token bucket, with a queue of queueLatency.
func (n *Node) shape(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	rate := uint64(n.cfg.Mbps) * 125_000 // bytes per second
	burst := max(rate/100, 64<<10)       // 10 ms at full rate, at least 64 KiB
	tbf := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Limit:      uint32(rate*uint64(queueLatency)/uint64(time.Second) + burst),
		Buffer:     uint32(float64(burst) * float64(time.Second/time.Microsecond) / float64(rate) * netlink.TickInUsec()),
	}
	if err := h.QdiscReplace(tbf); err != nil {
		return fmt.Errorf("rate limit on %s: %w", name, err)
	}
	return nil
}

// router is what the firewall needs to know of s's router.
func (s *Sandbox) router() firewall.Router {
	return firewall.Router{
		NetNS:        int(s.ns),
		SandboxIface: routerSandboxIface,
		UplinkIface:  routerUplinkIface,
		SandboxAddr:  guestnet.Address,
		GatewayAddr:  guestnet.Gateway,
		NodeAddr:     s.nodeAddr,
		HostAddr:     s.hostAddr,
		Resolver:     s.n.resolver,
		AlwaysDeny:   append([]netip.Prefix{s.n.cfg.Pool}, alwaysDeny...),
		PrivateDeny:  firewall.DefaultPrivate,
		ConnRate:     s.n.cfg.ConnRate,
	}
}

// apply (re)writes the router's rules from the sandbox's policy.
func (s *Sandbox) apply() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ns.IsOpen() {
		return errDetached
	}
	if err := firewall.Apply(s.router(), s.pol); err != nil {
		return fmt.Errorf("router rules: %w", err)
	}
	return nil
}

// errDetached is returned for a sandbox whose router is gone.
var errDetached = errors.New("the sandbox's network is detached")

// withNS calls f with the router namespace's descriptor, which stays open
// until f returns.
func (s *Sandbox) withNS(f func(fd int) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ns.IsOpen() {
		return errDetached
	}
	return f(int(s.ns))
}

// PlugNetNS implements runtime.Network: a veth pair from the router to the
// namespace at path, whose end is guestnet.Iface with the sandbox's address
// and a default route through the router.
func (s *Sandbox) PlugNetNS(path string) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("sandbox network namespace: %w", err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(s.ns)
	if err != nil {
		return fmt.Errorf("router netlink: %w", err)
	}
	defer h.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: routerSandboxIface, HardwareAddr: guestnet.GatewayMAC},
		PeerName:  guestnet.Iface, PeerNamespace: netlink.NsFd(target),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("sandbox link: %w", err)
	}
	if err := s.routerSide(h); err != nil {
		return err
	}
	th, err := netlink.NewHandleAt(target)
	if err != nil {
		return fmt.Errorf("sandbox netlink: %w", err)
	}
	defer th.Close()
	if err := up(th, guestnet.Iface, netip.PrefixFrom(guestnet.Address, guestnet.PrefixLen)); err != nil {
		return err
	}
	if err := th.RouteAdd(&netlink.Route{Gw: guestnet.Gateway.AsSlice()}); err != nil {
		return fmt.Errorf("sandbox default route: %w", err)
	}
	return nil
}

// routerSide addresses and shapes the router's end of the sandbox link.
func (s *Sandbox) routerSide(h *netlink.Handle) error {
	if err := up(h, routerSandboxIface, netip.PrefixFrom(guestnet.Gateway, guestnet.PrefixLen)); err != nil {
		return err
	}
	return s.n.shape(h, routerSandboxIface)
}

// Tap implements runtime.Network: a new tap device as the router's end of
// the sandbox link (replacing an earlier one, whose VMM has gone), and its
// descriptor for the VMM. The device lives as long as a descriptor of it
// is open.
func (s *Sandbox) Tap() (*os.File, error) {
	h, err := netlink.NewHandleAt(s.ns)
	if err != nil {
		return nil, fmt.Errorf("router netlink: %w", err)
	}
	defer h.Close()
	if old, err := h.LinkByName(routerSandboxIface); err == nil {
		if err := h.LinkDel(old); err != nil {
			return nil, fmt.Errorf("remove old tap: %w", err)
		}
	}
	name := tapPrefix + strings.TrimPrefix(s.host, IfacePrefix)
	f, err := openTap(name)
	if err != nil {
		return nil, err
	}
	link, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.LinkSetNsFd(link, int(s.ns))
	}
	if err == nil {
		link, err = h.LinkByName(name)
	}
	if err == nil {
		err = h.LinkSetName(link, routerSandboxIface)
	}
	if err == nil {
		err = h.LinkSetHardwareAddr(link, guestnet.GatewayMAC)
	}
	if err == nil {
		err = s.routerSide(h)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tap: %w", err)
	}
	return f, nil
}

// openTap makes a tap device (no packet information header) and returns
// its descriptor.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}

// SetPolicy replaces the sandbox's egress policy, at once.
func (s *Sandbox) SetPolicy(pol policy.Policy) error {
	s.mu.Lock()
	old := s.pol
	s.pol = pol
	s.mu.Unlock()
	if err := s.apply(); err != nil {
		s.mu.Lock()
		s.pol = old
		s.mu.Unlock()
		return err
	}
	return nil
}

// Counters are a sandbox's refusals: connections and DNS queries its
// policy denied, and new connections over its rate.
type Counters struct {
	Denied, RateLimited uint64
}

// Counters reads the sandbox's counters.
func (s *Sandbox) Counters() (Counters, error) {
	var c firewall.Counters
	err := s.withNS(func(fd int) (err error) {
		c, err = firewall.ReadCounters(fd)
		return err
	})
	if err != nil {
		return Counters{}, err
	}
	return Counters{Denied: c.Denied + s.dnsDenied.Load(), RateLimited: c.RateLimited}, nil
}

// Dial connects to a TCP port of the sandbox, through its router.
func (s *Sandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, "tcp", netip.AddrPortFrom(s.nodeAddr, uint16(port)).String())
}

func (s *Sandbox) openNS() error {
	ns, err := netns.GetFromPath(s.nsPath)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ns = ns
	s.mu.Unlock()
	return nil
}

func (s *Sandbox) closeNS() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns.IsOpen() {
		s.ns.Close()
	}
	s.ns = netns.None()
}

// Detach removes the sandbox's network: the host link (which takes the
// router's uplink with it) and the router's namespace.
func (n *Node) Detach(s *Sandbox) error {
	err := s.destroy()
	n.log.Debug("sandbox network detached", "sandbox", s.id, "err", err)
	return err
}

func (s *Sandbox) destroy() error {
	c, _ := s.Counters() // a router half made counted nothing
	var errs []error
	if link, err := netlink.LinkByName(s.host); err == nil {
		errs = append(errs, delLink(link))
	}
	s.closeNS()
	errs = append(errs, netnsfile.Remove(s.nsPath))
	s.n.unregister(s, c)
	return errors.Join(errs...)
}

// Lookup returns the network of an attached or adopted sandbox.
func (n *Node) Lookup(id string) (*Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.byID[id]
	return s, ok
}

// Adopt takes back the router an earlier daemon made for a sandbox, at its
// recorded slot, and writes its rules again from pol.
func (n *Node) Adopt(id string, slot int, pol policy.Policy) (_ *Sandbox, err error) {
	s, err := n.register(id, slot, pol)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.unregister(s, Counters{})
			s.closeNS()
		}
	}()
	if err := s.openNS(); err != nil {
		return nil, fmt.Errorf("router of sandbox %s is gone: %w", id, err)
	}
	if _, err := netlink.LinkByName(s.host); err != nil {
		return nil, fmt.Errorf("link of sandbox %s is gone: %w", id, err)
	}
	if err := s.apply(); err != nil {
		return nil, err
	}
	return s, nil
}

// Sweep removes the routers and host links of this node's pool that no
// registered router (adopted, attached or warm) owns. Links of other pools
// (another warren server) are left alone.
func (n *Node) Sweep() error {
	owned, paths := map[string]bool{}, map[string]bool{}
	n.mu.Lock()
	for _, s := range n.bySlot {
		owned[s.host], paths[s.nsPath] = true, true
	}
	n.mu.Unlock()
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(n.dir, e.Name())
		if e.Name() == "lock" || paths[path] {
			continue
		}
		n.log.Info("removing leftover sandbox router", "router", e.Name())
		errs = append(errs, netnsfile.Remove(path))
	}
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, IfacePrefix) || owned[name] || !n.inPool(l) {
			continue
		}
		n.log.Info("removing leftover sandbox link", "link", name)
		errs = append(errs, delLink(l))
	}
	return errors.Join(errs...)
}

// consistent runs a netlink dump again while the kernel says it was
// interrupted (the table changed while it was read: say, a veth the kernel
// removes by itself once its namespace is gone), a few times at most.
func consistent[T any](dump func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 10 {
			return v, err
		}
	}
}

// delLink deletes a host link. One that is already gone is not an error:
// the kernel removes a veth pair on its own, asynchronously, once the
// namespace holding its other end is gone.
func delLink(l netlink.Link) error {
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("remove link %s: %w", l.Attrs().Name, err)
	}
	return nil
}

// inPool reports whether a host link has an address of the node's pool.
func (n *Node) inPool(l netlink.Link) bool {
	addrs, err := consistent(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && n.cfg.Pool.Contains(ip) {
			return true
		}
	}
	return false
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
		Denied: func() { s.dnsDenied.Add(1) },
	}, true
}
