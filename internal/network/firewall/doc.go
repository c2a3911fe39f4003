// Package firewall programs the nftables rule sets of docs/NETWORK.md over
// netlink (github.com/google/nftables; nothing shells out to nft):
//
//   - a router's table (Apply, Pin, ReadCounters), in the router network
//     namespace R of one sandbox: anti-spoofing, the egress policy, DNS
//     redirection to the node's resolver, source NAT to the sandbox's node
//     address, the DNAT of exposed ports, the connection-rate limit and the
//     counters of refusals;
//   - the host's table (ApplyHost, DeleteHost), one per daemon: masquerade
//     for the node's pool, no sandbox to sandbox forwarding, no sandbox to
//     host traffic but DNS to the resolver.
//
// Every change is one nftables transaction: the kernel swaps the old rules
// for the new ones at once, so no packet ever meets a half-written table.
//
// It does not make namespaces, links, addresses or routes, nor turn on
// forwarding (package network does), and does not decide policies: it is
// handed a parsed policy.Policy and, from the resolver, the addresses to pin.
package firewall
