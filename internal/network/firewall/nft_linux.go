package firewall

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// This file holds the small vocabulary the two tables are written in: one
// function per match or statement, each returning the expressions nft
// itself would generate for it, and replace, which swaps a table's content
// in one transaction.

const (
	reg1 = 1 // NFT_REG_1: 16 bytes, enough for any match here
	reg2 = 2

	ipsDstNAT = 1 << 5 // IPS_DST_NAT, linux/netfilter/nf_conntrack_common.h
	pktHost   = 0      // PACKET_HOST, linux/if_packet.h

	ipSaddr = 12 // offsets in the IPv4 header
	ipDaddr = 16

	icmpEchoRequest = 8
	ifNameSize      = unix.IFNAMSIZ
)

// exprs concatenates the parts of a rule.
func exprs(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func compare(op expr.CmpOp, data []byte) *expr.Cmp {
	return &expr.Cmp{Op: op, Register: reg1, Data: data}
}

// ifname matches the input (MetaKeyIIFNAME) or output interface's name.
func ifname(key expr.MetaKey, op expr.CmpOp, name string) []expr.Any {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: reg1}, compare(op, b)}
}

// ifprefix matches an interface whose name starts (or, with CmpOpNeq, does
// not start) with prefix: nft's iifname "prefix*".
func ifprefix(key expr.MetaKey, op expr.CmpOp, prefix string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1}, compare(op, []byte(prefix))}
}

// ipv4 matches IPv4 packets (meta nfproto ipv4). In an inet table it must
// come before any match on the IPv4 header.
func ipv4(op expr.CmpOp) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1}, compare(op, []byte{unix.NFPROTO_IPV4})}
}

// l4 matches the transport protocol (meta l4proto).
func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}, compare(expr.CmpOpEq, []byte{proto})}
}

// pkttype matches the link-layer packet type (meta pkttype).
func pkttype(t byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyPKTTYPE, Register: reg1}, compare(expr.CmpOpEq, []byte{t})}
}

func loadAddr(off uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}
}

// addr matches the IPv4 source (ipSaddr) or destination (ipDaddr) address.
func addr(off uint32, op expr.CmpOp, a netip.Addr) []expr.Any {
	return []expr.Any{loadAddr(off), compare(op, a.AsSlice())}
}

// inPrefix matches an address in (or, with CmpOpNeq, out of) the network p.
func inPrefix(off uint32, op expr.CmpOp, p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = make([]byte, 4)
	}
	return []expr.Any{
		loadAddr(off),
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		compare(op, p.Masked().Addr().AsSlice()),
	}
}

// inSet matches an address that is an element of the named set.
func inSet(off uint32, s *nftables.Set) []expr.Any {
	return []expr.Any{loadAddr(off), &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}}
}

// dport matches the transport destination port (th dport); only after l4.
func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		compare(expr.CmpOpEq, binaryutil.BigEndian.PutUint16(port)),
	}
}

// markIs matches a packet of the mark (meta mark).
func markIs(m uint32) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1}, compare(expr.CmpOpEq, binaryutil.NativeEndian.PutUint32(m))}
}

// setMark gives the packet the mark (meta mark set).
func setMark(m uint32) []expr.Any {
	return []expr.Any{&expr.Immediate{Register: reg1, Data: binaryutil.NativeEndian.PutUint32(m)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1}}
}

// icmpType matches the ICMP type; only after l4(IPPROTO_ICMP).
func icmpType(t byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		compare(expr.CmpOpEq, []byte{t}),
	}
}

// ctBits matches a packet whose conntrack key (state or status) has any
// of bits set; both are host-endian 32-bit words.
func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: key, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		compare(expr.CmpOpNeq, make([]byte, 4)),
	}
}

func established() []expr.Any {
	return ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
}

func invalid() []expr.Any { return ctBits(expr.CtKeySTATE, expr.CtStateBitINVALID) }

// dnatted matches a connection whose destination was NATed (ct status dnat).
func dnatted() []expr.Any { return ctBits(expr.CtKeySTATUS, ipsDstNAT) }

// count adds the packet to the named counter object.
func count(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: name}}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func accept() []expr.Any { return verdict(expr.VerdictAccept) }
func drop() []expr.Any   { return verdict(expr.VerdictDrop) }

// reject answers ICMP administratively prohibited (ICMPv6 for IPv6), which
// a TCP connect reports at once as EHOSTUNREACH.
func reject() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
}

// nat rewrites the source (NATTypeSourceNAT) or destination address to a,
// and the port to port unless it is 0.
func nat(t expr.NATType, a netip.Addr, port uint16) []expr.Any {
	n := &expr.NAT{Type: t, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1}
	out := []expr.Any{&expr.Immediate{Register: reg1, Data: a.AsSlice()}}
	if port != 0 {
		out = append(out, &expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(port)})
		n.RegProtoMin, n.Specified = reg2, true
	}
	return append(out, n)
}

// intervals returns the elements of an IPv4 interval set holding the
// networks ps. The kernel refuses overlapping intervals, so the networks
// are merged into disjoint ranges first; each range is a start element
// and an interval-end element one past its last address, omitted for a
// range that runs to 255.255.255.255 (as nft does).
func intervals(ps []netip.Prefix) ([]nftables.SetElement, error) {
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("%s is not an IPv4 network", p)
		}
		lo := uint64(binary.BigEndian.Uint32(p.Masked().Addr().AsSlice()))
		spans = append(spans, span{lo, lo + 1<<(32-p.Bits()) - 1})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	var elems []nftables.SetElement
	for _, s := range merged {
		elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(s.lo))})
		if s.hi < 1<<32-1 {
			elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(s.hi+1)), IntervalEnd: true})
		}
	}
	return elems, nil
}

