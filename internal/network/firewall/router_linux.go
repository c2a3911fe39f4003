package firewall

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"warren/internal/network/policy"
)

// Router is what the firewall needs to know of one sandbox's router
// namespace R (docs/NETWORK.md).
//
// R should have net.ipv4.icmp_ratelimit set to 0. The kernel otherwise
// sends the ICMP errors of refusals to one destination at most once a
// second after a burst of six, and a refused connection then fails only
// when its SYN is sent again, a second later.
type Router struct {
	// NetNS is a descriptor of R's network namespace. It must be set: the
	// zero Router never programs the caller's own namespace.
	NetNS int
	// SandboxIface is R's interface toward the sandbox (a veth end or a
	// tap); UplinkIface its interface toward the host.
	SandboxIface, UplinkIface string
	// SandboxAddr is the only source address allowed from SandboxIface.
	SandboxAddr netip.Addr
	// GatewayAddr is R's address on SandboxIface, the sandbox's gateway
	// and DNS server.
	GatewayAddr netip.Addr
	// NodeAddr is R's address on UplinkIface: the sandbox's egress is
	// NATed to it, and the host reaches exposed ports through it.
	NodeAddr netip.Addr
	// HostAddr is the host's end of the uplink, the only source that may
	// reach the sandbox's ports.
	HostAddr netip.Addr
	// Resolver is the node's DNS resolver: the sandbox's DNS to
	// GatewayAddr:53 goes there.
	Resolver netip.AddrPort
	// AlwaysDeny are networks no policy opens: link-local, loopback,
	// multicast and reserved ranges, the node's pool.
	AlwaysDeny []netip.Prefix
	// PrivateDeny are networks denied unless an allow entry opens them;
	// usually DefaultPrivate.
	PrivateDeny []netip.Prefix
	// ConnRate is how many new connections per second the sandbox may open,
	// with a burst of twice as many; 0 is no limit.
	ConnRate uint32
	// Intercept is where the egress interceptor listens in R (an address of
	// GatewayAddr): when the policy has rules, the sandbox's new TCP
	// connections to ports 80 and 443 of the addresses pinned for the
	// rules' names (PinIntercept), which the policy allows, go there
	// instead. Unset: nothing is intercepted.
	Intercept netip.AddrPort
}

// InterceptPorts are the destination ports whose connections are
// intercepted: HTTP and HTTPS.
var InterceptPorts = []uint16{80, 443}

// interceptMark marks a packet, in R only, that the interceptor takes.
const interceptMark = 0x77617272

// DefaultPrivate are the private ranges of docs/NETWORK.md: RFC 1918,
// shared address space (RFC 6598) and benchmarking (RFC 2544).
var DefaultPrivate = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// Counters are a router's refusals, in packets.
type Counters struct {
	// Denied counts packets the policy refused, spoofed packets, DNS to
	// other servers and packets to the router itself.
	Denied uint64
	// RateLimited counts new connections refused over Router.ConnRate.
	RateLimited uint64
}

// Pin bounds. The kernel takes element timeouts in milliseconds; an answer
// with a TTL of 0 must still be usable for the connection that follows
// it, and a pin must not outlive the policy change that flushes it by
// much more than a day.
const (
	MinPinTTL = time.Second
	MaxPinTTL = 24 * time.Hour
	// maxPins bounds each pin set, so that a sandbox resolving names
	// without end cannot grow its router's memory without end: Pin fails
	// once a set is full, until elements expire.
	maxPins = 65536
)

// The router table and its objects. The table is inet, so that its
// forward chain also sees (and drops) IPv6.
var routerTable = &nftables.Table{Name: "warren", Family: nftables.TableFamilyINet}

const (
	counterDenied      = "denied"
	counterRateLimited = "ratelimited"
)

func ipv4Set(name string, interval bool) *nftables.Set {
	return &nftables.Set{Table: routerTable, Name: name, KeyType: nftables.TypeIPAddr, Interval: interval}
}

func pinSet(name string) *nftables.Set {
	return &nftables.Set{Table: routerTable, Name: name, KeyType: nftables.TypeIPAddr, HasTimeout: true, Size: maxPins}
}

// pinKeySize is the size of the fingerprint the pin_names set holds.
const pinKeySize = 16

