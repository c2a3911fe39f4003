package resolver

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"warren/internal/network/addrclass"
	"warren/internal/network/policy"
)

const (
	headerLen = 12
	maxQuery  = 4096 // bytes; a longer query is dropped
	// ednsSize is the UDP payload size advertised to clients and asked of
	// upstreams, and the most a UDP answer to a client carries (DNS flag
	// day 2020); larger answers are truncated and retried over TCP.
	ednsSize = 1232
	// maxChain bounds the CNAME chain followed in an answer.
	maxChain = 16
)

// Bounds on the time addresses are pinned for, whatever the TTLs: at least
// long enough to connect, at most so long that a stale address stays
// pinned for at most an hour.
const (
	minPinTTL = 30 * time.Second
	maxPinTTL = time.Hour
)

var errNoPin = errors.New("the client has no Pin")

// handle answers one query from src: the request in wire format in, the
// answer in wire format out, or nil for no answer (and, over TCP, the end
// of the connection). tcp is the transport of the query. It must not panic
// on any input (FuzzHandle).
func (s *Server) handle(ctx context.Context, src netip.Addr, wire []byte, tcp bool) []byte {
	// Too short for a header, or a response rather than a query: never
	// answered, so that two resolvers cannot bounce messages forever.
	if len(wire) < headerLen || wire[2]&0x80 != 0 {
		return nil
	}
	action := s.limit.take(src)
	if action == drop {
		return nil
	}
	req := new(dns.Msg)
	if err := req.Unpack(wire); err != nil {
		// Answer FORMERR with the ID and opcode alone: nothing after the
		// header can be trusted.
		m := &dns.Msg{MsgHdr: dns.MsgHdr{
			Id:       uint16(wire[0])<<8 | uint16(wire[1]),
			Opcode:   int(wire[2]>>3) & 0xF,
			Response: true,
			Rcode:    dns.RcodeFormatError,
		}}
		b, err := m.Pack()
		if err != nil {
			return nil
		}
		return b
	}
	var resp *dns.Msg
	var ede *dns.EDNS0_EDE
	if action == refuse {
		resp, ede = reply(dns.RcodeRefused, dns.ExtendedErrorCodeOther, "rate limited")
	} else {
		resp, ede = s.answer(ctx, src, req, tcp)
	}
	return s.finish(req, resp, ede, tcp)
}

// answer decides a well-formed query; finish makes the answer a reply to
// it. In order:
//
//  1. Protocol: one question of class IN, opcode QUERY, EDNS version 0;
//     no meta types (ANY, AXFR…), no names with escaped characters (whose
//     string form could match a policy pattern that their labels do not).
//  2. Who asks: an unknown source is REFUSED.
//  3. Policy (counted by Client.Denied, REFUSED with EDE Blocked naming the
//     rule): none; a denied name, which is first resolved (its A records)
//     and pinned as denied; a neutral name under an allow-list.
//  4. Local-only names, for neutral names (names.go): REFUSED, not counted.
//  5. AAAA: answered empty (NODATA) at once; the sandbox network is IPv4.
//  6. Forwarded. An allowed name's A records (along its CNAME chain) are
//     pinned as allowed for the least TTL of the chain, clamped to
//     [minPinTTL, maxPinTTL], and no TTL of the answer exceeds that. A
//     neutral name's answer loses its internal addresses.
func (s *Server) answer(ctx context.Context, src netip.Addr, req *dns.Msg, tcp bool) (*dns.Msg, *dns.EDNS0_EDE) {
	if req.Opcode != dns.OpcodeQuery {
		return reply(dns.RcodeNotImplemented, 0, "")
	}
	if len(req.Question) != 1 || countOPT(req) > 1 {
		return reply(dns.RcodeFormatError, 0, "")
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		return reply(dns.RcodeBadVers, 0, "")
	}
	q := req.Question[0]
	switch {
	case q.Qclass != dns.ClassINET:
		return reply(dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported, "only class IN is served")
	case metaType(q.Qtype):
		return reply(dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported, "query type "+dns.TypeToString[q.Qtype]+" is not served")
	case strings.ContainsRune(q.Name, '\\'):
		return reply(dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, "names with escaped characters are not resolved")
	}

	c, ok := s.cfg.Lookup(src)
	if !ok || c.Policy == nil {
		s.log.Debug("dns: refused an unknown source", "src", src, "name", q.Name)
		return reply(dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "unknown client")
	}
	log := s.log.With("sandbox", c.ID, "name", q.Name, "type", dns.TypeToString[q.Qtype])
	p := c.Policy
	verdict := p.Name(q.Name)
	switch {
	case p.None:
		return c.blocked(log, "none")
	case verdict == policy.Denied:
		s.pinDenied(ctx, log, c, q.Name)
		return c.blocked(log, "deny "+denyRule(p, q.Name))
	case verdict == policy.Neutral && p.AllowListed():
		return c.blocked(log, "not in the allow list")
	}

	if verdict == policy.Neutral {
		if why := localOnly(q.Name, q.Qtype); why != "" {
			log.Debug("dns: refused a local-only name", "why", why)
			return reply(dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, why)
		}
	}
	if q.Qtype == dns.TypeAAAA {
		return reply(dns.RcodeSuccess, 0, "")
	}

	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	up, err := s.exchange(ctx, upstreamQuery(q, do, req.CheckingDisabled), tcp)
	if err != nil {
		log.Debug("dns: no upstream answered", "err", err)
		return reply(dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority, "no upstream server answered")
	}
	resp := relay(up, req)

	if verdict == policy.Allowed {
		addrs, ttl := pinSet(q.Name, resp.Answer)
		if len(addrs) == 0 {
			return resp, nil
		}
		if err := c.pin(policy.Allowed, addrs, ttl); err != nil {
			log.Warn("dns: pin allowed addresses", "addrs", addrs, "err", err)
			return reply(dns.RcodeServerFailure, dns.ExtendedErrorCodeOther, "the sandbox firewall could not be updated")
		}
		for _, rr := range resp.Answer {
			rr.Header().Ttl = min(rr.Header().Ttl, uint32(ttl/time.Second))
		}
		return c.intercepted(log, q.Name, resp)
	}
	resp.Extra, _ = withoutInternal(resp.Extra)
	var dropped bool
	if resp.Answer, dropped = withoutInternal(resp.Answer); dropped && !hasAddress(resp.Answer) {
		log.Debug("dns: refused a name of internal addresses")
		return reply(dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, "the name resolves to internal addresses only")
	}
	return c.intercepted(log, q.Name, resp)
}

