//go:build linux

package network

// routerSysctls are set in every router namespace when it is made: it
// forwards IPv4, answers every refusal at once, and has no IPv6 at all (the sandbox network is IPv4, and
// an IPv6 path would bypass every rule).
var routerSysctls = map[string]string{
	"/proc/sys/net/ipv4/ip_forward": "1",
	// Every refusal is an ICMP error, which must not be rate limited: a
	// connect would otherwise fail only at its SYN's retry, a second on.
	"/proc/sys/net/ipv4/icmp_ratelimit":            "0",
	"/proc/sys/net/ipv6/conf/all/disable_ipv6":     "1",
	"/proc/sys/net/ipv6/conf/default/disable_ipv6": "1",
}
