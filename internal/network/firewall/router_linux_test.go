package firewall

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/net/icmp"
	icmpv4 "golang.org/x/net/ipv4"

	"warren/api"
	"warren/internal/network/policy"
	"warren/internal/wait"
)

// routerTopology is docs/NETWORK.md's path with a namespace per hop:
//
//	S (sandbox)              R (router)                  H (host)                        I (the internet)
//	eth0 10.0.2.15/24 ─── sb0 10.0.2.2/24
//	                         up0 10.201.0.6/30 ─── wr0 10.201.0.5/30
//	                                                     lo 10.201.0.1 (resolver)
//	                                                     ext0 192.0.2.1/24 ─── ext0 192.0.2.2/24 and
//	                                                                           203.0.113.9, 203.0.113.10,
//	                                                                           198.51.100.10, 10.9.0.10,
//	                                                                           169.254.169.254, 250.0.0.10
//
// H has no rules of its own here (TestHost tests them): I routes the pool
// back to H, so I sees the node address as the source of the sandbox's
// egress.
type routerTopology struct {
	s, r, h, i *testNS
	router     Router
	echo       *udpServer // on 203.0.113.10:7
}

const (
	internet   = "203.0.113.10" // allowed by default
	internet2  = "198.51.100.10"
	denied     = "203.0.113.9"
	private    = "10.9.0.10"
	metadata   = "169.254.169.254"
	reserved   = "250.0.0.10" // in 240.0.0.0/4, whose interval ends at 255.255.255.255
	gateway    = "10.0.2.2"
	sandbox    = "10.0.2.15"
	nodeAddr   = "10.201.0.6"
	hostAddr   = "10.201.0.5"
	resolverIP = "10.201.0.1"
)

func newRouterTopology(t *testing.T) *routerTopology {
	requireRoot(t)
	tp := &routerTopology{s: newNS(t, "S"), r: newNS(t, "R"), h: newNS(t, "H"), i: newNS(t, "I")}
	tp.r.router(t)
	tp.h.router(t)
	veth(t, tp.r, "sb0", gateway+"/24", tp.s, "eth0", sandbox+"/24")
	veth(t, tp.h, "wr0", hostAddr+"/30", tp.r, "up0", nodeAddr+"/30")
	veth(t, tp.h, "ext0", "192.0.2.1/24", tp.i, "ext0", "192.0.2.2/24")
	for _, a := range []string{internet, internet2, denied, private, metadata, reserved} {
		tp.i.addr(t, "ext0", a+"/32")
	}
	tp.h.addr(t, "lo", resolverIP+"/32")
	tp.s.defaultRoute(t, gateway)
	tp.r.defaultRoute(t, hostAddr)
	tp.h.defaultRoute(t, "192.0.2.2")
	tp.i.defaultRoute(t, "192.0.2.1")

	for _, a := range []string{":80", ":53", ":853"} {
		tp.i.serveTCP(t, a)
	}
	tp.echo = tp.i.serveUDP(t, internet+":7")
	tp.i.serveUDP(t, internet+":53")
	tp.h.serveTCP(t, resolverIP+":53")
	tp.h.serveUDP(t, resolverIP+":53")
	tp.s.serveTCP(t, ":8080")
	tp.r.serveTCP(t, ":22")

	pool := netip.MustParsePrefix("10.201.0.0/16")
	tp.router = Router{
		NetNS:        tp.r.fd,
		SandboxIface: "sb0",
		UplinkIface:  "up0",
		SandboxAddr:  netip.MustParseAddr(sandbox),
		GatewayAddr:  netip.MustParseAddr(gateway),
		NodeAddr:     netip.MustParseAddr(nodeAddr),
		HostAddr:     netip.MustParseAddr(hostAddr),
		Resolver:     netip.AddrPortFrom(netip.MustParseAddr(resolverIP), 53),
		AlwaysDeny: []netip.Prefix{
			pool,
			netip.MustParsePrefix("0.0.0.0/8"),
			netip.MustParsePrefix("127.0.0.0/8"),
			netip.MustParsePrefix("169.254.0.0/16"),
			netip.MustParsePrefix("224.0.0.0/4"),
			netip.MustParsePrefix("240.0.0.0/4"),
		},
		PrivateDeny: DefaultPrivate,
	}
	return tp
}

