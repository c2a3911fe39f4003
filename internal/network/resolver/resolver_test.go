package resolver

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"warren/api"
	"warren/internal/network/policy"
	"warren/internal/wait"
)

func TestAllowedPinsBeforeAnswer(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{Allow: []string{"*.w.test"}})
	sb.pinDelay = 200 * time.Millisecond // an answer racing the pin would overtake it
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})

	r := query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	sb.event("answer")
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrsOf(r.Answer), addrs("192.0.2.1", "192.0.2.2")) {
		t.Fatalf("answer %v", r)
	}
	pins, denied, events := sb.state()
	if want := []string{"pin", "answer"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	if len(pins) != 1 || pins[0].v != policy.Allowed || !slices.Equal(pins[0].addrs, addrs("192.0.2.1", "192.0.2.2")) || pins[0].ttl != 300*time.Second {
		t.Errorf("pins %+v, want the two addresses allowed for 300s", pins)
	}
	if denied != 0 {
		t.Errorf("denied %d, want 0", denied)
	}
	if e := ede(r); e != nil || len(r.IsEdns0().Option) != 0 {
		t.Errorf("the upstream's EDNS options were relayed: %v", r.IsEdns0())
	}
}

func TestPinTTL(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{Allow: []string{"*.w.test"}})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	for _, tc := range []struct {
		name     string
		wantPin  pinCall
		wantTTLs []uint32 // of the answer's records, in order
	}{
		{"short.w.test.", pinCall{policy.Allowed, addrs("192.0.2.3"), 30 * time.Second}, []uint32{5}},
		{"long.w.test.", pinCall{policy.Allowed, addrs("192.0.2.4"), time.Hour}, []uint32{3600}},
		// The chain's least TTL is its middle link's; the target, outside
		// the allowed pattern, is pinned all the same.
		{"chain.w.test.", pinCall{policy.Allowed, addrs("198.51.100.7"), 100 * time.Second}, []uint32{100, 100, 100}},
	} {
		before, _, _ := sb.state()
		r := query{name: tc.name, qtype: dns.TypeA}.must(t, s)
		pins, _, _ := sb.state()
		if len(pins) != len(before)+1 {
			t.Fatalf("%s: %d pins, want 1", tc.name, len(pins)-len(before))
		}
		if got := pins[len(pins)-1]; got.v != tc.wantPin.v || !slices.Equal(got.addrs, tc.wantPin.addrs) || got.ttl != tc.wantPin.ttl {
			t.Errorf("%s: pin %+v, want %+v", tc.name, got, tc.wantPin)
		}
		var ttls []uint32
		for _, rr := range r.Answer {
			ttls = append(ttls, rr.Header().Ttl)
		}
		if !slices.Equal(ttls, tc.wantTTLs) {
			t.Errorf("%s: answer TTLs %v, want %v", tc.name, ttls, tc.wantTTLs)
		}
	}
	// A name with no A record pins nothing.
	before, _, _ := sb.state()
	if r := (query{name: "txt.w.test.", qtype: dns.TypeTXT}).must(t, s); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("TXT answer %v", r)
	}
	if pins, _, _ := sb.state(); len(pins) != len(before) {
		t.Errorf("a TXT answer was pinned: %+v", pins[len(before):])
	}
}

func TestDenied(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{Deny: []string{"bad.w.test"}})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	for i, q := range []query{
		{name: "bad.w.test.", qtype: dns.TypeA},
		{name: "BAD.w.test.", qtype: dns.TypeTXT, tcp: true},
		{name: "bad.w.test.", qtype: dns.TypeAAAA},
	} {
		r := q.must(t, s)
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%s %s: rcode %s with %d records, want REFUSED and none", q.name, dns.TypeToString[q.qtype], dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		if e := ede(r); e == nil || e.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(e.ExtraText, "deny bad.w.test") {
			t.Errorf("extended error %v, want Blocked naming the rule", e)
		}
		pins, denied, _ := sb.state()
		if denied != i+1 {
			t.Errorf("denied %d, want %d", denied, i+1)
		}
		if len(pins) != i+1 || pins[i].v != policy.Denied || !slices.Equal(pins[i].addrs, addrs("203.0.113.9")) || pins[i].ttl != 120*time.Second {
			t.Errorf("pins %+v, want 203.0.113.9 denied for 120s", pins)
		}
	}
	// Only A queries went upstream, to learn what to pin.
	if udp, tcp := u.saw("bad.w.test.", 0); udp != 3 || tcp != 0 {
		t.Errorf("upstream saw %d udp and %d tcp queries, want 3 udp", udp, tcp)
	}
	if udp, _ := u.saw("bad.w.test.", dns.TypeA); udp != 3 {
		t.Errorf("upstream saw %d A queries, want 3", udp)
	}
	// Without EDNS there is no room for the extended error (RFC 6891).
	r := query{name: "bad.w.test.", qtype: dns.TypeA, noEDNS: true}.must(t, s)
	if r.Rcode != dns.RcodeRefused || r.IsEdns0() != nil {
		t.Errorf("without EDNS: %v", r)
	}
	// Other names resolve.
	if r := (query{name: "a.w.test.", qtype: dns.TypeA}).must(t, s); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("a neutral name: %v", r)
	}
	if pins, _, _ := sb.state(); len(pins) != 4 {
		t.Errorf("a neutral name was pinned: %+v", pins)
	}
}

