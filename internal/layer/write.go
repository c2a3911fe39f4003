package layer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// WriteStats says what Write produced and stored.
type WriteStats struct {
	Changed    int64 // uncompressed bytes of the data extents
	Zero       int64 // bytes of the zero extents
	Compressed int64 // compressed bytes of the data extents (the sum of Stored)
	Stored     int64 // compressed bytes Put newly stored
	Chunks     int   // data extents
	NewChunks  int   // chunks Put newly stored
}

// encoder compresses chunks; EncodeAll may be called concurrently, and the
// encoder keeps its state between calls.
var encoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err) // only bad options fail, and there are none
	}
	return e
})

// Write stores the ranges of the image child as chunks and returns the
// layer's extents in offset order. ranges must be sorted, non-overlapping,
// block-aligned and inside child, or past its end by less than a block,
// read as zeros (Changed's and FileRanges' results are). Each range is cut
// into extents of at most MaxChunk bytes from its start; a data extent's
// bytes are named in namespace (ChunkName), compressed with zstd and Put,
// with up to parallel chunks in flight (each holding two MaxChunk buffers);
// zero ranges, and extents whose bytes are all zeros, become zero extents
// and store nothing. The manifest of the
// extents must carry the same namespace. child must not change during the
// call.
func Write(ctx context.Context, child string, ranges []Range, namespace string, chunks Chunks, parallel int) ([]Extent, WriteStats, error) {
	extents, err := split(ranges)
	if err != nil {
		return nil, WriteStats{}, fmt.Errorf("write layer: %w", err)
	}
	f, err := os.Open(child)
	if err != nil {
		return nil, WriteStats{}, fmt.Errorf("write layer: %w", err)
	}
	defer f.Close()

	w := writer{f: f, namespace: namespace, chunks: chunks, extents: extents, claimed: make(map[string]bool)}
	w.bufs = make([]writeBufs, max(1, parallel))
	if err := forEach(ctx, len(extents), parallel, w.write); err != nil {
		return nil, WriteStats{}, fmt.Errorf("write layer: %w", err)
	}
	for _, e := range extents {
		if e.Zero {
			w.stats.Zero += e.Length
			continue
		}
		w.stats.Changed += e.Length
		w.stats.Compressed += e.Stored
		w.stats.Chunks++
	}
	return extents, w.stats, nil
}

// split checks ranges and cuts them into extents of at most MaxChunk bytes,
// data extents without their chunk yet.
func split(ranges []Range) ([]Extent, error) {
	var extents []Extent
	var end int64
	for i, r := range ranges {
		if r.Off < end || r.Len <= 0 || r.Off%BlockSize != 0 || r.Len%BlockSize != 0 {
			return nil, fmt.Errorf("range %d (%d+%d): not sorted, block-aligned and non-empty", i, r.Off, r.Len)
		}
		for off := r.Off; off < r.End(); off += MaxChunk {
			extents = append(extents, Extent{Offset: off, Length: min(MaxChunk, r.End()-off), Zero: r.Zero})
		}
		end = r.End()
	}
	return extents, nil
}

// writer is the state of one Write.
type writer struct {
	f         *os.File
	namespace string
	chunks    Chunks
	extents   []Extent    // each worker fills in the ones it is given
	bufs      []writeBufs // per worker

	mu      sync.Mutex
	claimed map[string]bool // guarded by mu: names this Write has Put or is putting
	stats   WriteStats      // guarded by mu: Stored and NewChunks
}

// writeBufs are one worker's buffers, reused from chunk to chunk.
type writeBufs struct {
	data, compressed []byte
}

// write stores extent i's chunk, unless another worker of this Write
// already stores the same bytes.
func (w *writer) write(ctx context.Context, worker, i int) error {
	e := &w.extents[i]
	if e.Zero {
		return nil
	}
	b := &w.bufs[worker]
	if b.data == nil {
		b.data = make([]byte, MaxChunk)
	}
	data := b.data[:e.Length]
	if n, err := w.f.ReadAt(data, e.Offset); errors.Is(err, io.EOF) {
		clear(data[n:]) // past the end of a file of any size (FileRanges)
	} else if err != nil {
		return fmt.Errorf("read %s at %d: %w", w.f.Name(), e.Offset, err)
	}
	if allZero(data) {
		// Zeros written out (a memory image's free pages, most of all)
		// are stored as what they are.
		e.Zero = true
		return nil
	}
	name := ChunkName(w.namespace, data)
	e.Chunk = name
	if p, ok := w.chunks.(Present); ok {
		// Stored already (the same bytes in an earlier layer): neither
		// compressed nor put again.
		stored, present, err := p.Present(ctx, name)
		if err != nil {
			return fmt.Errorf("look up chunk %s: %w", name, err)
		}
		if present {
			e.Stored = stored
			return nil
		}
	}
	b.compressed = encoder().EncodeAll(data, b.compressed[:0])
	e.Stored = int64(len(b.compressed))

	w.mu.Lock()
	dup := w.claimed[name]
	w.claimed[name] = true
	w.mu.Unlock()
	if dup {
		return nil
	}
	stored, err := w.chunks.Put(ctx, name, b.compressed)
	if err != nil {
		return fmt.Errorf("put chunk %s: %w", name, err)
	}
	if stored {
		w.mu.Lock()
		w.stats.Stored += e.Stored
		w.stats.NewChunks++
		w.mu.Unlock()
	}
	return nil
}

// allZero says whether b holds only zeros.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
