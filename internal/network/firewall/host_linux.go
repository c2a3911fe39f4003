package firewall

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Host is one daemon's part of the host's rules.
//
// Several daemons may share a host, each with its own pool and table, and
// all with the same IfacePrefix. A packet must pass the input chain of
// every table, so each table judges only what is its own: input from the
// sandbox links whose source is in its Pool. Routers NAT all their
// sandbox's traffic to their pool address and drop the rest, so what
// comes from a sandbox link with another source belongs to another
// daemon's pool and is left to that daemon's table (were it refused here,
// the other daemon's sandboxes would lose their DNS). Forwarding between
// sandbox links is dropped by every table, whoever owns the links.
type Host struct {
	// Table is the table's name (in the inet family), unique per daemon on
	// the host.
	Table string
	// Pool is the node's sandbox pool, e.g. 10.201.0.0/16.
	Pool netip.Prefix
	// IfacePrefix starts the name of every host end of a sandbox link, of
	// this daemon and of others.
	IfacePrefix string
	// Resolver is the node's DNS resolver, on an address of the host: the
	// one service of the host the sandboxes reach.
	Resolver netip.AddrPort
}

// ApplyHost writes the host's table, creating it or replacing its content
// in one transaction. It acts in the network namespace of the calling
// thread: the host's, in the daemon. Turning on IPv4 forwarding is the
// caller's part.
//
// Its rules, in nft's words (wr* the sandbox links):
//
//	postrouting (nat, srcnat): ip saddr <pool> oifname != wr* → masquerade
//	forward (filter, policy accept):
//	    iifname wr* oifname wr* → drop: sandboxes never reach each other
//	    oifname wr* ct state established,related → accept
//	    oifname wr* → drop: nothing from outside starts a connection to a
//	        router (exposed ports come through the host's own proxy)
//	input (filter, policy accept):
//	    iifname != wr* → accept (not ours to judge)
//	    ct state established,related → accept
//	    ip saddr != <pool> → accept (another daemon's; see Host)
//	    ip daddr <resolver> udp/tcp dport <port> → accept
//	    → reject: no other service of the host
func ApplyHost(h Host) error {
	if err := h.check(); err != nil {
		return err
	}
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Name: h.Table, Family: nftables.TableFamilyINet}
	have, err := readState(c, t)
	if err != nil {
		return err
	}
	return replace(c, h.table(t), have)
}

func (h *Host) check() error {
	if h.Table == "" || len(h.Table) > 255 {
		return fmt.Errorf("table name %q: 1 to 255 bytes", h.Table)
	}
	if !h.Pool.IsValid() || !h.Pool.Addr().Is4() {
		return fmt.Errorf("pool %v is not an IPv4 network", h.Pool)
	}
	if err := checkIface("interface prefix", h.IfacePrefix); err != nil {
		return err
	}
	if !h.Resolver.Addr().Is4() || h.Resolver.Port() == 0 {
		return fmt.Errorf("resolver %v is not an IPv4 address and port", h.Resolver)
	}
	return nil
}

func (h *Host) table(t *nftables.Table) tableSpec {
	sandboxIn := ifprefix(expr.MetaKeyIIFNAME, expr.CmpOpEq, h.IfacePrefix)
	sandboxOut := ifprefix(expr.MetaKeyOIFNAME, expr.CmpOpEq, h.IfacePrefix)

	post := chainSpec{chain: &nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}}
	post.add("the pool's egress leaves from the host's address",
		ipv4(expr.CmpOpEq), inPrefix(ipSaddr, expr.CmpOpEq, h.Pool),
		ifprefix(expr.MetaKeyOIFNAME, expr.CmpOpNeq, h.IfacePrefix), []expr.Any{&expr.Masq{}})

	fwd := chainSpec{chain: &nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: ref(nftables.ChainPolicyAccept)}}
	fwd.add("sandboxes never reach each other, any daemon's", sandboxIn, sandboxOut, drop())
	fwd.add("replies to the sandboxes' connections", sandboxOut, established(), accept())
	fwd.add("nothing from outside starts a connection to a router", sandboxOut, drop())

	in := chainSpec{chain: &nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: ref(nftables.ChainPolicyAccept)}}
	in.add("not from a sandbox link: not ours to judge", ifprefix(expr.MetaKeyIIFNAME, expr.CmpOpNeq, h.IfacePrefix), accept())
	in.add("replies to the host's connections (the proxy to exposed ports)", established(), accept())
	in.add("another daemon's pool: its table judges it", ipv4(expr.CmpOpEq), inPrefix(ipSaddr, expr.CmpOpNeq, h.Pool), accept())
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		in.add("the node's resolver", ipv4(expr.CmpOpEq), addr(ipDaddr, expr.CmpOpEq, h.Resolver.Addr()),
			l4(proto), dport(h.Resolver.Port()), accept())
	}
	in.add("no other service of the host", reject())

	return tableSpec{table: t, chains: []chainSpec{post, fwd, in}}
}

// DeleteHost deletes the host's table, in the calling thread's network
// namespace. A table that does not exist is not an error.
func DeleteHost(table string) error {
	if table == "" {
		return errors.New("delete host rules: no table name")
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	// Adding the table first makes the deletion succeed when it is absent.
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete host rules: %w", err)
	}
	return nil
}
