package blob

import (
	"errors"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestValidKey(t *testing.T) {
	tests := []struct {
		key  string
		want string // a part of the error message, "" when valid
	}{
		{"a", ""},
		{"snap/0123/chunk-00.bin", ""},
		{".hidden", ""},
		{"a/..b/c.", ""},
		{"a_b-c.d", ""},
		{"...", ""},
		{strings.Repeat("k", MaxKeyLen), ""},
		{"", "empty"},
		{strings.Repeat("k", MaxKeyLen+1), "513 bytes long"},
		{"A", "byte 0x41 at offset 0"},
		{"a b", "byte 0x20 at offset 1"},
		{"a\x00", "byte 0x0 at offset 1"},
		{"é", "byte 0xc3 at offset 0"},
		{"a\\b", "byte 0x5c"},
		{"/a", "starts with '/'"},
		{"/", "starts with '/'"},
		{"a/", "ends with '/'"},
		{"a//b", "empty segment"},
		{".", `"." segment`},
		{"..", `".." segment`},
		{"a/./b", `"." segment`},
		{"a/../b", `".." segment`},
		{"a/..", `".." segment`},
	}
	for _, tt := range tests {
		err := ValidKey(tt.key)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidKey(%q) = %v, want nil", tt.key, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidKey(%q) = %v, want an ErrInvalidKey saying %q", tt.key, err, tt.want)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"a", true},
		{"a/", true},
		{"a/b/", true},
		{"a/.", true}, // may grow into "a/.x"
		{"a/..", true},
		{".", true},
		{"a/./", false},
		{"a/../", false},
		{"./", false},
		{"/", false},
		{"/a", false},
		{"a//", false},
		{"A/", false},
		{strings.Repeat("p", MaxKeyLen+1), false},
	}
	for _, tt := range tests {
		err := ValidPrefix(tt.prefix)
		if (err == nil) != tt.ok {
			t.Errorf("ValidPrefix(%q) = %v, want ok=%v", tt.prefix, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidPrefix(%q) = %v, want it to wrap ErrInvalidKey", tt.prefix, err)
		}
	}
}

// keyPattern is an independent statement of the key grammar for the fuzz
// target to check ValidKey against.
var keyPattern = regexp.MustCompile(`^[a-z0-9._-]+(/[a-z0-9._-]+)*$`)

func FuzzValidKey(f *testing.F) {
	for _, seed := range []string{
		"", "a", "a/b", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "..a",
		"snap/0123/chunk-00.bin", "A", "a b", "a\x00b", "é", strings.Repeat("x", MaxKeyLen+1),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidKey(key)
		segments := strings.Split(key, "/")
		want := len(key) <= MaxKeyLen && keyPattern.MatchString(key) &&
			!slices.Contains(segments, ".") && !slices.Contains(segments, "..")
		if (err == nil) != want {
			t.Fatalf("ValidKey(%q) = %v, want valid=%v", key, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ValidKey(%q) = %v, does not wrap ErrInvalidKey", key, err)
			}
			return
		}
		// A valid key is a clean local relative path on any OS...
		if path.Clean(key) != key || !filepath.IsLocal(key) {
			t.Fatalf("valid key %q is not a clean local path", key)
		}
		// ...and each of its beginnings is a valid List prefix.
		for i := range len(key) + 1 {
			if err := ValidPrefix(key[:i]); err != nil {
				t.Fatalf("ValidPrefix(%q), a beginning of valid key %q = %v", key[:i], key, err)
			}
		}
	})
}
