package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"warren/internal/archive/archivetest"
)

type entry struct {
	name string
	body string
}

func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(r *Reader) (names []string, err error) {
	for {
		h, err := r.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		names = append(names, h.Name)
		if _, err := io.Copy(io.Discard, r); err != nil {
			return names, err
		}
	}
}

func TestReader(t *testing.T) {
	three := tarOf(t, entry{"a", "aaaa"}, entry{"b", "bbbb"}, entry{"c", "cccc"})
	tests := []struct {
		name    string
		archive []byte
		lim     Limits
		want    error
		read    int // entries read before the end or the error
	}{
		{"within", three, Limits{Bytes: 12, Entries: 3}, nil, 3},
		{"too many entries", three, Limits{Bytes: 100, Entries: 2}, ErrEntries, 2},
		{"too many bytes", three, Limits{Bytes: 11, Entries: 10}, ErrBytes, 2},
		{"stream too long", three, Limits{Bytes: 100, Entries: 10, Stream: 2048}, ErrStream, 2},
		{"sparse refused", archivetest.SparseTar(1 << 40), Limits{Bytes: 1 << 50, Entries: 10}, ErrSparse, 0},
		{"sparse charged what it expands to", archivetest.SparseTar(1 << 40), Limits{Bytes: 1 << 30, Entries: 10, Sparse: true}, ErrBytes, 0},
		{"sparse within", archivetest.SparseTar(4096), Limits{Bytes: 4096, Entries: 10, Sparse: true}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tt.archive), tt.lim)
			names, err := readAll(r)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if len(names) != tt.read {
				t.Errorf("read %d entries (%v), want %d", len(names), names, tt.read)
			}
			if r.Produced() > tt.lim.Bytes {
				t.Errorf("produced %d bytes, limit %d", r.Produced(), tt.lim.Bytes)
			}
		})
	}
}

// TestSparseExpands pins what the sparse fixture is: the standard reader
// expands its few hundred bytes to the size it declares, so the Reader's
// refusal above is of a real bomb.
func TestSparseExpands(t *testing.T) {
	a := archivetest.SparseTar(1 << 20)
	tr := tar.NewReader(bytes.NewReader(a))
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, tr)
	if err != nil || n != 1<<20 || h.Size != 1<<20 {
		t.Fatalf("archive of %d bytes: entry %q of size %d read %d bytes (%v), want 1 MiB", len(a), h.Name, h.Size, n, err)
	}
}

func TestDecompressBomb(t *testing.T) {
	// A gzip that expands to 64 MiB of zero blocks, a tar that never ends
	// in the standard reader's eyes until its stream runs dry.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	big := tarOf(t, entry{"a", "x"})
	zw.Write(big[:1024])
	zw.Write(make([]byte, 64<<20))
	zw.Close()
	for _, in := range [][]byte{z.Bytes(), tarOf(t, entry{"a", "x"})} {
		d, err := Decompress(bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(d, Limits{Bytes: 1 << 20, Entries: 10})
		if _, err := readAll(r); err != nil {
			t.Fatal(err)
		}
		if r.Consumed() > 2<<20 {
			t.Errorf("read %d bytes of the stream", r.Consumed())
		}
	}
}

func TestStreamOfHeaders(t *testing.T) {
	// Endless PAX headers with no entry: the stream's bound ends it.
	var a []byte
	recs := archivetest.PAXRecord("comment", strings.Repeat("c", 400))
	for len(a) < 4<<20 {
		a = append(a, archivetest.RawHeader("PaxHeaders/x", 'x', int64(len(recs)))...)
		a = append(a, archivetest.Padded([]byte(recs))...)
	}
	r := NewReader(bytes.NewReader(a), Limits{Bytes: 1 << 10, Entries: 4})
	if _, err := readAll(r); !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 16 << 30: "16 GiB", 1000: "1000 bytes", 3 << 10: "3 KiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestSeekingSkips: over a file, contents the caller does not read are
// skipped by seeking, and Limits.Stream counts only what is read.
func TestSeekingSkips(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	f, err := os.CreateTemp(t.TempDir(), "a.tar")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(tarOf(t, entry{"a", big}, entry{"b", big}))
	f.Seek(0, io.SeekStart)
	r := NewReader(f, Limits{Bytes: 2 << 20, Entries: 2, Stream: 16 << 10})
	for range 2 {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after two entries: %v, want EOF", err)
	}
	if r.Produced() != 0 {
		t.Errorf("produced %d bytes of contents nobody read", r.Produced())
	}
}
