package layer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// decoder decompresses chunks; DecodeAll may be called concurrently. It
// never produces more than the capacity of the buffer it is given (the
// extent's Length), nor more than MaxChunk.
var decoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0), // GOMAXPROCS decodes at once
		zstd.WithDecoderMaxMemory(MaxChunk),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		panic(err) // only bad options fail
	}
	return d
})

// zeroWrite is how many zeros Apply writes at a time where it cannot punch.
const zeroWrite = 1 << 20

// Apply makes the image file (which must exist: normally a reflink clone of
// the parent's disk, or a new empty file when m.Parent is empty) equal to
// the layer's disk. It truncates the image to m.DiskSize, then, with up to
// parallel extents in flight, gets each chunk, decompresses it (never past
// the extent's Length), checks that its bytes have the extent's chunk name
// (ChunkName in m.Namespace) and writes them at the extent's offset, and
// punches the zero extents (writing zeros where the file system cannot
// punch); it syncs the image at the end. A chunk that does not match its
// extent is an error wrapping ErrCorrupt that names the chunk. On any error
// the image is in an undefined state, part old and part new: the caller
// must delete it.
func Apply(ctx context.Context, image string, m Manifest, chunks Chunks, parallel int) error {
	if err := apply(ctx, image, m, chunks, parallel); err != nil {
		return fmt.Errorf("apply layer %s: %w", m.ID, err)
	}
	return nil
}

func apply(ctx context.Context, image string, m Manifest, chunks Chunks, parallel int) error {
	if err := m.Validate(); err != nil {
		return err
	}
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(m.DiskSize); err != nil {
		return err
	}
	bufs := make([][]byte, max(1, parallel))
	err = forEach(ctx, len(m.Extents), parallel, func(ctx context.Context, worker, i int) error {
		e := m.Extents[i]
		if e.Zero {
			return zero(f, e.Offset, e.Length)
		}
		if bufs[worker] == nil {
			bufs[worker] = make([]byte, MaxChunk)
		}
		data, err := Fetch(ctx, chunks, m.Namespace, e, bufs[worker])
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(data, e.Offset); err != nil {
			return fmt.Errorf("write at %d: %w", e.Offset, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// Fetch gets data extent e's chunk and returns its bytes, decompressed into
// buf (at least e.Length long) and verified against the chunk's name in
// namespace; a chunk that fails the check is an error wrapping ErrCorrupt.
func Fetch(ctx context.Context, chunks Chunks, namespace string, e Extent, buf []byte) ([]byte, error) {
	compressed, err := chunks.Get(ctx, e.Chunk)
	if err != nil {
		return nil, fmt.Errorf("get chunk %s: %w", e.Chunk, err)
	}
	if len(compressed) > MaxStored {
		return nil, fmt.Errorf("chunk %s: %w: %d bytes stored, over %d", e.Chunk, ErrCorrupt, len(compressed), MaxStored)
	}
	data, err := decoder().DecodeAll(compressed, buf[:0:e.Length])
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w: decompress: %v", e.Chunk, ErrCorrupt, err)
	}
	if int64(len(data)) != e.Length {
		return nil, fmt.Errorf("chunk %s: %w: %d bytes, want %d", e.Chunk, ErrCorrupt, len(data), e.Length)
	}
	if got := ChunkName(namespace, data); got != e.Chunk {
		return nil, fmt.Errorf("chunk %s: %w: content is named %s", e.Chunk, ErrCorrupt, got)
	}
	return data, nil
}

// zero makes [off, off+n) of f read as zeros: a punched hole, or written
// zeros where the file system cannot punch.
func zero(f *os.File, off, n int64) error {
	err := punchHole(f, off, n)
	if !errors.Is(err, errors.ErrUnsupported) {
		if err != nil {
			return fmt.Errorf("punch hole at %d: %w", off, err)
		}
		return nil
	}
	zeros := make([]byte, min(n, zeroWrite))
	for end := off + n; off < end; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), end-off)], off); err != nil {
			return fmt.Errorf("write zeros at %d: %w", off, err)
		}
	}
	return nil
}