// routerSets builds new descriptions of the router's sets at each call:
// replace numbers them.
func routerSets() (alwaysDeny, privateDeny, denyNets, allowNets, denyPins, allowPins, pinNames *nftables.Set) {
	key := nftables.TypeInteger
	key.Bytes = pinKeySize
	return ipv4Set("always_deny", true), ipv4Set("private_deny", true),
		ipv4Set("deny_nets", true), ipv4Set("allow_nets", true),
		pinSet("deny_pins"), pinSet("allow_pins"),
		&nftables.Set{Table: routerTable, Name: "pin_names", KeyType: key}
}

// interceptPins holds the addresses the resolver answered for the names
// of the policy's rules.
func interceptPins() *nftables.Set { return pinSet("intercept_pins") }

// Apply writes the router's table for policy p, creating it or replacing
// its content in one transaction: a packet meets the old rules or the
// new, never neither nor a mix.
//
// What survives a replacement:
//   - the counters keep counting from their values;
//   - connections already established continue: a stateful firewall judges
//     a connection when it starts (a pin that expires must not cut the
//     download it allowed either);
//   - pins survive while the policy's names (and None) stay the same, as
//     when only its networks change or a restarted daemon applies the same
//     policy again; when the names change, both pin sets are flushed,
//     since what an answer was pinned for may no longer hold. Later pins
//     then come from the resolver under the new policy.
//
// Apply and Pin on one router must not run concurrently.
func Apply(r Router, p policy.Policy) error {
	if err := r.check(); err != nil {
		return err
	}
	c, err := nftables.New(nftables.WithNetNSFd(r.NetNS), nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	have, err := readState(c, routerTable)
	if err != nil {
		return err
	}
	names := pinFingerprint(p)
	keepPins := false
	if s := have.sets["pin_names"]; s != nil {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("read pin_names: %w", err)
		}
		keepPins = len(elems) == 1 && slices.Equal(elems[0].Key, names)
	}
	spec, err := r.table(p, names, keepPins)
	if err != nil {
		return err
	}
	return replace(c, spec, have)
}

func (r *Router) check() error {
	if r.NetNS <= 0 {
		return errors.New("no router network namespace")
	}
	if err := checkIface("sandbox interface", r.SandboxIface); err != nil {
		return err
	}
	if err := checkIface("uplink interface", r.UplinkIface); err != nil {
		return err
	}
	if r.SandboxIface == r.UplinkIface {
		return fmt.Errorf("the sandbox and uplink interfaces are both %s", r.SandboxIface)
	}
	for _, a := range []struct {
		name string
		addr netip.Addr
	}{{"sandbox", r.SandboxAddr}, {"gateway", r.GatewayAddr}, {"node", r.NodeAddr}, {"host", r.HostAddr}, {"resolver", r.Resolver.Addr()}} {
		if !a.addr.Is4() {
			return fmt.Errorf("%s address %v is not IPv4", a.name, a.addr)
		}
	}
	if r.Resolver.Port() == 0 {
		return errors.New("the resolver has no port")
	}
	return nil
}

// pinFingerprint identifies what pins are answers to: the policy's names.
func pinFingerprint(p policy.Policy) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "none %t\n", p.None)
	for _, r := range p.Rules {
		fmt.Fprintf(h, "rule %s\n", r.Dest)
	}
	for _, l := range []struct {
		name  string
		names []policy.Name
	}{{"allow", p.AllowNames}, {"deny", p.DenyNames}} {
		s := make([]string, len(l.names))
		for i, n := range l.names {
			s[i] = n.String()
		}
		slices.Sort(s)
		for _, n := range s {
			fmt.Fprintf(h, "%s %s\n", l.name, n)
		}
	}
	return h.Sum(nil)[:pinKeySize]
}

