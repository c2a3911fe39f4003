package blockdev

import (
	"sort"

	"warren/internal/layer"
)

// seg is a run of the disk whose bytes are part of a base layer's chunk.
type seg struct {
	off, len int64
	// ext is the data extent whose chunk holds the run (ext.Offset <= off,
	// off+len <= ext.End()), and ns the namespace of its manifest.
	ext layer.Extent
	ns  string
}

func (s seg) end() int64 { return s.off + s.len }

// baseMap is what a disk's lineage of layers holds, folded: sorted,
// non-overlapping segments; what no segment covers reads as zeros.
type baseMap []seg

// fold folds a lineage, root first, into a map (docs/LAYERS.md, "Rebuilding
// a disk", without the bytes).
func fold(lineage []layer.Manifest) baseMap {
	var m baseMap
	for _, l := range lineage {
		m = m.overlay(l)
	}
	return m
}

// overlay returns m with layer l applied over it: cut to l's disk size, the
// runs l sets replaced by its extents. Both are sorted, so one pass merges
// them.
func (m baseMap) overlay(l layer.Manifest) baseMap {
	var kept baseMap
	j := 0
	for _, s := range m {
		if s.off >= l.DiskSize {
			break
		}
		s.len = min(s.len, l.DiskSize-s.off)
		for j < len(l.Extents) && l.Extents[j].End() <= s.off {
			j++
		}
		// Cut s by every extent of l that overlaps it; what is left
		// stays the parent's.
		pos := s.off
		for k := j; k < len(l.Extents) && l.Extents[k].Offset < s.end(); k++ {
			e := l.Extents[k]
			if e.Offset > pos {
				kept = append(kept, seg{off: pos, len: e.Offset - pos, ext: s.ext, ns: s.ns})
			}
			pos = max(pos, e.End())
		}
		if pos < s.end() {
			kept = append(kept, seg{off: pos, len: s.end() - pos, ext: s.ext, ns: s.ns})
		}
	}
	out := make(baseMap, 0, len(kept)+len(l.Extents))
	i := 0
	for _, e := range l.Extents {
		if e.Zero {
			continue
		}
		for i < len(kept) && kept[i].off < e.Offset {
			out = append(out, kept[i])
			i++
		}
		out = append(out, seg{off: e.Offset, len: e.Length, ext: e, ns: l.Namespace})
	}
	return append(out, kept[i:]...)
}

// within returns the segments that overlap [off, off+n).
func (m baseMap) within(off, n int64) baseMap {
	i := sort.Search(len(m), func(i int) bool { return m[i].end() > off })
	j := i
	for j < len(m) && m[j].off < off+n {
		j++
	}
	return m[i:j]
}
