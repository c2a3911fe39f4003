package ident

import "testing"

func TestNewIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := New("sn-")
		if !Valid(id, "sn-") {
			t.Fatalf("New made %q, which Valid refuses", id)
		}
		if seen[id] {
			t.Fatalf("New repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"sn-abcdefghijklmnopqrst", true},
		{"sn-234567abcdefghijklmn", true},
		{"sb-abcdefghijklmnopqrst", false},   // other prefix
		{"sn-abcdefghijklmnopqrs", false},    // short
		{"sn-abcdefghijklmnopqrstu", false},  // long
		{"sn-ABCDEFGHIJKLMNOPQRST", false},   // upper case
		{"sn-abcdefghijklmnopqrs1", false},   // not base32
		{"sn-../../../../etc/passwd", false}, // traversal
		{"", false},
	} {
		if got := Valid(tc.id, "sn-"); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