// intercepted passes on resp, the answer for name, once the addresses of
// a name the policy's rules cover are recorded for interception (not
// those of other names: their traffic is never intercepted). Their TTLs
// are capped to the time they are recorded for.
func (c Client) intercepted(log *slog.Logger, name string, resp *dns.Msg) (*dns.Msg, *dns.EDNS0_EDE) {
	if c.Policy.RuleFor(name) == nil {
		return resp, nil
	}
	addrs, ttl := pinSet(name, resp.Answer)
	if len(addrs) == 0 {
		return resp, nil
	}
	if c.Intercept == nil {
		return reply(dns.RcodeServerFailure, dns.ExtendedErrorCodeOther, "the sandbox's egress rules are not served")
	}
	if err := c.Intercept(name, addrs, ttl); err != nil {
		log.Warn("dns: pin intercepted addresses", "addrs", addrs, "err", err)
		return reply(dns.RcodeServerFailure, dns.ExtendedErrorCodeOther, "the sandbox firewall could not be updated")
	}
	for _, rr := range resp.Answer {
		rr.Header().Ttl = min(rr.Header().Ttl, uint32(ttl/time.Second))
	}
	return resp, nil
}

// blocked is the answer to a query the policy refuses.
func (c Client) blocked(log *slog.Logger, rule string) (*dns.Msg, *dns.EDNS0_EDE) {
	log.Debug("dns: refused by policy", "rule", rule)
	if c.Denied != nil {
		c.Denied()
	}
	return reply(dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, "warren network policy: "+rule)
}

func (c Client) pin(v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error {
	if c.Pin == nil {
		return errNoPin
	}
	return c.Pin(v, addrs, ttl)
}

// pinDenied resolves a denied name's A records upstream and pins them as
// denied, so that the sandbox cannot reach them by an address learnt
// elsewhere. A failure is logged: the query is refused either way.
func (s *Server) pinDenied(ctx context.Context, log *slog.Logger, c Client, name string) {
	up, err := s.exchange(ctx, upstreamQuery(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}, false, false), false)
	if err != nil {
		log.Debug("dns: resolve a denied name", "err", err)
		return
	}
	addrs, ttl := pinSet(name, up.Answer)
	if len(addrs) == 0 {
		return
	}
	if err := c.pin(policy.Denied, addrs, ttl); err != nil {
		log.Warn("dns: pin denied addresses", "addrs", addrs, "err", err)
	}
}

// denyRule is the deny pattern that matches name.
func denyRule(p *policy.Policy, name string) string {
	for _, n := range p.DenyNames {
		if n.Match(name) {
			return n.String()
		}
	}
	return "?"
}

// reply is an answer of rcode alone, with an extended error if code or
// text is set.
func reply(rcode int, code uint16, text string) (*dns.Msg, *dns.EDNS0_EDE) {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: rcode}}
	if code == 0 && text == "" {
		return m, nil
	}
	return m, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text}
}

func countOPT(m *dns.Msg) int {
	n := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// metaType reports whether t is a type that is not a record type to
// resolve: ANY, zone transfers, and the message-level ones.
func metaType(t uint16) bool {
	switch t {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB,
		dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeNone, dns.TypeReserved:
		return true
	}
	return false
}

// upstreamQuery is the query sent upstream for q: built anew, with a
// fresh ID and none of the client's EDNS options (an NSID or a cookie
// would concern the upstream, not the sandbox), but its DO and CD bits.
func upstreamQuery(q dns.Question, do, cd bool) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: dns.Id(), RecursionDesired: true, CheckingDisabled: cd}}
	m.Question = []dns.Question{q}
	m.SetEdns0(ednsSize, do)
	return m
}

