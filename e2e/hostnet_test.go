//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What the suite may take of the host's network: nothing the host or a
// user's warren uses. The test internet's addresses come from candidate
// blocks chosen at run time, a block being free only when none of the
// host's addresses, routes (in any table), resolvers or apt mirrors' addresses
// falls in it. The host's own traffic never follows a route of the suite:
// the test internet is routed by source, only for packets from the pools of
// the suite's own daemons (a rule to a table of the suite's). The host's
// main table gains one /32, to the far end of the test internet's link,
// where its DNS server answers the daemons' resolvers.

// inetPublic are the candidate blocks of the test internet's public
// addresses, and inetPrivateBlocks of its private host (it must be private
// for policy: denied by default): documentation and test ranges.
var (
	inetPublic = []netip.Prefix{
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("192.0.2.0/24"),
	}
	inetPrivateBlocks = []netip.Prefix{
		netip.MustParsePrefix("172.31.254.0/24"),
		netip.MustParsePrefix("192.168.254.0/24"),
		netip.MustParsePrefix("10.254.254.0/24"),
	}
)

// routeProto marks the routes of the suite's table (a routing protocol
// number no routing daemon uses), so that a run killed before its cleanup
// is recognised by the next one.
const routeProto = 0xe7

// hostUse is what the host's network uses, read when the suite starts.
type hostUse struct {
	nets   []netip.Prefix // subnets of the host's addresses, and non-default routes
	addrs  []netip.Addr   // the host's addresses, resolvers and apt mirrors' addresses
	mirror []netip.Addr   // the apt mirrors' addresses
	// routeTo is `ip route get` of each mirror and resolver address.
	routeTo map[netip.Addr]string
}

// readHostUse reads the host's addresses and routes, its resolvers, and the
// addresses of the apt sources' mirrors.
func readHostUse() (*hostUse, error) {
	u := &hostUse{routeTo: map[netip.Addr]string{}}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		p := toPrefix(a.IPNet)
		u.addrs = append(u.addrs, p.Addr())
		u.nets = append(u.nets, p.Masked())
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list the host's routes: %w", err)
	}
	for _, r := range routes {
		if p := toPrefix(r.Dst); p.IsValid() { // not a default route
			u.nets = append(u.nets, p.Masked())
		}
	}
	resolvers, err := resolvConf("/etc/resolv.conf")
	if err != nil {
		return nil, err
	}
	if u.mirror, err = aptMirrorAddrs("/etc/apt"); err != nil {
		return nil, err
	}
	for _, a := range append(resolvers, u.mirror...) {
		u.addrs = append(u.addrs, a)
		if u.routeTo[a], err = routeGet(a); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// toPrefix is n as a prefix (not masked: an address keeps its host
// bits); invalid for nil and for a default route (0.0.0.0/0).
func toPrefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, _ := netip.AddrFromSlice(n.IP.To4())
	if bits, _ := n.Mask.Size(); bits > 0 {
		return netip.PrefixFrom(a, bits)
	}
	return netip.Prefix{}
}

// free reports whether nothing the host uses falls in block.
func (u *hostUse) free(block netip.Prefix) bool {
	for _, n := range u.nets {
		if n.Overlaps(block) {
			return false
		}
	}
	for _, a := range u.addrs {
		if block.Contains(a) {
			return false
		}
	}
	return true
}

// pick is the first free block of candidates.
func (u *hostUse) pick(what string, candidates []netip.Prefix) (netip.Prefix, error) {
	for _, b := range candidates {
		if u.free(b) {
			return b, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("test internet: no free block for its %s: the host uses %v", what, candidates)
}

// routeGet is what `ip route get` says of a, without its cache line.
func routeGet(a netip.Addr) (string, error) {
	out, err := exec.Command("ip", "route", "get", a.String()).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip route get %s: %v: %s", a, err, out)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// resolvConf is the IPv4 nameservers of a resolv.conf.
func resolvConf(path string) ([]netip.Addr, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, a)
			}
		}
	}
	return out, sc.Err()
}

