package resolver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"warren/api"
	"warren/internal/network/policy"
)

// FuzzHandle feeds handle any query, from sandboxes of every kind of
// policy, with any upstream answer, and checks that it does not panic,
// answers within the transport's size with the query's ID, and pins only
// IPv4 addresses for a bounded time. Its seeds run in every `go test`.
func FuzzHandle(f *testing.F) {
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	q := func(name string, qtype uint16, edns bool) []byte {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		if edns {
			m.SetEdns0(1232, true)
		}
		return pack(m)
	}
	a := func(name string, rrs ...string) []byte {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Response = true
		for _, s := range rrs {
			rr, err := dns.NewRR(s)
			if err != nil {
				f.Fatal(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		m.SetEdns0(1232, false)
		return pack(m)
	}
	chain := a("a.w.test.", "a.w.test. 60 CNAME b.example.", "b.example. 5 A 192.0.2.1", "b.example. 5 A 10.0.0.1", "x. 1 A 192.0.2.9")
	big := new(dns.Msg)
	big.SetQuestion("big.w.test.", dns.TypeA)
	big.Response = true
	for i := range 200 {
		big.Answer = append(big.Answer, &dns.A{Hdr: dns.RR_Header{Name: "big.w.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(i)}, A: []byte{192, 0, 2, byte(i)}})
	}
	for src := range byte(5) {
		for _, tcp := range []bool{false, true} {
			f.Add(q("a.w.test.", dns.TypeA, true), chain, src, tcp)
			f.Add(q("A.W.TEST.", dns.TypeA, false), chain, src, tcp)
			f.Add(q("big.w.test.", dns.TypeA, false), pack(big), src, tcp)
			f.Add(q("a.w.test.", dns.TypeAAAA, true), chain, src, tcp)
			f.Add(q("txt.example.", dns.TypeTXT, true), chain, src, tcp)
			f.Add(q("4.3.2.1.in-addr.arpa.", dns.TypePTR, false), []byte{}, src, tcp)
			f.Add(q("x.local.", dns.TypeANY, true), []byte{0xff}, src, tcp)
		}
	}
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c}, []byte{}, byte(1), false) // a pointer loop
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 41, 0, 0}, []byte{}, byte(1), false)
	f.Add([]byte{}, []byte{}, byte(1), true)

	sandboxes := map[netip.Addr]*policy.Policy{}
	for i, p := range []api.NetworkPolicy{
		{},
		{Allow: []string{"*.w.test", "192.0.2.0/24"}},
		{Deny: []string{"*.w.test", "a.example"}},
		{None: true},
	} {
		pol, err := policy.Parse(p)
		if err != nil {
			f.Fatal(err)
		}
		sandboxes[netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})] = &pol
	}
	// One server for every input; these are the current input's.
	var (
		pins   []pinCall
		upWire []byte
	)
	s, err := newServer(Config{
		Upstreams: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53")}, // never dialled
		Lookup: func(src netip.Addr) (Client, bool) {
			p, ok := sandboxes[src]
			return Client{Policy: p, Pin: func(v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error {
				pins = append(pins, pinCall{v, addrs, ttl})
				return nil
			}}, ok
		},
		QPS: 1 << 20,
	})
	if err != nil {
		f.Fatal(err)
	}
	defer s.cancel()
	s.exchange = func(_ context.Context, q *dns.Msg, _ bool) (*dns.Msg, error) {
		r := new(dns.Msg)
		if err := r.Unpack(upWire); err != nil {
			return nil, err
		}
		r.Id, r.Response, r.Question = q.Id, true, q.Question
		if err := usable(q, r); err != nil {
			return nil, err
		}
		return r, nil
	}

	f.Fuzz(func(t *testing.T, wire, up []byte, srcByte byte, tcp bool) {
		src := netip.AddrFrom4([4]byte{127, 0, 0, srcByte % 5})
		pins, upWire = nil, up
		resp := s.handle(context.Background(), src, wire, tcp)

		for _, p := range pins {
			if p.v != policy.Allowed && p.v != policy.Denied || len(p.addrs) == 0 || p.ttl < minPinTTL || p.ttl > maxPinTTL {
				t.Errorf("pin %v", p)
			}
			for _, a := range p.addrs {
				if !a.Is4() {
					t.Errorf("pin of %v", a)
				}
			}
		}
		if sandboxes[src] != nil && sandboxes[src].None && len(pins) > 0 {
			t.Errorf("pins under none: %v", pins)
		}
		if resp == nil {
			return
		}
		var r dns.Msg
		if err := r.Unpack(resp); err != nil {
			t.Fatalf("the answer does not unpack: %v", err)
		}
		if !r.Response || len(wire) < 2 || r.Id != uint16(wire[0])<<8|uint16(wire[1]) {
			t.Errorf("answer header %+v", r.MsgHdr)
		}
		limit := dns.MaxMsgSize
		if !tcp {
			limit = dns.MinMsgSize
			var req dns.Msg
			if req.Unpack(wire) == nil && req.IsEdns0() != nil {
				limit = ednsSize
			}
		}
		if len(resp) > limit {
			t.Errorf("an answer of %d bytes, the limit is %d", len(resp), limit)
		}
		if len(r.Answer) > 0 && sandboxes[src] != nil && sandboxes[src].None {
			t.Errorf("an answer with records under none: %v", &r)
		}
	})
}
