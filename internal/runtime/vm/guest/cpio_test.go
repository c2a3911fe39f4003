package guest

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// cpioEntry is one entry read back by readCPIO.
type cpioEntry struct {
	name         string
	mode         uint32
	nlink        uint32
	rmajor       uint32
	rminor       uint32
	data         string
	ino          uint32
	headerOffset int
}

// readCPIO parses a newc archive strictly: magic, hex fields, NUL-terminated
// names, 4-byte alignment of names and data, a trailer, nothing after it.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	for {
		if off%4 != 0 {
			t.Fatalf("entry at %d is not 4-byte aligned", off)
		}
		if len(b)-off < 110 {
			t.Fatalf("truncated header at %d", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		e := cpioEntry{ino: field(0), mode: field(1), nlink: field(4), rmajor: field(9), rminor: field(10), headerOffset: off}
		if field(2) != 0 || field(3) != 0 || field(5) != 0 || field(12) != 0 {
			t.Errorf("uid/gid/mtime/check not zero at %d", off)
		}
		size, namesize := int(field(6)), int(field(11))
		p := off + 110
		name := b[p : p+namesize]
		if name[namesize-1] != 0 {
			t.Fatalf("name at %d not NUL-terminated", p)
		}
		e.name = string(name[:namesize-1])
		p += namesize
		for ; p%4 != 0; p++ {
			if b[p] != 0 {
				t.Fatalf("non-NUL name padding at %d", p)
			}
		}
		e.data = string(b[p : p+size])
		p += size
		for ; p%4 != 0; p++ {
			if b[p] != 0 {
				t.Fatalf("non-NUL data padding at %d", p)
			}
		}
		off = p
		if e.name == cpioTrailer {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestCPIOWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	steps := []error{
		c.Dir("dev", 0o755),
		c.CharDev("dev/console", 0o600, 5, 1),
		c.File("init", 0o755, 5, strings.NewReader("hello")),
		c.File("empty", 0o644, 0, nil),
		c.Dir("lib", 0o755),
		c.File("lib/x", 0o644, 3, strings.NewReader("abcdef")), // only size bytes are taken
		c.Symlink("lib/link", "x"),
		c.Close(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	got := readCPIO(t, buf.Bytes())
	want := []cpioEntry{
		{name: "dev", mode: 0o040755, nlink: 2},
		{name: "dev/console", mode: 0o020600, nlink: 1, rmajor: 5, rminor: 1},
		{name: "init", mode: 0o100755, nlink: 1, data: "hello"},
		{name: "empty", mode: 0o100644, nlink: 1},
		{name: "lib", mode: 0o040755, nlink: 2},
		{name: "lib/x", mode: 0o100644, nlink: 1, data: "abc"},
		{name: "lib/link", mode: 0o120777, nlink: 1, data: "x"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	inos := make(map[uint32]bool)
	for i := range want {
		g, w := got[i], want[i]
		if g.name != w.name || g.mode != w.mode || g.nlink != w.nlink || g.rmajor != w.rmajor || g.rminor != w.rminor || g.data != w.data {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
		if g.ino == 0 || inos[g.ino] {
			t.Errorf("entry %s: inode %d zero or reused", g.name, g.ino)
		}
		inos[g.ino] = true
	}

	// GNU cpio, when installed, agrees on the listing.
	if _, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command("cpio", "-t", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cpio -t: %v", err)
		}
		var names []string
		for _, e := range want {
			names = append(names, e.name)
		}
		if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(names, " ") {
			t.Errorf("cpio -t: %v, want %v", got, names)
		}
	}
}

func TestCPIOWriterErrors(t *testing.T) {
	for _, name := range []string{"", "/abs", "nul\x00"} {
		if err := newCPIOWriter(io.Discard).Dir(name, 0o755); err == nil {
			t.Errorf("Dir(%q): no error", name)
		}
	}
	// A short source is an error, not a corrupt archive.
	if err := newCPIOWriter(io.Discard).File("f", 0o644, 10, strings.NewReader("short")); err == nil {
		t.Error("File with a short reader: no error")
	}
	// The first write error sticks.
	c := newCPIOWriter(failWriter{})
	if err := c.Dir("d", 0o755); err == nil {
		t.Fatal("write error not reported")
	}
	if err := c.Close(); err == nil {
		t.Error("error after a failed write not sticky")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }
