package unixmode

import (
	"io/fs"
	"testing"
)

func TestConvert(t *testing.T) {
	for _, tt := range []struct {
		mode fs.FileMode
		unix uint32
	}{
		{0o644, 0o644},
		{fs.ModeSetuid | 0o755, 0o4755},
		{fs.ModeSetgid | 0o750, 0o2750},
		{fs.ModeSticky | 0o777, 0o1777},
		{fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky, 0o7000},
	} {
		if got := FromFileMode(tt.mode); got != tt.unix {
			t.Errorf("FromFileMode(%v) = %#o, want %#o", tt.mode, got, tt.unix)
		}
		if got := ToFileMode(tt.unix); got != tt.mode {
			t.Errorf("ToFileMode(%#o) = %v, want %v", tt.unix, got, tt.mode)
		}
	}
	// The type is not a chmod bit.
	if got := FromFileMode(fs.ModeDir | fs.ModeSticky | 0o777); got != 0o1777 {
		t.Errorf("FromFileMode(dir) = %#o, want 0o1777", got)
	}
	if got := ToFileMode(0o170644); got != 0o644 {
		t.Errorf("ToFileMode(0o170644) = %v, want the permission bits only", got)
	}
}

// FuzzRoundTrip checks that the conversions are inverse on the twelve chmod
// bits of any mode.
func FuzzRoundTrip(f *testing.F) {
	for _, m := range []fs.FileMode{
		0o644, fs.ModeDir | fs.ModeSticky | 0o776, fs.ModeSetuid | fs.ModeSetgid | 0o644,
		fs.ModeDir | fs.ModeSymlink | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky,
		fs.FileMode(1<<32 - 1), 0,
	} {
		f.Add(uint32(m))
	}
	const chmodBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	f.Fuzz(func(t *testing.T, u uint32) {
		if got := FromFileMode(ToFileMode(u)); got != u&0o7777 {
			t.Fatalf("FromFileMode(ToFileMode(%#o)) = %#o, want %#o", u, got, u&0o7777)
		}
		m := fs.FileMode(u)
		if got := ToFileMode(FromFileMode(m)); got != m&chmodBits {
			t.Fatalf("ToFileMode(FromFileMode(%v)) = %v, want %v", m, got, m&chmodBits)
		}
	})
}
