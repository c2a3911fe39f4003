package blockdev

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"warren/internal/layer"
)

var _ Device = (*Volume)(nil)

// ReadAt reads from the cache, faulting in first the cells it lacks.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(v.cfg.Size, off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := v.ensure(v.ctx, off/CellSize, (off+int64(len(p))-1)/CellSize); err != nil {
		return 0, err
	}
	v.readAhead(off, int64(len(p)))
	return v.cache.ReadAt(p, off)
}

// maxReadAhead bounds the read-ahead window, in cells (4 MiB).
const maxReadAhead = 64

// readAhead follows the access pattern: a read that starts where the last
// one ended doubles the window (up to maxReadAhead cells) and fetches that
// many cells past it in the background; any other read ends the run. One
// fetcher runs at a time; a range wanted while it runs replaces any it has
// not taken yet, and it takes that one next.
func (v *Volume) readAhead(off, n int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	seq := off == v.raNext
	v.raNext = off + n
	if !seq {
		v.raWindow = 0
		return
	}
	v.raWindow = min(max(2*v.raWindow, 2), maxReadAhead)
	c0 := (off + n + CellSize - 1) / CellSize
	c1 := min(c0+v.raWindow-1, v.cells-1)
	for c0 <= c1 && v.present.has(c0) {
		c0++
	}
	if v.closed || c0 > c1 {
		return
	}
	v.raWant = &[2]int64{c0, c1}
	if v.raBusy {
		return
	}
	v.raBusy = true
	v.aheads.Go(v.fetchAhead)
}

