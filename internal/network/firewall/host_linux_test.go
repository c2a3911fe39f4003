package firewall

import (
	"net/netip"
	"testing"
)

// TestHost runs two daemons' host tables in a namespace H playing the host:
//
//	A up0 10.201.0.6/30  ─── wrA 10.201.0.5/30 ┐
//	B up0 10.201.0.10/30 ─── wrB 10.201.0.9/30 ├ H (lo: resolvers 10.201.0.1 and 10.202.0.1)
//	C up0 10.202.0.6/30  ─── wrC 10.202.0.5/30 ┘   ext0 192.0.2.1/24 ─── I ext0 192.0.2.2/24, 203.0.113.10
//
// A and B are routers of daemon "a" (pool 10.201.0.0/16), C a router of
// daemon "c" (pool 10.202.0.0/16); they have no rules of their own here,
// so what is refused is refused by the host's tables.
func TestHost(t *testing.T) {
	requireRoot(t)
	h, i := newNS(t, "H"), newNS(t, "I")
	a, b, c := newNS(t, "A"), newNS(t, "B"), newNS(t, "C")
	h.router(t)
	veth(t, h, "wrA", "10.201.0.5/30", a, "up0", "10.201.0.6/30")
	veth(t, h, "wrB", "10.201.0.9/30", b, "up0", "10.201.0.10/30")
	veth(t, h, "wrC", "10.202.0.5/30", c, "up0", "10.202.0.6/30")
	veth(t, h, "ext0", "192.0.2.1/24", i, "ext0", "192.0.2.2/24")
	i.addr(t, "ext0", internet+"/32")
	h.addr(t, "lo", "10.201.0.1/32")
	h.addr(t, "lo", "10.202.0.1/32")
	a.defaultRoute(t, "10.201.0.5")
	b.defaultRoute(t, "10.201.0.9")
	c.defaultRoute(t, "10.202.0.5")
	h.defaultRoute(t, "192.0.2.2")
	i.defaultRoute(t, "192.0.2.1")
	for _, n := range []*testNS{a, b, i} {
		n.serveTCP(t, ":80")
	}
	for _, r := range []string{"10.201.0.1:53", "10.202.0.1:53"} {
		h.serveTCP(t, r)
		h.serveUDP(t, r)
	}
	h.serveTCP(t, ":8080") // the daemon's API, or any service of the host

	hostA := Host{Table: "warren-a", Pool: netip.MustParsePrefix("10.201.0.0/16"), IfacePrefix: "wr",
		Resolver: netip.MustParseAddrPort("10.201.0.1:53")}
	hostC := Host{Table: "warren-c", Pool: netip.MustParsePrefix("10.202.0.0/16"), IfacePrefix: "wr",
		Resolver: netip.MustParseAddrPort("10.202.0.1:53")}
	applyHost := func(t *testing.T, hs ...Host) {
		t.Helper()
		for _, x := range hs {
			if err := h.run(func() error { return ApplyHost(x) }); err != nil {
				t.Fatalf("ApplyHost(%+v): %v", x, err)
			}
		}
	}
	deleteHost := func(t *testing.T, table string) {
		t.Helper()
		if err := h.run(func() error { return DeleteHost(table) }); err != nil {
			t.Fatalf("DeleteHost(%s): %v", table, err)
		}
	}

	// Without rules, everything goes (the topology works).
	answerFrom(t, a.reach(t, tcp(internet+":80")), "10.201.0.6")
	a.reach(t, tcp("10.201.0.10:80"))
	a.reach(t, tcp("10.201.0.5:8080"))
	i.reach(t, tcp("10.201.0.6:80"))

	applyHost(t, hostA, hostC)
	check := func(t *testing.T) {
		t.Helper()
		// Masquerade of each pool, out of the host's other interfaces.
		answerFrom(t, a.reach(t, tcp(internet+":80")), "192.0.2.1")
		answerFrom(t, c.reach(t, tcp(internet+":80")), "192.0.2.1")
		// Sandboxes never reach each other, within a pool or across.
		a.blocked(t, tcp("10.201.0.10:80"))
		b.blocked(t, tcp("10.201.0.6:80"))
		c.blocked(t, tcp("10.201.0.6:80"))
		// Nothing outside starts a connection to a router.
		i.blocked(t, tcp("10.201.0.6:80"))
		// The resolver of its own daemon, and no other service of the host.
		a.reach(t, udp("10.201.0.1:53"))
		a.reach(t, tcp("10.201.0.1:53"))
		a.refused(t, tcp("10.201.0.5:8080"))
		a.refused(t, tcp("192.0.2.1:8080"))
		a.refused(t, tcp("10.201.0.1:8080"))
		a.refused(t, tcp("10.202.0.1:53"))
		c.reach(t, udp("10.202.0.1:53"))
		c.reach(t, tcp("10.202.0.1:53"))
		c.refused(t, udp("10.201.0.1:53"))
		c.refused(t, tcp("10.202.0.5:8080"))
		// The host's own traffic is untouched: its proxy to exposed ports,
		// its egress.
		answerFrom(t, h.reach(t, tcp("10.201.0.6:80")), "10.201.0.5")
		h.reach(t, tcp(internet+":80"))
	}
	check(t)
	applyHost(t, hostA, hostC) // replacing the tables changes nothing
	check(t)

	// Daemon a's table gone, c's still drops forwarding between any
	// sandboxes, and leaves a's pool alone.
	deleteHost(t, hostA.Table)
	a.blocked(t, tcp("10.201.0.10:80"))
	a.reach(t, tcp("10.201.0.5:8080"))
	c.refused(t, tcp("10.202.0.5:8080"))
	deleteHost(t, hostC.Table)
	a.reach(t, tcp("10.201.0.10:80"))
	c.reach(t, tcp("10.202.0.5:8080"))
	deleteHost(t, hostC.Table) // gone already: not an error

	for _, bad := range []Host{
		{},
		{Table: "x", Pool: netip.MustParsePrefix("fd00::/8"), IfacePrefix: "wr", Resolver: hostA.Resolver},
		{Table: "x", Pool: hostA.Pool, IfacePrefix: "", Resolver: hostA.Resolver},
		{Table: "x", Pool: hostA.Pool, IfacePrefix: "wr"},
	} {
		if err := h.run(func() error { return ApplyHost(bad) }); err == nil {
			t.Errorf("ApplyHost(%+v) succeeded", bad)
		}
	}
}
