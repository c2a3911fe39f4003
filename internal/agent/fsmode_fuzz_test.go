//go:build linux

package agent

import (
	"io/fs"
	"testing"
)

// FuzzFileMode checks permString on arbitrary modes: it always renders ten
// characters that read back, as ls -l is read, to the mode's type and chmod
// bits.
func FuzzFileMode(f *testing.F) {
	for _, m := range []fs.FileMode{
		0o644,
		fs.ModeDir | 0o755,
		fs.ModeDir | fs.ModeSticky | 0o777,
		fs.ModeDir | fs.ModeSticky | 0o776,
		fs.ModeSymlink | 0o777,
		fs.ModeSetuid | 0o755,
		fs.ModeSetuid | fs.ModeSetgid | 0o644,
		fs.ModeNamedPipe | 0o600,
		fs.ModeSocket | 0o777,
		fs.ModeDevice | fs.ModeCharDevice | 0o666,
		fs.ModeDevice | 0o660,
		fs.ModeDir | fs.ModeSymlink | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky,
		fs.FileMode(1<<32 - 1),
		0,
	} {
		f.Add(uint32(m))
	}
	const chmodBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	f.Fuzz(func(t *testing.T, u uint32) {
		m := fs.FileMode(u)
		s := permString(m)
		typ, bits, ok := readPermString(s)
		if !ok {
			t.Fatalf("permString(%v) = %q: not an ls -l mode", m, s)
		}
		if bits != m&chmodBits {
			t.Fatalf("permString(%v) = %q reads back as %v, want %v", m, s, bits, m&chmodBits)
		}
		var wantTyp byte
		switch {
		case m.IsDir():
			wantTyp = 'd'
		case m&fs.ModeSymlink != 0:
			wantTyp = 'l'
		case m&fs.ModeNamedPipe != 0:
			wantTyp = 'p'
		case m&fs.ModeSocket != 0:
			wantTyp = 's'
		case m&fs.ModeCharDevice != 0:
			wantTyp = 'c'
		case m&fs.ModeDevice != 0:
			wantTyp = 'b'
		default:
			wantTyp = '-'
		}
		if typ != wantTyp {
			t.Fatalf("permString(%v) = %q: type %q, want %q", m, s, typ, wantTyp)
		}
	})
}

// readPermString reads an ls -l mode string ("drwxr-sr-T") back into its
// type letter and chmod bits.
func readPermString(s string) (typ byte, m fs.FileMode, ok bool) {
	if len(s) != 10 {
		return 0, 0, false
	}
	typ = s[0]
	switch typ {
	case '-', 'd', 'l', 'p', 's', 'c', 'b':
	default:
		return 0, 0, false
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		c := s[1+i]
		bit := fs.FileMode(1) << uint(8-i)
		var special fs.FileMode
		switch i {
		case 2:
			special = fs.ModeSetuid
		case 5:
			special = fs.ModeSetgid
		case 8:
			special = fs.ModeSticky
		}
		lower, upper := byte('s'), byte('S')
		if i == 8 {
			lower, upper = 't', 'T'
		}
		switch {
		case c == rwx[i]:
			m |= bit
		case c == '-':
		case special != 0 && c == lower:
			m |= bit | special
		case special != 0 && c == upper:
			m |= special
		default:
			return 0, 0, false
		}
	}
	return typ, m, true
}