// fetchAhead fetches the ranges readAhead wants until none is left.
func (v *Volume) fetchAhead() {
	for {
		v.mu.Lock()
		want := v.raWant
		v.raWant = nil
		if want == nil || v.closed {
			v.raBusy = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		if err := v.ensure(v.ctx, want[0], want[1]); err != nil && v.ctx.Err() == nil {
			v.log.Debug("read ahead", "err", err)
		}
	}
}

// WriteAt writes into the cache and marks the cells dirty. A cell the write
// covers only in part is faulted in first; one it covers whole is not.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	n := int64(len(p))
	if err := checkRange(v.cfg.Size, off, n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	if err := v.room(); err != nil {
		return 0, err
	}
	err := v.overwrite(off, n, func() error {
		_, err := v.cache.WriteAt(p, off)
		return err
	}, false)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Trim discards a range: it reads as zeros and takes no space in the cache.
func (v *Volume) Trim(off, n int64) error {
	if err := checkBlocks(v.cfg.Size, off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return v.overwrite(off, n, func() error { return zeroRange(v.cache, off, n) }, true)
}

// WriteZeroes is Trim: a range of zeros is stored as a zero extent, never
// as bytes.
func (v *Volume) WriteZeroes(off, n int64) error { return v.Trim(off, n) }

// overwrite runs write, which changes [off, off+n) of the cache, once the
// range's partly covered cells are present and no fault fills its wholly
// covered ones, then marks the cells dirty; zero says write zeroes.
func (v *Volume) overwrite(off, n int64, write func() error, zero bool) error {
	c0, c1 := off/CellSize, (off+n-1)/CellSize
	whole := func(c int64) bool {
		co, cn := v.cellRange(c)
		return off <= co && co+cn <= off+n
	}
	for _, c := range []int64{c0, c1} {
		if !whole(c) {
			if err := v.ensure(v.ctx, c, c); err != nil {
				return err
			}
		}
	}
	// Wholly covered cells that are not present are claimed as if
	// faulted, so that no read sees them before the write lands.
	claimed := make(chan struct{})
	var mine []int64
	for {
		v.mu.Lock()
		var wait chan struct{}
		for c := c0; c <= c1; c++ {
			if whole(c) && !v.present.has(c) {
				if ch, ok := v.faults[c]; ok && ch != claimed {
					wait = ch
					break
				}
			}
		}
		if wait == nil {
			for c := c0; c <= c1; c++ {
				if whole(c) && !v.present.has(c) && v.faults[c] == nil {
					v.faults[c] = claimed
					mine = append(mine, c)
				}
			}
			v.mu.Unlock()
			break
		}
		v.mu.Unlock()
		<-wait
	}
	err := write()
	v.mu.Lock()
	for _, c := range mine {
		delete(v.faults, c)
		if err == nil {
			v.present.set(c)
		}
	}
	if err == nil {
		// Counted after the write landed: a flush that read the cell
		// before then sees a newer generation, and keeps it dirty.
		v.gen++
		for c := c0; c <= c1; c++ {
			v.dirty[c] = dirtied{gen: v.gen, zero: zero && whole(c)}
		}
	}
	v.mu.Unlock()
	close(claimed)
	if err != nil {
		return fmt.Errorf("volume %s: write cache: %w", v.cfg.ID, err)
	}
	return nil
}

// ensure makes cells c0 to c1 present, faulting in those that are not, or
// waiting for the faults already under way.
func (v *Volume) ensure(ctx context.Context, c0, c1 int64) error {
	for {
		v.mu.Lock()
		if v.closed {
			v.mu.Unlock()
			return errClosed
		}
		var wait chan struct{}
		var claim []int64
		for c := c0; c <= c1; c++ {
			if v.present.has(c) {
				continue
			}
			if ch, ok := v.faults[c]; ok {
				wait = ch
				continue
			}
			claim = append(claim, c)
		}
		if claim == nil && wait == nil {
			v.mu.Unlock()
			return nil
		}
		if claim == nil {
			v.mu.Unlock()
			<-wait
			continue
		}
		ch := make(chan struct{})
		for _, c := range claim {
			v.faults[c] = ch
		}
		v.mu.Unlock()
		if err := v.fault(ctx, claim, ch); err != nil {
			return err
		}
	}
}

// fault fills the claimed cells from the tiers and marks them present.
// Cells of the base lineage come from its chunks, which are fetched whole:
// every other cell those chunks hold in full, and that nobody wants yet, is
// filled too (the chunk is read ahead).
func (v *Volume) fault(ctx context.Context, claim []int64, ch chan struct{}) error {
	filled := claim
	defer func() {
		v.mu.Lock()
		for _, c := range filled {
			delete(v.faults, c)
		}
		v.mu.Unlock()
		close(ch)
	}()
	if err := v.room(); err != nil {
		return err
	}
	v.mu.Lock()
	own := make(map[int64]string)
	var fromBase []int64
	for _, c := range claim {
		if ref, ok := v.own[c]; ok {
			own[c] = ref.chunk
		} else {
			fromBase = append(fromBase, c)
		}
	}
	v.mu.Unlock()

	chunks := map[layer.Extent]fetched{}
	for c, name := range own {
		if name != "" {
			off, n := v.cellRange(c)
			chunks[layer.Extent{Offset: off, Length: n, Chunk: name}] = fetched{ns: v.ns}
		}
	}
	for _, c := range fromBase {
		off, n := v.cellRange(c)
		for _, s := range v.base.within(off, n) {
			chunks[s.ext] = fetched{ns: s.ns}
		}
	}
	if err := v.fetch(ctx, chunks); err != nil {
		return fmt.Errorf("volume %s: %w", v.cfg.ID, err)
	}
	// Read ahead: base cells wholly inside what was fetched.
	v.mu.Lock()
	for e := range chunks {
		for c := e.Offset / CellSize; c <= (e.End()-1)/CellSize; c++ {
			if _, mine := v.own[c]; mine || v.present.has(c) || v.faults[c] != nil || !v.coveredBy(c, chunks) {
				continue
			}
			v.faults[c] = ch
			filled = append(filled, c)
			fromBase = append(fromBase, c)
		}
	}
	v.mu.Unlock()

	buf := make([]byte, CellSize)
	for _, c := range filled {
		off, n := v.cellRange(c)
		b := buf[:n]
		clear(b)
		if name, ok := own[c]; ok {
			if name != "" {
				copy(b, chunks[layer.Extent{Offset: off, Length: n, Chunk: name}].data)
			}
		} else {
			for _, s := range v.base.within(off, n) {
				lo, hi := max(s.off, off), min(s.end(), off+n)
				copy(b[lo-off:hi-off], chunks[s.ext].data[lo-s.ext.Offset:hi-s.ext.Offset])
			}
		}
		if _, err := v.cache.WriteAt(b, off); err != nil {
			return fmt.Errorf("volume %s: fill cache: %w", v.cfg.ID, err)
		}
	}
	v.mu.Lock()
	for _, c := range filled {
		v.present.set(c)
	}
	v.mu.Unlock()
	return nil
}

// coveredBy reports whether every base segment of cell c has its chunk in
// chunks. The caller holds mu.
func (v *Volume) coveredBy(c int64, chunks map[layer.Extent]fetched) bool {
	off, n := v.cellRange(c)
	for _, s := range v.base.within(off, n) {
		if _, ok := chunks[s.ext]; !ok {
			return false
		}
	}
	return true
}

// fetched is a chunk being or having been read from the tiers.
type fetched struct {
	ns   string
	data []byte
}

// fetch fills in each chunk's bytes from the nearest tier that has it,
// verified, with up to Parallel fetches at once.
func (v *Volume) fetch(ctx context.Context, chunks map[layer.Extent]fetched) error {
	want := make([]layer.Extent, 0, len(chunks))
	for e := range chunks {
		want = append(want, e)
	}
	got := make([][]byte, len(want))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(v.opts.Parallel)
	for i, e := range want {
		ns := chunks[e].ns
		g.Go(func() error {
			var err error
			for _, t := range v.tiers.order() {
				if got[i], err = layer.Fetch(ctx, t, ns, e, make([]byte, e.Length)); err == nil {
					return nil
				}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, e := range want {
		chunks[e] = fetched{ns: chunks[e].ns, data: got[i]}
	}
	return nil
}
