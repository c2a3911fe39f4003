package layer

import (
	"bytes"
	"context"
	"fmt"
	"os"
)

// DiffStats says what Changed had to do. Size = Shared + Holes + Compared.
// A diff of reflink clones reads little (Shared is most of Size); a diff of
// full copies (no reflink) compares every byte with data (Shared is 0).
type DiffStats struct {
	Size     int64 // the child's size
	Shared   int64 // skipped: both files map these bytes to the same physical blocks
	Holes    int64 // skipped: neither file has data here
	Compared int64 // compared block by block
	Read     int64 // read from both files to compare them
	Changed  int64 // in the returned ranges, zero ranges included
}

// mapping is one run of a file that holds data, as the file system maps it.
type mapping struct {
	off, len int64
	// phys is the run's physical address, meaningful only if shareable:
	// two shareable runs at the same address hold the same bytes.
	phys      int64
	shareable bool
}

func (m mapping) end() int64 { return m.off + m.len }

// segKind is what Changed does with a segment of the disk.
type segKind int

const (
	segCompare segKind = iota // read and compare
	segShared                 // skip: same physical blocks in both
	segHoles                  // skip: no data in either
)

// segment is a run of the child's disk and what to do with it. For
// segCompare, readChild and readParent are false where that file is known
// to read as zeros.
type segment struct {
	off, end              int64
	kind                  segKind
	readChild, readParent bool
}

// Changed returns the block-aligned ranges of the image child whose content
// differs from the image parent, in offset order, adjacent blocks merged. A
// child block that reads as zeros where the parent's does not is a Zero
// range. parent == "" stands for an empty disk. Blocks past the parent's end
// compare against zeros; the child's size must be a multiple of BlockSize,
// and what lies past it is not compared (the manifest's DiskSize cuts it).
//
// Runs that both files map to the same physical blocks (reflink clones) are
// skipped unread, as are runs where neither has data, so a diff of clones
// costs about what changed; without reflink every run with data is read.
// Neither file may change during the call.
func Changed(ctx context.Context, parent, child string) ([]Range, DiffStats, error) {
	ranges, stats, err := changed(ctx, parent, child)
	if err != nil {
		return nil, DiffStats{}, fmt.Errorf("diff disks: %w", err)
	}
	return ranges, stats, nil
}

func changed(ctx context.Context, parentPath, childPath string) ([]Range, DiffStats, error) {
	child, err := os.Open(childPath)
	if err != nil {
		return nil, DiffStats{}, err
	}
	defer child.Close()
	st, err := child.Stat()
	if err != nil {
		return nil, DiffStats{}, err
	}
	size := st.Size()
	if size%BlockSize != 0 {
		return nil, DiffStats{}, fmt.Errorf("%s: size %d is not a multiple of %d", childPath, size, BlockSize)
	}

	var parent *os.File
	var parentSize int64
	var childMap, parentMap []mapping
	if parentPath == "" {
		// Against an empty disk only the child's data matters, and holes
		// need not even be mapped physically.
		childMap, err = dataMap(child, size)
		if err != nil {
			return nil, DiffStats{}, err
		}
	} else {
		parent, err = os.Open(parentPath)
		if err != nil {
			return nil, DiffStats{}, err
		}
		defer parent.Close()
		pst, err := parent.Stat()
		if err != nil {
			return nil, DiffStats{}, err
		}
		parentSize = pst.Size()
		if childMap, err = physMap(child, size); err != nil {
			return nil, DiffStats{}, fmt.Errorf("map %s: %w", childPath, err)
		}
		if parentMap, err = physMap(parent, parentSize); err != nil {
			return nil, DiffStats{}, fmt.Errorf("map %s: %w", parentPath, err)
		}
	}

	segs := snap(plan(childMap, parentMap, size), size)
	stats := DiffStats{Size: size}
	cmp := comparer{child: child, parent: parent, childSize: size, parentSize: parentSize, stats: &stats}
	for _, s := range segs {
		switch s.kind {
		case segShared:
			stats.Shared += s.end - s.off
		case segHoles:
			stats.Holes += s.end - s.off
		case segCompare:
			stats.Compared += s.end - s.off
			if err := cmp.compare(ctx, s); err != nil {
				return nil, DiffStats{}, err
			}
		}
	}
	for _, r := range cmp.ranges {
		stats.Changed += r.Len
	}
	return cmp.ranges, stats, nil
}

// FileRanges returns the runs of the file at path that hold data, as
// Changed would against an empty disk but for a file of any size: the runs
// are widened to whole blocks, the last up to the block past the file's
// end (Write reads what lies past it as zeros), and size is the file's.
// The layer's DiskSize is size rounded up to a block; who applies it cuts
// the file back to size.
func FileRanges(path string) (ranges []Range, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size = st.Size()
	data, err := dataMap(f, size)
	if err != nil {
		return nil, 0, fmt.Errorf("map %s: %w", path, err)
	}
	for _, m := range data {
		off, end := alignDown(m.off), alignUp(m.end())
		if n := len(ranges); n > 0 && ranges[n-1].End() >= off {
			ranges[n-1].Len = end - ranges[n-1].Off
			continue
		}
		ranges = append(ranges, Range{Off: off, Len: end - off})
	}
	return ranges, size, nil
}

