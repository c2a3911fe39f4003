package firewall

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"warren/api"
	"warren/internal/network/policy"
)

func TestIntervals(t *testing.T) {
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	type elem struct {
		key string
		end bool
	}
	for _, tc := range []struct {
		name string
		in   []netip.Prefix
		want []elem
	}{
		{"empty", nil, nil},
		{"one", pfx("10.0.0.0/8"), []elem{{"10.0.0.0", false}, {"11.0.0.0", true}}},
		{"an address", pfx("192.0.2.7/32"), []elem{{"192.0.2.7", false}, {"192.0.2.8", true}}},
		{"overlapping and adjacent merge, in order",
			pfx("11.0.0.0/8", "10.1.0.0/16", "10.0.0.0/8", "172.16.0.0/12"),
			[]elem{{"10.0.0.0", false}, {"12.0.0.0", true}, {"172.16.0.0", false}, {"172.32.0.0", true}}},
		{"the top has no end", pfx("240.0.0.0/4", "0.0.0.0/8"),
			[]elem{{"0.0.0.0", false}, {"1.0.0.0", true}, {"240.0.0.0", false}}},
		{"everything", pfx("0.0.0.0/0", "10.0.0.0/8"), []elem{{"0.0.0.0", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := intervals(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var want []nftables.SetElement
			for _, e := range tc.want {
				want = append(want, nftables.SetElement{Key: netip.MustParseAddr(e.key).AsSlice(), IntervalEnd: e.end})
			}
			if len(got) != len(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			for i := range got {
				if !bytes.Equal(got[i].Key, want[i].Key) || got[i].IntervalEnd != want[i].IntervalEnd {
					t.Fatalf("element %d: got %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
	if _, err := intervals(pfx("fd00::/8")); err == nil {
		t.Error("an IPv6 network is accepted")
	}
}

func TestPinFingerprint(t *testing.T) {
	fp := func(p api.NetworkPolicy) []byte {
		t.Helper()
		pol, err := policy.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		return pinFingerprint(pol)
	}
	base := fp(api.NetworkPolicy{Allow: []string{"a.example", "*.b.example", "10.0.0.0/8"}, Deny: []string{"c.example"}})
	same := []api.NetworkPolicy{
		{Allow: []string{"*.b.example", "a.example"}, Deny: []string{"c.example"}},
		{Allow: []string{"a.example", "*.b.example", "192.0.2.0/24"}, Deny: []string{"c.example", "203.0.113.9"}},
	}
	for _, p := range same {
		if !bytes.Equal(fp(p), base) {
			t.Errorf("%+v: pins would be flushed, though the names are the same", p)
		}
	}
	changed := []api.NetworkPolicy{
		{Allow: []string{"a.example", "*.b.example"}},
		{Allow: []string{"a.example"}, Deny: []string{"c.example"}},
		{Allow: []string{"a.example", "b.example"}, Deny: []string{"c.example"}},
		{Allow: []string{"a.example", "*.b.example"}, Deny: []string{"c.example"}, None: true},
		{Allow: []string{"c.example", "*.b.example"}, Deny: []string{"a.example"}},
	}
	for _, p := range changed {
		if bytes.Equal(fp(p), base) {
			t.Errorf("%+v: pins would be kept, though the names changed", p)
		}
	}
}