func TestAllowListRefusesNeutral(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{Allow: []string{"a.w.test", "192.0.2.0/24"}})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	r := query{name: "txt.w.test.", qtype: dns.TypeTXT}.must(t, s)
	if e := ede(r); r.Rcode != dns.RcodeRefused || e == nil || e.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(e.ExtraText, "allow list") {
		t.Errorf("neutral name under an allow-list: %v", r)
	}
	if n := u.total(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
	if pins, denied, _ := sb.state(); len(pins) != 0 || denied != 1 {
		t.Errorf("pins %v, denied %d; want none and 1", pins, denied)
	}
	if r := (query{name: "a.w.test.", qtype: dns.TypeA}).must(t, s); r.Rcode != dns.RcodeSuccess {
		t.Errorf("allowed name: %v", r)
	}
}

func TestNoneRefusesEverything(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{None: true, Allow: []string{"a.w.test"}})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	qs := []query{
		{name: "a.w.test.", qtype: dns.TypeA},
		{name: "txt.w.test.", qtype: dns.TypeTXT, tcp: true},
		{name: "v6.w.test.", qtype: dns.TypeAAAA},
		{name: "4.3.2.1.in-addr.arpa.", qtype: dns.TypePTR},
		{name: ".", qtype: dns.TypeNS},
	}
	for _, q := range qs {
		r := q.must(t, s)
		if e := ede(r); r.Rcode != dns.RcodeRefused || e == nil || e.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(e.ExtraText, "none") {
			t.Errorf("%s %s under none: %v", q.name, dns.TypeToString[q.qtype], r)
		}
	}
	if n := u.total(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
	if pins, denied, _ := sb.state(); len(pins) != 0 || denied != len(qs) {
		t.Errorf("pins %v, denied %d; want none and %d", pins, denied, len(qs))
	}
}

func TestAAAANoData(t *testing.T) {
	u := startUpstream(t)
	allow := newSandbox(t, api.NetworkPolicy{Allow: []string{"*.w.test"}})
	open := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: allow, src2: open})
	for _, src := range []netip.Addr{src1, src2} {
		for _, name := range []string{"v6.w.test.", "a.w.test."} {
			r := query{name: name, qtype: dns.TypeAAAA, src: src}.must(t, s)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || r.Truncated {
				t.Errorf("AAAA %s from %v: %v, want an empty NOERROR", name, src, r)
			}
		}
	}
	if n := u.total(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
}

func TestUnknownSource(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	for _, tcp := range []bool{false, true} {
		r := query{name: "a.w.test.", qtype: dns.TypeA, src: src3, tcp: tcp}.must(t, s)
		if e := ede(r); r.Rcode != dns.RcodeRefused || e == nil || e.InfoCode != dns.ExtendedErrorCodeProhibited {
			t.Errorf("unknown source (tcp %v): %v", tcp, r)
		}
	}
	if n := u.total(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
}

func TestNeutralRelayed(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	// The question comes back as asked (0x20 case randomization), with
	// the upstream's records and TTLs.
	r := query{name: "TxT.W.tEsT.", qtype: dns.TypeTXT}.must(t, s)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.TXT).Txt[0] != "hello" || r.Answer[0].Header().Ttl != 300 {
		t.Errorf("TXT: %v", r)
	}
	if !r.RecursionAvailable || r.Authoritative {
		t.Errorf("header %+v", r.MsgHdr)
	}
	r = query{name: "none.w.test.", qtype: dns.TypeA}.must(t, s)
	if r.Rcode != dns.RcodeNameError {
		t.Errorf("a name that does not exist: %v", r)
	}
	r = query{name: "long.w.test.", qtype: dns.TypeA}.must(t, s)
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 86400 {
		t.Errorf("a neutral answer was changed: %v", r)
	}
	if pins, denied, _ := sb.state(); len(pins) != 0 || denied != 0 {
		t.Errorf("pins %v, denied %d; want none", pins, denied)
	}
}

