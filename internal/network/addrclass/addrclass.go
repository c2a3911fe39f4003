// Package addrclass says which addresses are internal: those no public
// name should resolve to and no tenant may make the node reach (loopback,
// private, shared, link-local with the cloud's metadata service, and the
// rest below), whatever form an address comes in. The resolver strips
// them from sandboxes' answers; the template builder refuses registries
// at them. It does no I/O.
package addrclass

import "net/netip"

// internal4 are the IPv4 ranges no public name should resolve to: this
// network, private, shared (CGN), loopback, link-local (the cloud
// metadata service), IETF protocol assignments, benchmarking, multicast
// and reserved.
var internal4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/3"),
}

// IPv6 ranges that carry an IPv4 address, which is what they reach.
var (
	// nat64 is RFC 6052's well-known NAT64 prefix: the IPv4 address is
	// the last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// sixToFour is RFC 3056's 6to4: the IPv4 address is bits 16-47.
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// internal6 are IPv6 ranges that are internal whole, beyond what is not
// global unicast or is unique-local: RFC 8215's local-use NAT64 prefix
// (translated by the site's own gateway, with the IPv4 address where the
// site put it), IPv4-compatible addresses (deprecated, ::a.b.c.d),
// discard-only, Teredo (an obfuscated IPv4 inside) and ORCHIDv2. The
// documentation ranges are not internal: some sites' mirrors answer there.
var internal6 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2001:20::/28"),
}

// Internal reports whether a is an internal address, in any of its
// forms: IPv4, IPv4-mapped IPv6, or an IPv6 address that embeds an
// internal IPv4 address (NAT64, 6to4).
func Internal(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is4() {
		for _, p := range internal4 {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() {
		return true
	}
	for _, p := range internal6 {
		if p.Contains(a) {
			return true
		}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return Internal(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		return Internal(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return false
}