// table is the router's table for policy p. Its rules, in nft's words
// (sb0 the sandbox interface, up0 the uplink):
//
//	prerouting (nat):  iif sb0 daddr gateway udp/tcp dport 53 → dnat resolver
//	                   iif up0 saddr host daddr node tcp → dnat sandbox (the same port)
//	postrouting (nat): oif up0 saddr sandbox → snat node
//	input (drop):      established, lo, ICMP echo to the gateway; the
//	                   sandbox's other unicast is rejected and counted
//	forward (drop):    see the comments of its rules below
func (r *Router) table(p policy.Policy, names []byte, keepPins bool) (tableSpec, error) {
	alwaysDeny, privateDeny, denyNets, allowNets, denyPins, allowPins, pinNames := routerSets()
	spec := tableSpec{table: routerTable, counters: []string{counterDenied, counterRateLimited}}
	for _, s := range []struct {
		set  *nftables.Set
		nets []netip.Prefix
	}{{alwaysDeny, r.AlwaysDeny}, {privateDeny, r.PrivateDeny}, {denyNets, p.DenyNets}, {allowNets, p.AllowNets}} {
		elems, err := intervals(s.nets)
		if err != nil {
			return tableSpec{}, fmt.Errorf("%s: %w", s.set.Name, err)
		}
		spec.sets = append(spec.sets, setSpec{set: s.set, elems: elems})
	}
	spec.sets = append(spec.sets,
		setSpec{set: denyPins, keep: keepPins},
		setSpec{set: allowPins, keep: keepPins},
		setSpec{set: pinNames, elems: []nftables.SetElement{{Key: names}}})

	sb, up := r.SandboxIface, r.UplinkIface
	fromSandbox := ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, sb)
	refuse := exprs(count(counterDenied), reject())

	pre := chainSpec{chain: &nftables.Chain{Name: "prerouting", Table: routerTable, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest}}
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		pre.add("the sandbox's DNS goes to the node's resolver",
			fromSandbox, ipv4(expr.CmpOpEq), addr(ipDaddr, expr.CmpOpEq, r.GatewayAddr), l4(proto), dport(53),
			nat(expr.NATTypeDestNAT, r.Resolver.Addr(), r.Resolver.Port()))
	}
	pre.add("exposed ports: the host's proxy reaches the sandbox's TCP ports through the node address",
		ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, up), ipv4(expr.CmpOpEq), addr(ipSaddr, expr.CmpOpEq, r.HostAddr),
		addr(ipDaddr, expr.CmpOpEq, r.NodeAddr), l4(unix.IPPROTO_TCP),
		nat(expr.NATTypeDestNAT, r.SandboxAddr, 0))

	post := chainSpec{chain: &nftables.Chain{Name: "postrouting", Table: routerTable, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}}
	post.add("the sandbox's egress leaves from the node address",
		ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, up), ipv4(expr.CmpOpEq), addr(ipSaddr, expr.CmpOpEq, r.SandboxAddr),
		nat(expr.NATTypeSourceNAT, r.NodeAddr, 0))

	in := chainSpec{chain: &nftables.Chain{Name: "input", Table: routerTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: ref(nftables.ChainPolicyDrop)}}
	in.add("replies to the router's own traffic", established(), accept())
	in.add("the router's loopback", ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, "lo"), accept())
	in.add("the sandbox may ping its gateway",
		fromSandbox, ipv4(expr.CmpOpEq), addr(ipDaddr, expr.CmpOpEq, r.GatewayAddr), l4(unix.IPPROTO_ICMP),
		icmpType(icmpEchoRequest), accept())
	in.add("nothing else of the sandbox's reaches its router: refused at once (broadcasts are dropped)",
		fromSandbox, ipv4(expr.CmpOpEq), pkttype(pktHost), refuse)

	fwd := chainSpec{chain: &nftables.Chain{Name: "forward", Table: routerTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: ref(nftables.ChainPolicyDrop)}}
	fwd.add("no IPv6: the sandbox network is IPv4, and IPv6 would bypass every rule", ipv4(expr.CmpOpNeq), drop())
	fwd.add("anti-spoofing: only the sandbox's address leaves the sandbox",
		fromSandbox, addr(ipSaddr, expr.CmpOpNeq, r.SandboxAddr), count(counterDenied), drop())
	fwd.add("connections admitted when they started", established(), accept())
	fwd.add("packets conntrack cannot place", invalid(), drop())
	fwd.add("exposed ports (DNATed in prerouting), from the host only",
		ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, up), ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, sb),
		addr(ipSaddr, expr.CmpOpEq, r.HostAddr), addr(ipDaddr, expr.CmpOpEq, r.SandboxAddr), l4(unix.IPPROTO_TCP),
		dnatted(), accept())
	fwd.add("nothing else starts a connection but the sandbox", ifname(expr.MetaKeyIIFNAME, expr.CmpOpNeq, sb), drop())
	fwd.add("the sandbox's traffic leaves by the uplink", ifname(expr.MetaKeyOIFNAME, expr.CmpOpNeq, up), refuse)
	if !p.None {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			fwd.add("DNS to the gateway, redirected to the resolver",
				addr(ipDaddr, expr.CmpOpEq, r.Resolver.Addr()), l4(proto), dport(r.Resolver.Port()), dnatted(), accept())
		}
	}
	fwd.add("DNS to any other server", l4(unix.IPPROTO_UDP), dport(53), refuse)
	fwd.add("DNS to any other server", l4(unix.IPPROTO_TCP), dport(53), refuse)
	fwd.add("DNS over TLS to any server", l4(unix.IPPROTO_TCP), dport(853), refuse)
	if r.ConnRate > 0 {
		// Every packet here starts a connection: the others were accepted
		// or dropped above.
		burst := uint64(r.ConnRate) * 2
		fwd.add("connection rate",
			[]expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.ConnRate), Unit: expr.LimitTimeSecond,
				Burst: uint32(min(burst, 1<<32-1)), Over: true}},
			count(counterRateLimited), reject())
	}
	// The policy, first match (docs/NETWORK.md).
	fwd.add("1. always denied", inSet(ipDaddr, alwaysDeny), refuse)
	if p.None {
		fwd.add("2. policy none", refuse)
	} else {
		fwd.add("3. deny networks", inSet(ipDaddr, denyNets), refuse)
		fwd.add("3. addresses of denied names", inSet(ipDaddr, denyPins), refuse)
		fwd.add("4. allow networks", inSet(ipDaddr, allowNets), accept())
		fwd.add("4. addresses of allowed names", inSet(ipDaddr, allowPins), accept())
		if p.AllowListed() {
			fwd.add("5. an allow-list denies the rest", refuse)
		} else {
			fwd.add("6. private ranges", inSet(ipDaddr, privateDeny), refuse)
			fwd.add("6. the internet", accept())
		}
	}
	spec.chains = []chainSpec{pre, post, in, fwd}
	if len(p.Rules) > 0 && !p.None && r.Intercept.IsValid() {
		ch := r.intercept(&spec, p, keepPins, &pre, &in, alwaysDeny, privateDeny, denyNets, allowNets, denyPins, allowPins)
		spec.chains = []chainSpec{pre, post, in, fwd, ch}
	}
	return spec, nil
}