// plan lays the two files' mappings over [0, size) and returns contiguous
// segments covering it: shared where both map the same physical blocks,
// holes where neither has data, compare elsewhere. The mappings are sorted,
// non-overlapping and clipped to their file's size.
func plan(child, parent []mapping, size int64) []segment {
	var segs []segment
	var ci, pi int
	for pos := int64(0); pos < size; {
		for ci < len(child) && child[ci].end() <= pos {
			ci++
		}
		for pi < len(parent) && parent[pi].end() <= pos {
			pi++
		}
		// The run from pos to the next boundary of either map.
		next := size
		c, cIn := boundary(child, ci, pos, &next)
		p, pIn := boundary(parent, pi, pos, &next)
		s := segment{off: pos, end: next, kind: segCompare, readChild: cIn, readParent: pIn}
		switch {
		case !cIn && !pIn:
			s.kind, s.readChild, s.readParent = segHoles, false, false
		case cIn && pIn && c.shareable && p.shareable && c.phys-c.off == p.phys-p.off:
			s.kind, s.readChild, s.readParent = segShared, false, false
		}
		segs = appendSegment(segs, s)
		pos = next
	}
	return segs
}

// boundary looks at m[i], the first mapping ending after pos: it reports
// whether pos is inside it and lowers *next to where that changes.
func boundary(m []mapping, i int, pos int64, next *int64) (mapping, bool) {
	if i >= len(m) {
		return mapping{}, false
	}
	if m[i].off > pos {
		*next = min(*next, m[i].off)
		return mapping{}, false
	}
	*next = min(*next, m[i].end())
	return m[i], true
}

// snap aligns plan's segments to blocks: a block is skipped only if one skip
// segment covers it whole; every other block is compared, reading both files
// where a segment boundary falls inside it. size is block-aligned.
func snap(segs []segment, size int64) []segment {
	var out []segment
	add := func(s segment) { out = appendSegment(out, s) }
	both := func(off, end int64) segment {
		return segment{off: off, end: end, kind: segCompare, readChild: true, readParent: true}
	}
	var done int64 // out covers [0, done)
	for _, s := range segs {
		if s.end <= done {
			continue
		}
		if s.kind == segCompare {
			off, end := alignDown(s.off), alignUp(s.end)
			if off != s.off || end != s.end {
				s.readChild, s.readParent = true, true
			}
			add(both(done, off)) // blocks of skip segments too short to skip
			s.off, s.end = max(off, done), end
			add(s)
			done = end
			continue
		}
		off, end := alignUp(max(s.off, done)), alignDown(s.end)
		if off >= end {
			continue // no whole block: the next segment or the tail compares it
		}
		add(both(done, off))
		s.off, s.end = off, end
		add(s)
		done = end
	}
	add(both(done, size))
	return out
}

// appendSegment appends s unless empty, merged into the last segment when
// it continues it with the same kind and reads.
func appendSegment(segs []segment, s segment) []segment {
	if s.off >= s.end {
		return segs
	}
	if n := len(segs); n > 0 && segs[n-1].end == s.off && segs[n-1].kind == s.kind &&
		segs[n-1].readChild == s.readChild && segs[n-1].readParent == s.readParent {
		segs[n-1].end = s.end
		return segs
	}
	return append(segs, s)
}

func alignDown(n int64) int64 { return n &^ (BlockSize - 1) }
func alignUp(n int64) int64   { return alignDown(n + BlockSize - 1) }

// compareBuf is how much of each file comparer reads at a time.
const compareBuf = 1 << 20

// comparer compares segments of two files block by block and collects the
// differing blocks as ranges.
type comparer struct {
	child, parent         *os.File // parent is nil for an empty disk
	childSize, parentSize int64
	stats                 *DiffStats
	cbuf, pbuf            []byte
	ranges                []Range
}

var zeroBlock [BlockSize]byte

func (c *comparer) compare(ctx context.Context, s segment) error {
	if c.cbuf == nil {
		c.cbuf, c.pbuf = make([]byte, compareBuf), make([]byte, compareBuf)
	}
	for off := s.off; off < s.end; off += compareBuf {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(compareBuf, s.end-off)
		cb, pb := c.cbuf[:n], c.pbuf[:n]
		if err := c.read(c.child, s.readChild, cb, off, c.childSize); err != nil {
			return err
		}
		if err := c.read(c.parent, s.readParent && c.parent != nil, pb, off, c.parentSize); err != nil {
			return err
		}
		for b := int64(0); b < n; b += BlockSize {
			cblk, pblk := cb[b:b+BlockSize], pb[b:b+BlockSize]
			if bytes.Equal(cblk, pblk) {
				continue
			}
			c.add(off+b, bytes.Equal(cblk, zeroBlock[:]))
		}
	}
	return nil
}

// read fills buf with f's bytes at off, and with zeros past size (f's size
// when the diff began) or everywhere if want is false. A short read before
// size is an error: the file changed under the diff.
func (c *comparer) read(f *os.File, want bool, buf []byte, off, size int64) error {
	n := 0
	if want && off < size {
		n = int(min(int64(len(buf)), size-off))
		m, err := f.ReadAt(buf[:n], off)
		c.stats.Read += int64(m)
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
		}
	}
	clear(buf[n:])
	return nil
}

// add records a differing block, merging it into the last range when
// adjacent and of the same kind.
func (c *comparer) add(off int64, zero bool) {
	if n := len(c.ranges); n > 0 && c.ranges[n-1].End() == off && c.ranges[n-1].Zero == zero {
		c.ranges[n-1].Len += BlockSize
		return
	}
	c.ranges = append(c.ranges, Range{Off: off, Len: BlockSize, Zero: zero})
}
