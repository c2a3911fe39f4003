package tenanttpl

import (
	"context"
	"strings"
	"testing"
)

// TestRegistryAddrRefusesEmbeddedInternal replays issue 35, row 10: the
// registry filter took NAT64 and 6to4 forms of loopback and private
// addresses for public ones.
func TestRegistryAddrRefusesEmbeddedInternal(t *testing.T) {
	tt := &Templates{}
	for _, addr := range []string{
		"127.0.0.1:443", "[::ffff:10.0.0.1]:443",
		"[64:ff9b::7f00:1]:443", "[64:ff9b::a9fe:a9fe]:80", "[64:ff9b:1::a00:1]:443",
		"[2002:7f00:1::1]:443", "[2002:c0a8:101::]:5000", "[::127.0.0.1]:443",
	} {
		if _, err := tt.registryAddr(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "not a public address") {
			t.Errorf("registry at %s: %v, want refused", addr, err)
		}
	}
	if got, err := tt.registryAddr(context.Background(), "[64:ff9b::808:808]:443"); err != nil || got != "[64:ff9b::808:808]:443" {
		t.Errorf("a public address through NAT64: %q, %v", got, err)
	}
}
