//go:build linux

package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"warren/internal/guest"
	"warren/internal/netnsfile"
	"warren/internal/network/egress"
	"warren/internal/network/firewall"
	"warren/internal/network/policy"
)

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

	// mu guards pol, eg, proxy and ns: ns is closed only under it, so that
	// no one uses its number after (the resolver pins from its own
	// goroutines).
	mu        sync.Mutex
	pol       policy.Policy
	eg        Egress
	proxy     *egress.Proxy  // while the policy has rules
	ns        netns.NsHandle // the router namespace, open while attached
	dnsDenied atomic.Uint64
}

// Egress is what a sandbox's egress rules need besides its policy
// (docs/NETWORK.md, "Secrets at egress").
type Egress struct {
	// CA is the sandbox's CA, which the sandbox trusts (Sandbox.EgressCA).
	CA *egress.CA
	// Secrets are the values of the secrets the rules name.
	Secrets map[string]string
}

// InterceptPort is where a router's interceptor listens, in R only.
const InterceptPort = 15080

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

// Attach gives sandbox id its router: a warm one when the pool has one, else
// a new one (its namespace, the link to the host with the slot's
// addresses, the rate limits), with the rules of pol. The runtime then
// links the sandbox to it (runtime.Network). On error nothing is left.
func (n *Node) Attach(ctx context.Context, id string, pol policy.Policy, eg Egress) (*Sandbox, error) {
	t0 := time.Now()
	if s := n.takeWarm(id); s != nil {
		if !pol.IsDefault() {
			if err := s.SetPolicy(pol, eg); err != nil {
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
	s.eg = eg
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
		SandboxAddr:  guest.Address,
		GatewayAddr:  guest.Gateway,
		NodeAddr:     s.nodeAddr,
		HostAddr:     s.hostAddr,
		Resolver:     s.n.resolver,
		AlwaysDeny:   append([]netip.Prefix{s.n.cfg.Pool}, alwaysDeny...),
		PrivateDeny:  firewall.DefaultPrivate,
		ConnRate:     s.n.cfg.ConnRate,
		Intercept:    netip.AddrPortFrom(guest.Gateway, InterceptPort),
	}
}

// apply (re)writes the router's rules from the sandbox's policy, and
// starts, updates or stops its interceptor.
func (s *Sandbox) apply() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ns.IsOpen() {
		return errDetached
	}
	intercepts := len(s.pol.Rules) > 0 && !s.pol.None
	if intercepts && s.proxy == nil {
		if err := s.startProxy(); err != nil {
			return fmt.Errorf("egress interceptor: %w", err)
		}
	}
	if s.proxy != nil {
		s.proxy.Set(s.pol, s.eg.Secrets)
	}
	if err := firewall.Apply(s.router(), s.pol); err != nil {
		return fmt.Errorf("router rules: %w", err)
	}
	if !intercepts && s.proxy != nil {
		s.proxy.Close()
		s.proxy = nil
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

// SetPolicy replaces the sandbox's egress policy, and what its rules
// need, at once.
func (s *Sandbox) SetPolicy(pol policy.Policy, eg Egress) error {
	s.mu.Lock()
	oldPol, oldEg := s.pol, s.eg
	s.pol, s.eg = pol, eg
	s.mu.Unlock()
	if err := s.apply(); err != nil {
		s.mu.Lock()
		s.pol, s.eg = oldPol, oldEg
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
	if s.proxy != nil {
		s.proxy.Close()
		s.proxy = nil
	}
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