// intercept adds the rules that send the sandbox's connections to its
// rules' destinations to the interceptor, and returns the chain that
// decides which: a filter chain before NAT, where the destination is still
// the one the sandbox asked for, marks a new connection's packet when it
// goes to port 80 or 443 of an address pinned for a rule's name and the
// policy allows it (the forward chain's policy, first match); the NAT
// chain sends marked packets to the interceptor, and the input chain
// admits them. What the policy denies is not marked and meets the forward
// chain's refusal as before.
//
//	intercept (filter, prerouting -150):
//	    iif sb0 saddr sandbox tcp dport 80|443 daddr @intercept_pins → mark
//	    marked, daddr gateway or always denied or denied → unmark
//	    marked, daddr allowed → accept
//	    marked, allow-list → unmark; else private → unmark
//	prerouting (nat): iif sb0 marked tcp → dnat Intercept
//	input:            iif sb0 marked dnatted tcp dport Intercept → [rate] accept
func (r *Router) intercept(spec *tableSpec, p policy.Policy, keepPins bool, pre, in *chainSpec,
	alwaysDeny, privateDeny, denyNets, allowNets, denyPins, allowPins *nftables.Set) chainSpec {
	pins := interceptPins()
	spec.sets = append(spec.sets, setSpec{set: pins, keep: keepPins})
	fromSandbox := exprs(ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, r.SandboxIface), ipv4(expr.CmpOpEq),
		addr(ipSaddr, expr.CmpOpEq, r.SandboxAddr))
	marked := markIs(interceptMark)
	unmark := setMark(0)

	ch := chainSpec{chain: &nftables.Chain{Name: "intercept", Table: routerTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle}}
	for _, port := range InterceptPorts {
		ch.add("a connection to a rule's destination", fromSandbox, l4(unix.IPPROTO_TCP), dport(port),
			inSet(ipDaddr, pins), setMark(interceptMark))
	}
	ch.add("never the router itself", marked, addr(ipDaddr, expr.CmpOpEq, r.GatewayAddr), unmark)
	ch.add("1. always denied", marked, inSet(ipDaddr, alwaysDeny), unmark)
	ch.add("3. deny networks", marked, inSet(ipDaddr, denyNets), unmark)
	ch.add("3. addresses of denied names", marked, inSet(ipDaddr, denyPins), unmark)
	ch.add("4. allow networks", marked, inSet(ipDaddr, allowNets), accept())
	ch.add("4. addresses of allowed names", marked, inSet(ipDaddr, allowPins), accept())
	if p.AllowListed() {
		ch.add("5. an allow-list denies the rest", marked, unmark)
	} else {
		ch.add("6. private ranges", marked, inSet(ipDaddr, privateDeny), unmark)
	}

	pre.add("intercepted connections go to the interceptor",
		ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, r.SandboxIface), marked, l4(unix.IPPROTO_TCP),
		nat(expr.NATTypeDestNAT, r.Intercept.Addr(), r.Intercept.Port()))
	admit := exprs(ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, r.SandboxIface), marked, dnatted(),
		l4(unix.IPPROTO_TCP), addr(ipDaddr, expr.CmpOpEq, r.Intercept.Addr()), dport(r.Intercept.Port()))
	if r.ConnRate > 0 {
		burst := uint64(r.ConnRate) * 2
		in.rules = slices.Insert(in.rules, len(in.rules)-1, ruleSpec{"intercepted connections: the connection rate", exprs(admit,
			[]expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.ConnRate), Unit: expr.LimitTimeSecond,
				Burst: uint32(min(burst, 1<<32-1)), Over: true}},
			count(counterRateLimited), reject())})
	}
	in.rules = slices.Insert(in.rules, len(in.rules)-1, ruleSpec{"intercepted connections reach the interceptor", exprs(admit, accept())})
	return ch
}

