package resolver

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"warren/internal/network/addrclass"
)

// What a sandbox could learn about the node's networks through its
// resolver, and what this file keeps from it. The upstreams are the node's
// own: often a systemd-resolved stub that also answers from /etc/hosts,
// synthesizes the host's name, "_gateway" and "_outbound", and sends
// single-label names to LLMNR and ".local" ones to mDNS on the host's LAN;
// or a site resolver that serves internal zones. So, for names the policy
// leaves neutral (an explicitly allowed name is the policy's choice):
//   - single-label names (but the zone-level types a validating stub asks
//     of a TLD), and the special-use zones localZones, are refused;
//   - reverse names (PTR or any type) of internal addresses (the pool and
//     the node's private networks among them), and partial or malformed
//     reverse names, are refused;
//   - answers lose their A and AAAA records of internal addresses; an
//     answer left with none is refused (DNS-rebinding protection too).
//
// Not covered: names of internal zones that are not special-use
// (corp.example.com on a site resolver), /etc/hosts entries that are fully
// qualified, SVCB/HTTPS address hints, and a pool configured outside the
// internal ranges.

// localZones are special-use zones that are not resolved on the internet
// (RFC 6761, 6762, 7686, 8375, 9462, and ICANN's "internal").
var localZones = []string{"localhost", "local", "internal", "home.arpa", "onion", "invalid", "resolver.arpa"}

// zoneTypes are asked of a zone rather than a host; a validating stub
// asks them of top-level domains, which are single labels.
var zoneTypes = map[uint16]bool{
	dns.TypeNS: true, dns.TypeSOA: true, dns.TypeDS: true, dns.TypeDNSKEY: true,
	dns.TypeRRSIG: true, dns.TypeNSEC: true, dns.TypeNSEC3: true,
	dns.TypeNSEC3PARAM: true, dns.TypeCDS: true, dns.TypeCDNSKEY: true,
}

// localOnly says why a neutral name is not to be forwarded, or "" if it may
// be. name is a presentation-format query name without escapes.
func localOnly(name string, qtype uint16) string {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return ""
	}
	if !strings.Contains(name, ".") && !zoneTypes[qtype] {
		return "single-label names are not resolved"
	}
	for _, z := range localZones {
		if name == z || strings.HasSuffix(name, "."+z) {
			return "local-only names are not resolved"
		}
	}
	if rest, ok := cutZone(name, "in-addr.arpa"); ok {
		if a, ok := reverse4(rest); !ok || addrclass.Internal(a) {
			return "reverse names of internal addresses are not resolved"
		}
	}
	if rest, ok := cutZone(name, "ip6.arpa"); ok {
		if a, ok := reverse6(rest); !ok || addrclass.Internal(a) {
			return "reverse names of internal addresses are not resolved"
		}
	}
	return ""
}

// cutZone returns name without the zone suffix, if name is in the zone.
func cutZone(name, zone string) (string, bool) {
	if name == zone {
		return "", true
	}
	return strings.CutSuffix(name, "."+zone)
}

// reverse4 parses the labels of an in-addr.arpa name: four decimal octets,
// least significant first.
func reverse4(labels string) (netip.Addr, bool) {
	parts := strings.Split(labels, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 8)
		if err != nil || len(p) > 3 {
			return netip.Addr{}, false
		}
		b[3-i] = byte(v)
	}
	return netip.AddrFrom4(b), true
}

// reverse6 parses the labels of an ip6.arpa name: 32 hexadecimal nibbles,
// least significant first.
func reverse6(labels string) (netip.Addr, bool) {
	parts := strings.Split(labels, ".")
	if len(parts) != 32 {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 16, 4)
		if err != nil || len(p) != 1 {
			return netip.Addr{}, false
		}
		j := 31 - i
		b[j/2] |= byte(v) << (4 * (1 - j%2))
	}
	return netip.AddrFrom16(b), true
}