func TestLocalNames(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		addrs []netip.Addr
	}{
		{"localhost.", dns.TypeA, dns.RcodeRefused, nil},
		{"printer.local.", dns.TypeA, dns.RcodeRefused, nil},
		{"db.corp.internal.", dns.TypeA, dns.RcodeRefused, nil},
		{"_gateway.", dns.TypeA, dns.RcodeRefused, nil},
		{"myhost.", dns.TypeTXT, dns.RcodeRefused, nil},
		{"com.", dns.TypeNS, dns.RcodeSuccess, nil}, // a validating stub asks this
		{"1.0.201.10.in-addr.arpa.", dns.TypePTR, dns.RcodeRefused, nil},
		{"15.2.0.10.in-addr.arpa.", dns.TypePTR, dns.RcodeRefused, nil},
		{"254.169.254.169.in-addr.arpa.", dns.TypePTR, dns.RcodeRefused, nil},
		{"10.in-addr.arpa.", dns.TypeSOA, dns.RcodeRefused, nil},
		{"b._dns-sd._udp.0.2.0.10.in-addr.arpa.", dns.TypePTR, dns.RcodeRefused, nil},
		{"4.3.2.1.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, nil},
		{"private.w.test.", dns.TypeA, dns.RcodeRefused, nil},
		{"meta.w.test.", dns.TypeA, dns.RcodeRefused, nil},
		{"mixed.w.test.", dns.TypeA, dns.RcodeSuccess, addrs("192.0.2.7")},
		{`a\.b.w.test.`, dns.TypeA, dns.RcodeRefused, nil},
	} {
		r := query{name: tc.name, qtype: tc.qtype}.must(t, s)
		if r.Rcode != tc.rcode || !slices.Equal(addrsOf(r.Answer), tc.addrs) {
			t.Errorf("%s %s: %s %v, want %s %v", tc.name, dns.TypeToString[tc.qtype], dns.RcodeToString[r.Rcode], addrsOf(r.Answer), dns.RcodeToString[tc.rcode], tc.addrs)
		}
		if tc.rcode == dns.RcodeRefused {
			if e := ede(r); e == nil || e.InfoCode != dns.ExtendedErrorCodeBlocked {
				t.Errorf("%s: extended error %v, want Blocked", tc.name, e)
			}
			if tc.addrs == nil && !strings.HasSuffix(tc.name, ".w.test.") {
				if udp, tcp := u.saw(dns.CanonicalName(tc.name), 0); udp+tcp != 0 {
					t.Errorf("%s went upstream", tc.name)
				}
			}
		}
	}
	// Internal glue goes; the rest of the answer stays.
	r := query{name: "mx.w.test.", qtype: dns.TypeMX}.must(t, s)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || len(r.Extra) != 1 { // the OPT
		t.Errorf("MX with internal glue: %v", r)
	}
	if _, denied, _ := sb.state(); denied != 0 {
		t.Errorf("denied %d, want 0: local names are not policy denials", denied)
	}
	// An explicitly allowed name is the policy's choice.
	allow := newSandbox(t, api.NetworkPolicy{Allow: []string{"private.w.test", "mx.w.test"}})
	s = startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: allow})
	if r := (query{name: "private.w.test.", qtype: dns.TypeA}).must(t, s); !slices.Equal(addrsOf(r.Answer), addrs("10.1.2.3")) {
		t.Errorf("an allowed name of a private address: %v", r)
	}
	if r := (query{name: "mx.w.test.", qtype: dns.TypeMX}).must(t, s); !slices.Equal(addrsOf(r.Extra), addrs("10.9.9.9")) {
		t.Errorf("an allowed name's glue: %v", r)
	}
}

