package resolver

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestLocalOnly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		qtype uint16
		local bool
	}{
		{".", dns.TypeNS, false},
		{"com.", dns.TypeDS, false},
		{"com.", dns.TypeA, true},
		{"wpad.", dns.TypeA, true},
		{"LOCALHOST.", dns.TypeA, true},
		{"a.localhost.", dns.TypeA, true},
		{"notlocalhost.", dns.TypeSOA, false},
		{"notlocal.example.", dns.TypeA, false},
		{"host.home.arpa.", dns.TypeA, true},
		{"x.onion.", dns.TypeA, true},
		{"_dns.resolver.arpa.", dns.TypeSVCB, true},
		{"example.com.", dns.TypeA, false},
		{"4.3.2.1.in-addr.arpa.", dns.TypePTR, false},
		{"1.0.0.127.in-addr.arpa.", dns.TypePTR, true},
		{"9.113.64.100.in-addr.arpa.", dns.TypePTR, true}, // shared address space
		{"1.1.168.192.in-addr.arpa.", dns.TypePTR, true},
		{"1.0.16.172.in-addr.arpa.", dns.TypePTR, true},
		{"1.0.32.172.in-addr.arpa.", dns.TypePTR, false},
		{"in-addr.arpa.", dns.TypeNS, true},
		{"3.2.1.in-addr.arpa.", dns.TypePTR, true}, // partial
		{"04.3.2.1.in-addr.arpa.", dns.TypePTR, false},
		{"0004.3.2.1.in-addr.arpa.", dns.TypePTR, true},
		{"256.3.2.1.in-addr.arpa.", dns.TypePTR, true},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", dns.TypePTR, false},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR, true}, // ULA
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa.", dns.TypePTR, true}, // link-local
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.ip6.arpa.", dns.TypePTR, true},         // partial
		{"x.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa.", dns.TypePTR, true},
	} {
		if got := localOnly(tc.name, tc.qtype) != ""; got != tc.local {
			t.Errorf("localOnly(%s %s) = %v, want %v", tc.name, dns.TypeToString[tc.qtype], got, tc.local)
		}
	}
}

func TestReverse(t *testing.T) {
	if a, ok := reverse4("4.3.2.1"); !ok || a != netip.MustParseAddr("1.2.3.4") {
		t.Errorf("reverse4 = %v %v", a, ok)
	}
	name, _ := dns.ReverseAddr("2001:db8::abcd")
	labels, _ := cutZone(name[:len(name)-1], "ip6.arpa")
	if a, ok := reverse6(labels); !ok || a != netip.MustParseAddr("2001:db8::abcd") {
		t.Errorf("reverse6(%s) = %v %v", labels, a, ok)
	}
}

func TestPinSet(t *testing.T) {
	rrs := func(s ...string) []dns.RR {
		var out []dns.RR
		for _, z := range s {
			rr, err := dns.NewRR(z)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rr)
		}
		return out
	}
	for _, tc := range []struct {
		what   string
		answer []dns.RR
		addrs  []netip.Addr
		ttl    time.Duration
	}{
		{"none", nil, nil, 0},
		{"direct", rrs("A.example. 60 A 192.0.2.1", "a.example. 90 A 192.0.2.1"), addrs("192.0.2.1"), 60 * time.Second},
		{"chain", rrs("a.example. 3600 CNAME b.example.", "b.example. 7200 CNAME c.example.", "c.example. 7200 A 192.0.2.2"), addrs("192.0.2.2"), time.Hour},
		{"chain out of order", rrs("c.example. 40 A 192.0.2.2", "b.example. 50 CNAME c.example.", "a.example. 60 CNAME b.example."), addrs("192.0.2.2"), 40 * time.Second},
		{"records off the chain are not pinned", rrs("a.example. 60 A 192.0.2.1", "evil.example. 60 A 10.0.0.1", "x.example. 60 CNAME a.example."), addrs("192.0.2.1"), 60 * time.Second},
		{"a CNAME loop ends", rrs("a.example. 60 CNAME b.example.", "b.example. 60 CNAME a.example."), nil, 0},
		{"zero TTL", rrs("a.example. 0 A 192.0.2.1"), addrs("192.0.2.1"), minPinTTL},
	} {
		got, ttl := pinSet("a.example.", tc.answer)
		if !slices.Equal(got, tc.addrs) || ttl != tc.ttl {
			t.Errorf("%s: %v for %v, want %v for %v", tc.what, got, ttl, tc.addrs, tc.ttl)
		}
	}
}