// aptMirrorAddrs resolves the hosts of every URI in the apt sources under
// etcApt (one-line and deb822 files) to their IPv4 addresses.
func aptMirrorAddrs(etcApt string) ([]netip.Addr, error) {
	files := []string{filepath.Join(etcApt, "sources.list")}
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(etcApt, "sources.list.d", pat))
		files = append(files, m...)
	}
	var hosts []string
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, w := range strings.Fields(line) {
				if strings.HasPrefix(w, "#") {
					break
				}
				if i := strings.Index(w, "://"); i > 0 {
					host := strings.SplitN(w[i+3:], "/", 2)[0]
					if h, _, err := net.SplitHostPort(host); err == nil {
						host = h
					}
					if host != "" && !slices.Contains(hosts, host) {
						hosts = append(hosts, host)
					}
				}
			}
		}
	}
	var out []netip.Addr
	for _, h := range hosts {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", h)
		cancel()
		if err != nil {
			// An unresolvable mirror is one no packet goes to.
			continue
		}
		for _, ip := range ips {
			if !slices.Contains(out, ip.Unmap()) {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// freeTable finds a routing table and a rule priority that nothing uses.
func freeTable() (table, pref int, err error) {
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return 0, 0, fmt.Errorf("list rules: %w", err)
	}
	usedTable, usedPref := map[int]bool{}, map[int]bool{}
	for _, r := range rules {
		usedTable[r.Table], usedPref[r.Priority] = true, true
	}
	for table = 0x7e57; usedTable[table] || tableRoutes(table) > 0; table++ {
	}
	for pref = 100; usedPref[pref]; pref++ {
	}
	return table, pref, nil
}

// tableRoutes is how many IPv4 routes table holds.
func tableRoutes(table int) int {
	rs, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	return len(rs)
}

// removeStaleRoutes removes the rules and tables of a run killed before its
// cleanup: tables holding a route of routeProto, and the rules to them.
func removeStaleRoutes() {
	routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	stale := map[int]bool{}
	for _, r := range routes {
		if r.Protocol == routeProto && r.Table != unix.RT_TABLE_MAIN && r.Table != unix.RT_TABLE_LOCAL {
			stale[r.Table] = true
		}
	}
	rules, _ := netlink.RuleList(netlink.FAMILY_V4)
	for _, r := range rules {
		if stale[r.Table] {
			netlink.RuleDel(&r)
		}
	}
	for t := range stale {
		exec.Command("ip", "route", "flush", "table", fmt.Sprint(t)).Run()
	}
}

// checkRoutes is the guard on what the suite did to the host's routing:
// the host still reaches each apt mirror and resolver as it did when the
// suite started (`ip route get`), the suite's table routes only the
// addresses the test internet serves (besides its throw routes for the
// suite's pools and its unreachable default), the main table gained only
// the /32 to the link's far end, and the suite's rules select only its
// daemons' pools.
func (in *internet) checkRoutes() error {
	var errs []error
	for a, before := range in.host.routeTo {
		now, err := routeGet(a)
		if err != nil {
			errs = append(errs, err)
		} else if now != before {
			errs = append(errs, fmt.Errorf("the host's route to %s changed while the suite ran: %q, was %q", a, now, before))
		}
	}
	in.mu.Lock()
	pools := slices.Clone(in.pools)
	in.mu.Unlock()
	served := in.served()
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName(in.hostEnd)
	if err != nil {
		return fmt.Errorf("the test internet's link: %w", err)
	}
	for _, r := range routes {
		dst := toPrefix(r.Dst) // invalid for a default route
		switch {
		case r.Table == in.table && r.Type == unix.RTN_UNICAST:
			if dst.Bits() != 32 || !slices.Contains(served, dst.Addr()) {
				errs = append(errs, fmt.Errorf("the suite's table routes %s, which the test internet does not serve", r.Dst))
			}
		case r.Table == in.table && r.Type == unix.RTN_THROW:
			if !slices.Contains(pools, dst) {
				errs = append(errs, fmt.Errorf("the suite's table throws %s, not one of its daemons' pools %v", r.Dst, pools))
			}
		case r.Table == in.table && r.Type == unix.RTN_UNREACHABLE:
			if dst.IsValid() {
				errs = append(errs, fmt.Errorf("the suite's table has an unreachable route to %s", r.Dst))
			}
		case r.Table == in.table:
			errs = append(errs, fmt.Errorf("the suite's table has a route of type %d to %v", r.Type, r.Dst))
		case r.Protocol == routeProto:
			errs = append(errs, fmt.Errorf("a route of the suite's in table %d: %v", r.Table, r.Dst))
		case r.Table == unix.RT_TABLE_MAIN && r.LinkIndex == link.Attrs().Index:
			if dst != netip.PrefixFrom(inetDNS.Addr(), 32) {
				errs = append(errs, fmt.Errorf("the main table routes %v to the test internet, which serves only %v there", r.Dst, inetDNS.Addr()))
			}
		}
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if r.Table != in.table {
			continue
		}
		if src := toPrefix(r.Src); !src.IsValid() || r.Dst != nil || !slices.Contains(pools, src) {
			errs = append(errs, fmt.Errorf("a rule to the suite's table selects from %v to %v, not only a pool of its daemons %v", r.Src, r.Dst, pools))
		}
	}
	return errors.Join(errs...)
}

// TestHostRoutes is the guard (checkRoutes) while the suite runs; runMain
// checks it again at the end, when every daemon's pool was routed.
func TestHostRoutes(t *testing.T) {
	need(t)
	if len(inet.host.mirror) == 0 {
		t.Log("no apt source resolves to an address here: only the resolvers' routes are compared")
	}
	if err := inet.checkRoutes(); err != nil {
		t.Fatal(err)
	}
	t.Logf("host routes unchanged to %d mirror and resolver addresses; the test internet serves %v from %v, routed for pools %v",
		len(inet.host.routeTo), inet.served(), inet.hostAddr, inet.pools)
}

// TestPickAvoidsHostRanges: a block is free only when no host address,
// route, resolver or mirror falls in it (issue 12: the mirror sat in
// 203.0.113.0/24, which the suite had taken over), and with none free the
// suite fails at once, saying so. It needs no root: it checks the choice,
// not the host.
func TestPickAvoidsHostRanges(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	u := &hostUse{
		nets:  []netip.Prefix{pfx("192.0.2.0/24"), pfx("10.201.0.4/30")},
		addrs: []netip.Addr{addr("192.0.2.2"), addr("203.0.113.80"), addr("10.255.255.53")},
	}
	if got, err := u.pick("public addresses", inetPublic); err != nil || got != pfx("198.51.100.0/24") {
		t.Errorf("pick = %v, %v; want 198.51.100.0/24 (192.0.2.0/24 is the host's link, 203.0.113.0/24 holds the mirror)", got, err)
	}
	u.nets = append(u.nets, pfx("198.51.0.0/16"))
	if _, err := u.pick("public addresses", inetPublic); err == nil || !strings.Contains(err.Error(), "no free block") {
		t.Errorf("with every block in use: %v, want an error saying so", err)
	}
	if got, err := u.pick("private address", inetPrivateBlocks); err != nil || got != pfx("172.31.254.0/24") {
		t.Errorf("private pick = %v, %v", got, err)
	}
}