// relay is the upstream's answer up as an answer to req (finish sets the
// header): its rcode and records, without its OPT and transaction
// signatures; the AD bit only if req asked for DNSSEC (RFC 6840 5.8).
func relay(up, req *dns.Msg) *dns.Msg {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: up.Rcode}}
	if opt := req.IsEdns0(); req.AuthenticatedData || opt != nil && opt.Do() {
		m.AuthenticatedData = up.AuthenticatedData
	}
	m.Answer, m.Ns = up.Answer, up.Ns
	for _, rr := range up.Extra {
		switch rr.Header().Rrtype {
		case dns.TypeOPT, dns.TypeTSIG, dns.TypeSIG:
		default:
			m.Extra = append(m.Extra, rr)
		}
	}
	return m
}

// pinSet is what name resolved to in answer: the A records of name and of
// the names its CNAME chain leads to (other records, which a stub would
// not use, are not pinned), and the time to pin them for: the least TTL
// along the chain, clamped to [minPinTTL, maxPinTTL].
func pinSet(name string, answer []dns.RR) ([]netip.Addr, time.Duration) {
	chain := map[string]bool{dns.CanonicalName(name): true}
	least := uint32(1<<32 - 1)
	for range maxChain {
		grew := false
		for _, rr := range answer {
			if c, ok := rr.(*dns.CNAME); ok && chain[dns.CanonicalName(c.Hdr.Name)] {
				least = min(least, c.Hdr.Ttl)
				if t := dns.CanonicalName(c.Target); !chain[t] {
					chain[t] = true
					grew = true
				}
			}
		}
		if !grew {
			break
		}
	}
	var addrs []netip.Addr
	for _, rr := range answer {
		a, ok := rr.(*dns.A)
		if !ok || !chain[dns.CanonicalName(a.Hdr.Name)] {
			continue
		}
		addr, ok := netip.AddrFromSlice(a.A)
		if !ok || !addr.Unmap().Is4() {
			continue
		}
		least = min(least, a.Hdr.Ttl)
		if addr = addr.Unmap(); !containsAddr(addrs, addr) {
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) == 0 {
		return nil, 0
	}
	return addrs, min(max(time.Duration(least)*time.Second, minPinTTL), maxPinTTL)
}

func containsAddr(addrs []netip.Addr, a netip.Addr) bool {
	for _, b := range addrs {
		if a == b {
			return true
		}
	}
	return false
}

// withoutInternal is rrs without the A and AAAA records of internal
// addresses, and whether there were any.
func withoutInternal(rrs []dns.RR) (_ []dns.RR, dropped bool) {
	var out []dns.RR
	for _, rr := range rrs {
		var ip []byte
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		default:
			out = append(out, rr)
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); !ok || addrclass.Internal(a) {
			dropped = true
			continue
		}
		out = append(out, rr)
	}
	return out, dropped
}

func hasAddress(rrs []dns.RR) bool {
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; t == dns.TypeA || t == dns.TypeAAAA {
			return true
		}
	}
	return false
}

// finish makes resp the reply to req: its ID, opcode and question, the
// header bits a recursive server sets, an OPT record (with ede) if req had
// one, and the size the transport allows, truncating (TC) past it.
func (s *Server) finish(req, resp *dns.Msg, ede *dns.EDNS0_EDE, tcp bool) []byte {
	resp.Id = req.Id
	resp.Response = true
	resp.Opcode = req.Opcode
	resp.Authoritative = false
	resp.Truncated = false
	resp.RecursionDesired = req.RecursionDesired
	resp.RecursionAvailable = true
	resp.Zero = false
	resp.CheckingDisabled = req.CheckingDisabled
	resp.Question = nil
	if len(req.Question) == 1 {
		resp.Question = req.Question
	}
	limit := dns.MaxMsgSize
	if opt := req.IsEdns0(); opt != nil {
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(ednsSize)
		if opt.Do() {
			o.SetDo()
		}
		if ede != nil {
			o.Option = append(o.Option, ede)
		}
		resp.Extra = append(resp.Extra, o)
		if !tcp {
			limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), ednsSize)
		}
	} else {
		if !tcp {
			limit = dns.MinMsgSize
		}
		if resp.Rcode > 0xF { // an extended rcode needs an OPT to carry it
			resp.Rcode = dns.RcodeServerFailure
		}
	}
	resp.Compress = true
	resp.Truncate(limit)
	b, err := resp.Pack()
	if err == nil && len(b) <= limit {
		return b
	}
	s.log.Warn("dns: pack an answer", "name", questionName(req), "size", len(b), "err", err)
	fail := &dns.Msg{MsgHdr: resp.MsgHdr, Question: resp.Question}
	fail.Rcode = dns.RcodeServerFailure
	if b, err = fail.Pack(); err != nil || len(b) > limit {
		return nil
	}
	return b
}

func questionName(m *dns.Msg) string {
	if len(m.Question) == 0 {
		return ""
	}
	return m.Question[0].Name
}