func TestProtocol(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	msg := func(edit func(m *dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("a.w.test.", dns.TypeA)
		m.Id = 0x1234
		edit(m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		what  string
		wire  []byte
		rcode int // -1: no answer
	}{
		{"ANY", msg(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeANY }), dns.RcodeRefused},
		{"AXFR", msg(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAXFR }), dns.RcodeRefused},
		{"class CH", msg(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), dns.RcodeRefused},
		{"two questions", msg(func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), dns.RcodeFormatError},
		{"no question", msg(func(m *dns.Msg) { m.Question = nil }), dns.RcodeFormatError},
		{"opcode NOTIFY", msg(func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), dns.RcodeNotImplemented},
		{"EDNS version 1", msg(func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) }), dns.RcodeBadVers},
		{"a response", msg(func(m *dns.Msg) { m.Response = true }), -1},
		{"garbage after a header", append(msg(func(m *dns.Msg) {})[:12:12], 0xff, 0xff, 0xff), dns.RcodeFormatError},
		{"short", []byte{0x12, 0x34, 0}, -1},
	} {
		got, err := rawUDP(s.Addr(), tc.wire)
		if tc.rcode == -1 {
			if err == nil {
				t.Errorf("%s: answered %x", tc.what, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		var r dns.Msg
		if err := r.Unpack(got); err != nil {
			t.Errorf("%s: unpack the answer: %v", tc.what, err)
			continue
		}
		if r.Id != 0x1234 || !r.Response || r.Rcode != tc.rcode {
			t.Errorf("%s: id %#x rcode %s, want %#x %s", tc.what, r.Id, dns.RcodeToString[r.Rcode], 0x1234, dns.RcodeToString[tc.rcode])
		}
	}
	if n := u.total(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
}

// rawUDP sends wire from src1 and returns the answer, if one comes soon.
func rawUDP(to netip.AddrPort, wire []byte) ([]byte, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(wire); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	return buf[:n], err
}

func TestFailover(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	clients := map[netip.Addr]*sandbox{src1: sb}
	failing := startUpstream(t, func(u *upstream) { u.rcode = dns.RcodeServerFailure })

	// A dead server fails at once, a SERVFAIL passes to the next, a silent
	// one after the timeout (300ms).
	s := startResolver(t, []netip.AddrPort{deadUpstream(t), failing.addr, blackhole(t), u.addr}, clients)
	start := time.Now()
	r := query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	if took := time.Since(start); took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("took %v, want the timeout of one try and a bit", took)
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("answer %v", r)
	}
	if failing.total() != 1 {
		t.Errorf("the failing server saw %d queries, want 1", failing.total())
	}

	// None answers: SERVFAIL.
	s = startResolver(t, []netip.AddrPort{blackhole(t), failing.addr}, clients)
	start = time.Now()
	r = query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	if e := ede(r); r.Rcode != dns.RcodeServerFailure || e == nil || e.InfoCode != dns.ExtendedErrorCodeNoReachableAuthority {
		t.Errorf("no upstream: %v", r)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestTCPAndTruncation(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})

	// A query over TCP goes upstream over TCP.
	r := query{name: "txt.w.test.", qtype: dns.TypeTXT, tcp: true}.must(t, s)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("over TCP: %v", r)
	}
	if udp, tcp := u.saw("txt.w.test.", dns.TypeTXT); udp != 0 || tcp != 1 {
		t.Errorf("upstream saw %d udp and %d tcp, want 1 tcp", udp, tcp)
	}

	// A truncated upstream answer is asked again over TCP.
	r = query{name: "tc.w.test.", qtype: dns.TypeA}.must(t, s)
	if r.Truncated || !slices.Equal(addrsOf(r.Answer), addrs("192.0.2.6")) {
		t.Errorf("after the TCP fallback: %v", r)
	}
	if udp, tcp := u.saw("tc.w.test.", dns.TypeA); udp != 1 || tcp != 1 {
		t.Errorf("upstream saw %d udp and %d tcp, want 1 of each", udp, tcp)
	}

	// An answer too large for the client's UDP size is truncated; over
	// TCP it comes whole.
	r = query{name: "big.w.test.", qtype: dns.TypeA, noEDNS: true}.must(t, s)
	if !r.Truncated || len(r.Answer) >= 60 {
		t.Errorf("60 records in 512 bytes: TC %v, %d records", r.Truncated, len(r.Answer))
	}
	r = query{name: "big.w.test.", qtype: dns.TypeA, tcp: true}.must(t, s)
	if r.Truncated || len(r.Answer) != 60 {
		t.Errorf("over TCP: TC %v, %d records", r.Truncated, len(r.Answer))
	}
}

func TestRateLimit(t *testing.T) {
	u := startUpstream(t)
	flooder := newSandbox(t, api.NetworkPolicy{})
	other := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: other, src2: flooder}, func(c *Config) { c.QPS = 5 })

	// 30 queries at once from one source: a burst of 10 answered, 10
	// refused, 10 dropped.
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src2, 0)), net.UDPAddrFromAddrPort(s.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 30 {
		m := new(dns.Msg)
		m.SetQuestion("a.w.test.", dns.TypeA)
		m.SetEdns0(1232, false)
		m.Id = uint16(i)
		b, _ := m.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	var answered, refused int
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		var r dns.Msg
		if err := r.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		switch e := ede(&r); {
		case r.Rcode == dns.RcodeSuccess:
			answered++
		case r.Rcode == dns.RcodeRefused && e != nil && e.InfoCode == dns.ExtendedErrorCodeOther && e.ExtraText == "rate limited":
			refused++
		default:
			t.Errorf("answer %v", &r)
		}
	}
	if answered < 10 || answered > 12 || refused < 10 || refused > 12 {
		t.Errorf("answered %d, refused %d, dropped %d; want 10 of each", answered, refused, 30-answered-refused)
	}
	if _, denied, _ := flooder.state(); denied != 0 {
		t.Errorf("rate limiting counted %d denials", denied)
	}
	if r := (query{name: "a.w.test.", qtype: dns.TypeA}).must(t, s); r.Rcode != dns.RcodeSuccess {
		t.Errorf("another source is limited too: %v", r)
	}
}