// reset flushes the pins an earlier test left (by an Apply with other
// names) and applies p.
func (tp *routerTopology) reset(t *testing.T, p api.NetworkPolicy) {
	t.Helper()
	tp.apply(t, api.NetworkPolicy{Deny: []string{"flush-pins.invalid"}})
	tp.apply(t, p)
}

func (tp *routerTopology) apply(t *testing.T, p api.NetworkPolicy) {
	t.Helper()
	tp.applyRouter(t, tp.router, p)
}

func (tp *routerTopology) applyRouter(t *testing.T, r Router, p api.NetworkPolicy) {
	t.Helper()
	pol, err := policy.Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(r, pol); err != nil {
		t.Fatalf("Apply(%+v): %v", p, err)
	}
}

func (tp *routerTopology) counters(t *testing.T) Counters {
	t.Helper()
	c, err := ReadCounters(tp.r.fd)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (tp *routerTopology) pin(t *testing.T, v policy.Verdict, a string, ttl time.Duration) {
	t.Helper()
	if err := Pin(tp.r.fd, v, []netip.Addr{netip.MustParseAddr(a)}, ttl); err != nil {
		t.Fatalf("Pin(%v, %s): %v", v, a, err)
	}
}

func TestRouter(t *testing.T) {
	tp := newRouterTopology(t)
	s := tp.s

	t.Run("default policy", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		before := tp.counters(t)
		answerFrom(t, s.reach(t, tcp(internet+":80")), nodeAddr)
		answerFrom(t, s.reach(t, udp(internet+":7")), nodeAddr)
		answerFrom(t, s.reach(t, tcp(internet2+":80")), nodeAddr)
		s.refused(t, tcp(private+":80"))
		s.refused(t, tcp(metadata+":80"))
		s.refused(t, tcp(reserved+":80"))
		s.refused(t, tcp(hostAddr+":80")) // the node's pool
		s.refused(t, udp(private+":7"))
		if got, want := tp.counters(t).Denied-before.Denied, uint64(5); got != want {
			t.Errorf("denied counter grew by %d, want %d", got, want)
		}
	})

	t.Run("deny overrides allow; an allow-list refuses the rest", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{Allow: []string{"203.0.113.0/24"}, Deny: []string{denied}})
		s.reach(t, tcp(internet+":80"))
		s.refused(t, tcp(denied+":80"))
		s.refused(t, tcp(internet2+":80"))
		s.refused(t, tcp(private+":80"))
	})

	t.Run("allow opens a private range but never the always denied", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{Allow: []string{"10.9.0.0/16", "169.254.0.0/16", "10.201.0.0/16"}})
		s.reach(t, tcp(private+":80"))
		s.refused(t, tcp(metadata+":80"))
		s.refused(t, tcp(hostAddr+":80"))
		s.refused(t, tcp(internet+":80"))
	})

	t.Run("none", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{None: true, Allow: []string{internet}})
		s.refused(t, tcp(internet+":80"))
		s.refused(t, udp(gateway+":53"))
		s.refused(t, tcp(gateway+":53"))
		// Exposed ports are ingress, through warren's proxy: still open.
		answerFrom(t, tp.h.reach(t, tcp(nodeAddr+":8080")), hostAddr)
	})

	t.Run("rules intercept what the policy allows of their answers", func(t *testing.T) {
		r := tp.router
		r.Intercept = netip.AddrPortFrom(netip.MustParseAddr(gateway), 15080)
		tp.r.serveTCP(t, ":15080") // the interceptor sees the sandbox itself
		rules := map[string][]api.NetworkRule{"api.example": {{Transform: &api.Transform{Headers: map[string]string{"A": "b"}}}}}
		tp.applyRouter(t, r, api.NetworkPolicy{Deny: []string{"flush-pins.invalid"}})
		tp.applyRouter(t, r, api.NetworkPolicy{Rules: rules})
		answerFrom(t, s.reach(t, tcp(internet+":80")), nodeAddr) // not answered for a rule: passes
		if err := PinIntercept(tp.r.fd, []netip.Addr{netip.MustParseAddr(internet)}, time.Minute); err != nil {
			t.Fatal(err)
		}
		answerFrom(t, s.reach(t, tcp(internet+":80")), sandbox)
		answerFrom(t, s.reach(t, tcp(internet2+":80")), nodeAddr)
		s.refused(t, tcp(gateway+":15080")) // only redirected connections reach it
		// The policy still decides: pins survive these changes of networks.
		tp.applyRouter(t, r, api.NetworkPolicy{Rules: rules, Deny: []string{internet}})
		s.refused(t, tcp(internet+":80"))
		tp.applyRouter(t, r, api.NetworkPolicy{Rules: rules, Allow: []string{"10.9.0.0/16"}})
		s.refused(t, tcp(internet+":80"))
		tp.applyRouter(t, r, api.NetworkPolicy{Rules: rules, None: true})
		s.refused(t, tcp(internet+":80"))
		// None flushed the pins (what they answered may no longer hold).
		tp.applyRouter(t, r, api.NetworkPolicy{Rules: rules, Allow: []string{internet}})
		answerFrom(t, s.reach(t, tcp(internet+":80")), nodeAddr)
		if err := PinIntercept(tp.r.fd, []netip.Addr{netip.MustParseAddr(internet)}, time.Minute); err != nil {
			t.Fatal(err)
		}
		answerFrom(t, s.reach(t, tcp(internet+":80")), sandbox)
	})

	t.Run("allowed pins open an allow-list until they expire", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{Allow: []string{"pinned.example"}})
		s.refused(t, tcp(internet+":80"))
		tp.pin(t, policy.Allowed, internet, time.Second)
		s.reach(t, tcp(internet+":80"))
		s.refused(t, tcp(internet2+":80"))
		wait.For(t, 3*time.Second, "a pin with a TTL of 1s to stop opening its address", func() bool {
			return s.dial(tcp(internet+":80")).err != nil
		})
		s.refused(t, tcp(internet+":80"))
	})

	t.Run("pinning again renews the timeout", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{Allow: []string{"pinned.example"}})
		tp.pin(t, policy.Allowed, internet2, time.Second)
		tp.pin(t, policy.Allowed, internet2, time.Minute)
		time.Sleep(1500 * time.Millisecond) // past the first pin's TTL: the time under test
		s.reach(t, tcp(internet2+":80"))
	})

	t.Run("pins survive an Apply with the same names, not a change of names", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{Allow: []string{"pinned.example"}})
		tp.pin(t, policy.Allowed, internet, time.Minute)
		s.reach(t, tcp(internet+":80"))
		tp.apply(t, api.NetworkPolicy{Allow: []string{"pinned.example", "192.0.2.0/24"}})
		s.reach(t, tcp(internet+":80"))
		tp.apply(t, api.NetworkPolicy{Allow: []string{"other.example"}})
		s.refused(t, tcp(internet+":80"))
	})

	t.Run("denied pins override allow networks", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		tp.pin(t, policy.Denied, internet, time.Minute)
		s.refused(t, tcp(internet+":80"))
		s.reach(t, tcp(internet2+":80"))
		tp.apply(t, api.NetworkPolicy{Allow: []string{"203.0.113.0/24"}}) // the same (no) names: the pin stays
		s.refused(t, tcp(internet+":80"))
		if err := Pin(tp.r.fd, policy.Neutral, []netip.Addr{netip.MustParseAddr(internet)}, time.Minute); err != nil {
			t.Errorf("Pin(Neutral): %v, want nothing done", err)
		}
	})

	t.Run("spoofed source dropped and counted", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		s.addr(t, "eth0", "10.0.2.99/24")
		defer s.delAddr(t, "eth0", "10.0.2.99/24")
		before := tp.counters(t)
		s.blocked(t, udp(internet+":7").fromAddr("10.0.2.99"))
		if tp.counters(t).Denied == before.Denied {
			t.Error("the spoofed packet is not counted")
		}
		if tp.echo.saw(netip.MustParseAddr("10.0.2.99")) {
			t.Error("the spoofed packet reached the internet")
		}
		answerFrom(t, s.reach(t, udp(internet+":7").fromAddr(sandbox)), nodeAddr)
	})

	t.Run("DNS goes to the resolver only", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		answerFrom(t, s.reach(t, udp(gateway+":53")), nodeAddr)
		answerFrom(t, s.reach(t, tcp(gateway+":53")), nodeAddr)
		s.refused(t, udp(internet+":53"))
		s.refused(t, tcp(internet+":53"))
		s.refused(t, tcp(internet+":853"))
		s.refused(t, udp(resolverIP+":53")) // only as the gateway
		// An allow-list governs connections, not the DNS it needs.
		tp.apply(t, api.NetworkPolicy{Allow: []string{"pinned.example"}})
		s.reach(t, udp(gateway+":53"))
	})

	t.Run("exposed ports: from the host only", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		answerFrom(t, tp.h.reach(t, tcp(nodeAddr+":8080")), hostAddr)
		tp.h.blocked(t, tcp(nodeAddr+":8080").fromAddr(resolverIP))
		tp.i.blocked(t, tcp(nodeAddr+":8080"))
		tp.i.blocked(t, tcp(sandbox+":8080"))
	})

	t.Run("the sandbox cannot reach its router", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		s.refused(t, tcp(gateway+":22"))
		s.refused(t, tcp(nodeAddr+":22"))
		s.refused(t, udp(gateway+":22"))
		if err := s.run(func() error { return ping(gateway) }); err != nil {
			t.Errorf("ping the gateway: %v", err)
		}
	})

	t.Run("connection rate", func(t *testing.T) {
		r := tp.router
		r.ConnRate = 5
		tp.reset(t, api.NetworkPolicy{})
		tp.applyRouter(t, r, api.NetworkPolicy{})
		before := tp.counters(t)
		var ok, refused uint64
		start := time.Now()
		for range 40 {
			switch res := s.dial(tcp(internet + ":80")); {
			case res.err == nil:
				ok++
			default:
				refused++
			}
		}
		refill := uint64(time.Since(start).Seconds()*5) + 1
		after := tp.counters(t)
		// A bucket of 10 (the burst), refilled at 5 a second.
		if ok < 10 || ok > 10+refill {
			t.Errorf("%d of 40 connections at once went through, want the burst of 10 (and %d refilled)", ok, refill)
		}
		if got := after.RateLimited - before.RateLimited; got != refused {
			t.Errorf("rate-limited counter grew by %d, want %d", got, refused)
		}
		if after.Denied != before.Denied {
			t.Errorf("denied counter grew by %d, want 0", after.Denied-before.Denied)
		}
		tp.apply(t, api.NetworkPolicy{})
		for range 20 {
			s.reach(t, tcp(internet+":80"))
		}
	})

	t.Run("counters survive Apply", func(t *testing.T) {
		tp.reset(t, api.NetworkPolicy{})
		s.refused(t, tcp(private+":80"))
		before := tp.counters(t)
		if before.Denied == 0 || before.RateLimited == 0 {
			t.Fatalf("counters %+v, want both counted by now", before)
		}
		tp.apply(t, api.NetworkPolicy{Allow: []string{internet}, Deny: []string{"bad.example"}})
		if after := tp.counters(t); after != before {
			t.Errorf("counters %+v after Apply, want %+v", after, before)
		}
	})

	t.Run("Apply clears what it did not write", func(t *testing.T) {
		// As if an older warren had left a chain and a set of its own.
		c := &nftables.Conn{NetNS: tp.r.fd}
		old := &nftables.Set{Table: routerTable, Name: "old", KeyType: nftables.TypeIPAddr}
		if err := c.AddSet(old, nil); err != nil {
			t.Fatal(err)
		}
		ch := c.AddChain(&nftables.Chain{Name: "old", Table: routerTable, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(-10)})
		c.AddRule(&nftables.Rule{Table: routerTable, Chain: ch, Exprs: exprs(inSet(ipDaddr, old), drop())})
		c.AddRule(&nftables.Rule{Table: routerTable, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		s.blocked(t, tcp(internet+":80"))
		tp.apply(t, api.NetworkPolicy{})
		s.reach(t, tcp(internet+":80"))
		if _, err := c.ListChain(routerTable, "old"); err == nil {
			t.Error("the old chain is still there")
		}
	})

	t.Run("a bad router is refused", func(t *testing.T) {
		for _, r := range []Router{{}, {NetNS: tp.r.fd}} {
			if err := Apply(r, policy.Policy{}); err == nil {
				t.Errorf("Apply(%+v) succeeded", r)
			}
		}
		r := tp.router
		r.PrivateDeny = []netip.Prefix{netip.MustParsePrefix("fc00::/7")}
		if err := Apply(r, policy.Policy{}); err == nil {
			t.Error("Apply with an IPv6 network succeeded")
		}
		s.reach(t, tcp(internet+":80")) // the rules in place stay
	})
}

// ping sends an ICMP echo request to a and waits for the reply.
func ping(a string) error {
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return err
	}
	defer c.Close()
	msg := icmp.Message{Type: icmpv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("warren")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(a)}); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		if m, err := icmp.ParseMessage(1, buf[:n]); err == nil && m.Type == icmpv4.ICMPTypeEchoReply {
			return nil
		}
	}
}