// A tableSpec is the whole content of a table, as replace writes it.
type tableSpec struct {
	table    *nftables.Table
	counters []string // counter objects, kept with their values if they exist
	sets     []setSpec
	chains   []chainSpec
}

type setSpec struct {
	set   *nftables.Set
	elems []nftables.SetElement
	// keep leaves an existing set's elements as they are; otherwise the set
	// is emptied and given elems.
	keep bool
}

type chainSpec struct {
	chain *nftables.Chain
	rules []ruleSpec
}

type ruleSpec struct {
	comment string // shown by nft list, for whoever debugs a router
	exprs   []expr.Any
}

// add appends a rule: the comment says why it is there.
func (c *chainSpec) add(comment string, parts ...[]expr.Any) {
	c.rules = append(c.rules, ruleSpec{comment, exprs(parts...)})
}

// tableState is what a table holds now, read before replacing it.
type tableState struct {
	exists bool
	chains []*nftables.Chain
	sets   map[string]*nftables.Set
}

func readState(c *nftables.Conn, t *nftables.Table) (tableState, error) {
	var st tableState
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return st, fmt.Errorf("list nftables tables: %w", err)
	}
	st.exists = slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == t.Name })
	if !st.exists {
		return st, nil
	}
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return st, fmt.Errorf("list nftables chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name == t.Name {
			st.chains = append(st.chains, ch)
		}
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return st, fmt.Errorf("list nftables sets: %w", err)
	}
	st.sets = make(map[string]*nftables.Set, len(sets))
	for _, s := range sets {
		if !s.Anonymous {
			st.sets[s.Name] = s
		}
	}
	return st, nil
}

// replace makes the table hold exactly want, in one transaction: the
// kernel applies all of it or none, and packets see either the old rules
// or the new ones. An existing table is not deleted (that would reset its
// counters and empty its sets) but brought to want: every chain is
// flushed and refilled; chains and sets that want does not name, or whose
// kind changed (a newer warren may have redefined them), are deleted and
// made anew; counters and kept sets are left as they are.
func replace(c *nftables.Conn, want tableSpec, have tableState) error {
	c.AddTable(want.table)

	wantChains := make(map[string]*nftables.Chain, len(want.chains))
	for _, ch := range want.chains {
		wantChains[ch.chain.Name] = ch.chain
	}
	for _, ch := range have.chains {
		c.FlushChain(ch)
		if w := wantChains[ch.Name]; w == nil || !sameChain(w, ch) {
			c.DelChain(ch)
		}
	}
	wantSets := make(map[string]*nftables.Set, len(want.sets))
	for _, s := range want.sets {
		wantSets[s.set.Name] = s.set
	}
	for name, s := range have.sets {
		if w := wantSets[name]; w == nil || !sameSet(w, s) {
			// Chains are flushed above, so no rule refers to it any more.
			c.DelSet(s)
			delete(have.sets, name)
		}
	}

	for _, name := range want.counters {
		// Adding a counter that exists is a no-op: it keeps its value.
		c.AddObj(&nftables.CounterObj{Table: want.table, Name: name})
	}
	for i, s := range want.sets {
		// IDs name the sets within this batch only; set them here rather
		// than let the library take them from its unguarded global.
		s.set.ID = uint32(i + 1)
		if err := c.AddSet(s.set, nil); err != nil {
			return fmt.Errorf("set %s: %w", s.set.Name, err)
		}
		if s.keep && have.sets[s.set.Name] != nil {
			continue
		}
		c.FlushSet(s.set)
		if len(s.elems) > 0 {
			if err := c.SetAddElements(s.set, s.elems); err != nil {
				return fmt.Errorf("set %s: %w", s.set.Name, err)
			}
		}
	}
	for _, ch := range want.chains {
		c.AddChain(ch.chain)
		for _, r := range ch.rules {
			c.AddRule(&nftables.Rule{
				Table:    want.table,
				Chain:    ch.chain,
				Exprs:    r.exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, r.comment),
			})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables transaction: %w", err)
	}
	return nil
}

func sameChain(a, b *nftables.Chain) bool {
	eq := func(x, y *nftables.ChainHook) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqp := func(x, y *nftables.ChainPriority) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Type == b.Type && eq(a.Hooknum, b.Hooknum) && eqp(a.Priority, b.Priority)
}

func sameSet(a, b *nftables.Set) bool {
	return a.KeyType.GetNFTMagic() == b.KeyType.GetNFTMagic() && a.KeyType.Bytes == b.KeyType.Bytes &&
		a.Interval == b.Interval && a.HasTimeout == b.HasTimeout && a.IsMap == b.IsMap &&
		a.Constant == b.Constant && a.Size == b.Size
}

// checkIface checks an interface name or prefix.
func checkIface(what, name string) error {
	if name == "" || len(name) >= ifNameSize {
		return fmt.Errorf("%s %q: an interface name is 1 to %d bytes", what, name, ifNameSize-1)
	}
	return nil
}