func TestFloodDoesNotStarveOthers(t *testing.T) {
	u := startUpstream(t, func(u *upstream) { u.delay = time.Minute }) // held until released
	flooder := newSandbox(t, api.NetworkPolicy{})
	other := newSandbox(t, api.NetworkPolicy{})
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: other, src2: flooder},
		func(c *Config) { c.QPS = 100000; c.Timeout = time.Minute })

	// One source asks three times as many slow queries as it may have in
	// flight; the rest are dropped, not queued.
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src2, 0)), net.UDPAddrFromAddrPort(s.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 * maxInflightPerSource {
		m := new(dns.Msg)
		m.SetQuestion("slow.w.test.", dns.TypeA)
		m.Id = uint16(i)
		b, _ := m.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	inflight := func() int {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.inflight
	}
	wait.For(t, 5*time.Second, "the flood fills its slots", func() bool { return inflight() == maxInflightPerSource })

	// Another source is answered while the flood is in progress.
	r := query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("another source during a flood: %v", r)
	}
	if n := inflight(); n != maxInflightPerSource {
		t.Errorf("%d slow queries in flight after the other source's, want %d", n, maxInflightPerSource)
	}
	u.releaseSlow()
	wait.For(t, 5*time.Second, "the flood ends", func() bool { return inflight() == 0 })
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.maxSlow != maxInflightPerSource {
		t.Errorf("at most %d of one source's queries were in flight at once, want %d", u.maxSlow, maxInflightPerSource)
	}
}

func TestPinFailure(t *testing.T) {
	u := startUpstream(t)
	sb := newSandbox(t, api.NetworkPolicy{Allow: []string{"a.w.test"}})
	sb.pinErr = errors.New("nft: no such table")
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb})
	r := query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("after a failed pin: %v, want SERVFAIL without addresses", r)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	u := startUpstream(t, func(u *upstream) { u.delay = time.Minute })
	sb := newSandbox(t, api.NetworkPolicy{})
	baseline := runtime.NumGoroutine()
	s := startResolver(t, []netip.AddrPort{u.addr}, map[netip.Addr]*sandbox{src1: sb}, func(c *Config) { c.Timeout = time.Minute })

	// An idle TCP connection, and queries waiting on the upstream.
	idle, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	query{name: "a.w.test.", qtype: dns.TypeA}.must(t, s)
	for _, tcp := range []bool{false, true} {
		go query{name: "slow.w.test.", qtype: dns.TypeA, tcp: tcp, timeout: time.Second}.ask(s)
	}
	wait.For(t, time.Second, "the slow queries reach the upstream", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.inflight == 2
	})

	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	idle.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("the idle connection is still open: %v", err)
	}
	// The address is free again, at once.
	again, err := Start(Config{Listen: s.Addr(), Upstreams: []netip.AddrPort{u.addr}, Lookup: func(netip.Addr) (Client, bool) { return Client{}, false }})
	if err != nil {
		t.Fatalf("bind again: %v", err)
	}
	again.Close()
	// The upstream's handlers of the slow queries are the upstream's
	// goroutines, not the resolver's: end them, then count.
	u.releaseSlow()
	wait.For(t, 3*time.Second, "goroutines back to the baseline", func() bool {
		return runtime.NumGoroutine() <= baseline
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