// PinIntercept adds addresses the resolver answered for a name of the
// policy's rules to the addresses whose HTTP and HTTPS connections are
// intercepted, for ttl (clamped as Pin's). The router's table must have
// been applied with rules and an Intercept address.
func PinIntercept(netns int, addrs []netip.Addr, ttl time.Duration) error {
	return pin(netns, "intercept_pins", addrs, ttl)
}

func ref[T any](v T) *T { return &v }

// Pin adds addresses the resolver answered for a name to the router's
// pins: Allowed to the allowed pins (rule 4 of the policy), Denied to the
// denied pins (rule 3), each for ttl, clamped to [MinPinTTL, MaxPinTTL].
// Pinning an address again sets its timeout anew. Neutral pins nothing.
// The router's table must have been applied.
func Pin(netns int, v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error {
	var name string
	switch v {
	case policy.Allowed:
		name = "allow_pins"
	case policy.Denied:
		name = "deny_pins"
	default:
		return nil
	}
	return pin(netns, name, addrs, ttl)
}

func pin(netns int, name string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	if netns <= 0 {
		return errors.New("pin: no network namespace")
	}
	ttl = min(max(ttl, MinPinTTL), MaxPinTTL)
	elems := make([]nftables.SetElement, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			return fmt.Errorf("pin %v: not an IPv4 address", a)
		}
		elems = append(elems, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
	}
	c := &nftables.Conn{NetNS: netns}
	if err := c.SetAddElements(pinSet(name), elems); err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("pin %d addresses in %s: %w", len(addrs), name, err)
	}
	return nil
}

// ReadCounters reads the router's counters. The router's table must have
// been applied.
func ReadCounters(netns int) (Counters, error) {
	if netns <= 0 {
		return Counters{}, errors.New("read counters: no network namespace")
	}
	c := &nftables.Conn{NetNS: netns}
	objs, err := c.GetNamedObjects(routerTable)
	if err != nil {
		return Counters{}, fmt.Errorf("read counters: %w", err)
	}
	var out Counters
	for _, o := range objs {
		n, ok := o.(*nftables.NamedObj)
		if !ok || n.Type != nftables.ObjTypeCounter {
			continue
		}
		ctr, ok := n.Obj.(*expr.Counter)
		if !ok {
			continue
		}
		switch n.Name {
		case counterDenied:
			out.Denied = ctr.Packets
		case counterRateLimited:
			out.RateLimited = ctr.Packets
		}
	}
	return out, nil
}
