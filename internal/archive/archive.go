// Package archive reads tar archives that come from tenants (E2B COPY
// uploads, build contexts, OCI layers and image archives) within a budget.
// It is the one reader warren passes untrusted tar bytes through: what an
// archive may make the node read, expand and hold is bounded here, by
// documented numbers, never by an accident of memory.
//
// A Reader counts three things against its Limits:
//   - the bytes the entries' contents produce: each entry's size is charged
//     before Next returns it, so a caller never starts a file the budget
//     cannot hold. A sparse entry is charged what it expands to, never what
//     it occupies in the archive, and is refused unless Limits.Sparse;
//   - the entries (every header Next returns);
//   - the bytes read from the underlying reader, after any decompression:
//     headers, PAX records, padding and contents. A gzip bomb, or an
//     archive of endless PAX headers, stops at this bound.
//
// It is not an extractor: callers decide what an entry becomes (a file
// under an os.Root, an entry of another tar, a file in an image), and
// never turn an entry's name into a host path without their own checks.
package archive

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits bound what a Reader reads. Bytes and Entries must be set.
type Limits struct {
	// Bytes bounds the entries' contents, summed, as they expand.
	Bytes int64
	// Entries bounds how many entries Next returns.
	Entries int
	// Stream bounds the bytes read from the underlying reader (after
	// decompression); zero takes Bytes plus StreamOverhead for each entry.
	Stream int64
	// Sparse admits sparse entries (charged what they expand to); without
	// it they are refused with ErrSparse.
	Sparse bool
}

// StreamOverhead is what the default Limits.Stream allows each entry
// beyond its contents: its header blocks, PAX records and padding.
const StreamOverhead = 8 << 10

// ErrLimit is matched (errors.Is) by every error that says a limit was
// passed; the error's text names the limit and is safe to show a tenant.
// Each also matches the one of ErrEntries, ErrBytes and ErrStream that
// says which.
var ErrLimit = errors.New("archive: over a limit")

// The limits, one each: Limits.Entries, Limits.Bytes, Limits.Stream.
var (
	ErrEntries = errors.New("archive: too many entries")
	ErrBytes   = errors.New("archive: contents too large")
	ErrStream  = errors.New("archive: stream too long")
)

// ErrSparse is matched by the error for a sparse entry that Limits did not
// admit.
var ErrSparse = errors.New("archive: sparse entries are not accepted")

// limitError is an ErrLimit that names the limit.
type limitError struct {
	kind error // ErrEntries, ErrBytes or ErrStream
	what string
}

func (e *limitError) Error() string        { return "archive: " + e.what }
func (e *limitError) Is(target error) bool { return target == ErrLimit || target == e.kind }

// Reader is a tar.Reader within Limits. It is not safe for concurrent use.
type Reader struct {
	lim      Limits
	in       *countingReader
	tr       *tar.Reader
	entries  int
	charged  int64 // sizes of the entries returned so far
	produced int64 // content bytes read so far
}

// NewReader reads the tar stream r within lim. If r is an io.Seeker (a
// file), the contents that the caller does not read are skipped by
// seeking, never read: Limits.Stream counts what is read.
func NewReader(r io.Reader, lim Limits) *Reader {
	if lim.Stream <= 0 {
		lim.Stream = lim.Bytes + int64(lim.Entries)*StreamOverhead
	}
	in := &countingReader{r: r, left: lim.Stream, limit: lim.Stream}
	if s, ok := r.(io.Seeker); ok {
		return &Reader{lim: lim, in: in, tr: tar.NewReader(seekingReader{in, s})}
	}
	return &Reader{lim: lim, in: in, tr: tar.NewReader(in)}
}

// seekingReader is a countingReader whose source seeks.
type seekingReader struct {
	*countingReader
	s io.Seeker
}

func (r seekingReader) Seek(offset int64, whence int) (int64, error) { return r.s.Seek(offset, whence) }

// Next advances to the next entry, as tar.Reader.Next does, and charges
// its size. It returns io.EOF at the archive's end, an error matching
// ErrLimit past a limit and ErrSparse for a sparse entry not admitted;
// after an error the Reader is done.
func (r *Reader) Next() (*tar.Header, error) {
	h, err := r.tr.Next()
	if err != nil {
		if r.in.over {
			return nil, r.in.err()
		}
		return nil, err
	}
	if r.entries >= r.lim.Entries {
		return nil, &limitError{ErrEntries, fmt.Sprintf("more than %d entries", r.lim.Entries)}
	}
	r.entries++
	if isSparse(h) && !r.lim.Sparse {
		return nil, fmt.Errorf("%w (%q)", ErrSparse, h.Name)
	}
	if h.Size < 0 || h.Size > r.lim.Bytes-r.charged {
		return nil, &limitError{ErrBytes, fmt.Sprintf("%q: contents beyond %s in all", h.Name, Size(r.lim.Bytes))}
	}
	r.charged += h.Size
	return h, nil
}

// Read reads the current entry's contents.
func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.tr.Read(p)
	r.produced += int64(n)
	if err != nil && err != io.EOF && r.in.over {
		err = r.in.err()
	}
	return n, err
}

// Produced is how many content bytes have been read, all entries together.
func (r *Reader) Produced() int64 { return r.produced }

// Consumed is how many bytes of the underlying stream have been read:
// headers, padding and contents (skipped contents of a seeking source
// aside), against Limits.Stream.
func (r *Reader) Consumed() int64 { return r.in.limit - r.in.left }

// isSparse says whether h is a sparse file in any of tar's encodings: old
// GNU ('S'), or PAX records of GNU's sparse formats 0.0, 0.1 and 1.0.
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// countingReader reads at most limit bytes of r and remembers passing it.
type countingReader struct {
	r     io.Reader
	left  int64
	limit int64
	over  bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a stream that ends here from one that goes on.
		var b [1]byte
		if n, _ := io.ReadFull(c.r, b[:]); n > 0 {
			c.over = true
			return 0, c.err()
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *countingReader) err() error {
	return &limitError{ErrStream, fmt.Sprintf("the archive is longer than %s", Size(c.limit))}
}

// Decompress returns r's bytes, gunzipped if they start with gzip's magic.
// The gzip stream is checked as it is read (its CRC and length at its
// end); what it expands to is bounded by the Reader's Limits.Stream.
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("archive: gzip: %w", err)
		}
		return zr, nil
	}
	return br, nil
}

// Size prints n bytes in the largest binary unit that divides it, as
// limits are written in docs ("64 MiB").
func Size(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
