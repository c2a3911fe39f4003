package addrclass

import (
	"net/netip"
	"testing"
)

func TestInternal(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"10.1.2.3", true},
		{"169.254.169.254", true},
		{"100.64.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"::1", true},
		{"fe80::1", true},
		{"fd00::1", true},
		{"8.8.8.8", false},
		{"2606:4700::1111", false},
		// Issue 35, row 10: NAT64 and 6to4 forms of loopback and private
		// addresses passed the registry filter.
		{"64:ff9b::7f00:1", true},
		{"64:ff9b::a9fe:a9fe", true},
		{"64:ff9b::a00:1", true},
		{"64:ff9b:1::a00:1", true},
		{"64:ff9b:1:ffff::808:808", true},
		{"2002:7f00:1::1", true},
		{"2002:a9fe:a9fe::", true},
		{"2002:c0a8:101::1", true},
		{"::127.0.0.1", true},
		{"::10.0.0.1", true},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", true},
		// The same forms of public addresses stay public.
		{"64:ff9b::808:808", false},
		{"2002:808:808::1", false},
	} {
		if got := Internal(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Internal(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
