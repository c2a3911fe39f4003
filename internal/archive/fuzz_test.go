package archive

import (
	"bytes"
	"io"
	"testing"

	"warren/internal/archive/archivetest"
)

// FuzzReader feeds the Reader any bytes: whatever they are, it never
// produces more than its Bytes, returns more than its Entries, or reads
// more of its input than its Stream.
func FuzzReader(f *testing.F) {
	f.Add(tarOf(f, entry{"a", "aaaa"}, entry{"b/c", "bb"}), false)
	f.Add(archivetest.SparseTar(1<<30), true)
	f.Add(archivetest.SparseTar(1<<30), false)
	f.Add(archivetest.RawHeader("x", 'S', 0), true)
	f.Fuzz(func(t *testing.T, b []byte, sparse bool) {
		lim := Limits{Bytes: 64 << 10, Entries: 16, Sparse: sparse}
		in := bytes.NewReader(b)
		r := NewReader(in, lim)
		entries := 0
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			entries++
			if _, err := io.Copy(io.Discard, r); err != nil {
				break
			}
		}
		if r.Produced() > lim.Bytes {
			t.Fatalf("produced %d bytes, limit %d", r.Produced(), lim.Bytes)
		}
		if entries > lim.Entries {
			t.Fatalf("%d entries, limit %d", entries, lim.Entries)
		}
		if read := int64(len(b) - in.Len()); read > r.lim.Stream+1 {
			t.Fatalf("read %d bytes of the input, limit %d", read, r.lim.Stream)
		}
	})
}
