// Package layer is the incremental block-layer format of snapshots: the
// blocks in which a disk image differs from its parent's, stored as
// content-addressed, zstd-compressed chunks and listed by a manifest. A
// chunk's name is derived from its bytes and the manifest's namespace
// (ChunkName), so equal bytes share one chunk only within a namespace.
//
// Changed finds the differing blocks of two images (cheaply when they share
// extents by reflink), Write turns them into chunks and manifest extents,
// Apply turns a parent's image into the child's from a manifest, and
// ParseManifest/Marshal are the manifest's strict JSON form. docs/LAYERS.md
// documents the format for other implementations.
//
// This package does not name blobs, walk lineages, freeze filesystems or
// decide when to snapshot: that is the snapshot engine's job. It reads and
// writes image files it is given and chunks through the Chunks interface.
package layer

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

const (
	// BlockSize is the granularity of the diff: a layer holds whole 4 KiB
	// blocks, at 4 KiB-aligned offsets.
	BlockSize = 4096
	// MaxChunk is the most uncompressed data one chunk (one extent) holds.
	MaxChunk = 4 << 20
	// MaxStored bounds the compressed size of a chunk: zstd's worst-case
	// bound (ZSTD_COMPRESSBOUND) for MaxChunk bytes, which any conforming
	// encoder stays within.
	MaxStored = MaxChunk + MaxChunk>>8
	// MaxDiskSize is the largest disk a manifest may describe (16 TiB).
	MaxDiskSize = 16 << 40
	// MaxExtents bounds the extents of one manifest: enough to cover a
	// MaxDiskSize disk with MaxChunk extents.
	MaxExtents = MaxDiskSize / MaxChunk
)

// ErrCorrupt means a chunk's bytes do not match its manifest extent: they do
// not decompress, decompress to the wrong length, or hash differently.
var ErrCorrupt = errors.New("corrupt chunk")

// Range is a run of a disk, in bytes, block-aligned.
type Range struct {
	Off, Len int64
	// Zero means the run reads as zeros in the child (a hole or all-zero
	// blocks) while the parent had data there.
	Zero bool
}

// End is the offset just past the range.
func (r Range) End() int64 { return r.Off + r.Len }

// Extent is one entry of a manifest: a run of the disk that the layer sets,
// either to a chunk's bytes or to zeros.
type Extent struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// Chunk is the chunk's name: ChunkName of the manifest's namespace and
	// the extent's uncompressed bytes; empty for a zero extent.
	Chunk string `json:"chunk,omitempty"`
	// Stored is the size of the compressed chunk as its writer made it, for
	// accounting. The stored object may differ (another writer may have
	// stored the same content first, compressed otherwise); Apply trusts
	// the hash, not this size.
	Stored int64 `json:"stored,omitempty"`
	// Zero means the extent reads as zeros.
	Zero bool `json:"zero,omitempty"`
}

// End is the offset just past the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

// Manifest is one layer: how to turn the parent's disk into this one. Blocks
// no extent covers are the parent's (zeros when Parent is empty), cut or
// extended with zeros to DiskSize.
type Manifest struct {
	// Version is VersionPlain when Namespace is empty, else
	// VersionNamespaced (Version returns it).
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Namespace is what the layer's chunk names are derived in, besides
	// their bytes: the snapshot's tenant, or empty for plain SHA-256 names
	// (template base layers, and every layer of format version 1).
	Namespace string `json:"namespace,omitempty"`
	// Parent is the ID of the layer this one applies over; empty for a layer
	// over an empty (all-zero) disk.
	Parent   string `json:"parent,omitempty"`
	DiskSize int64  `json:"disk_size"`
	// Extents are sorted by Offset, non-overlapping, block-aligned and at
	// most MaxChunk long each.
	Extents []Extent `json:"extents"`
	// Labels are the snapshot engine's metadata, opaque here.
	Labels map[string]string `json:"labels,omitempty"`
}

// The manifest format versions this package reads and writes. Version 2
// added Namespace; a version 1 manifest has none, and names its chunks by
// the plain SHA-256 of their bytes.
const (
	VersionPlain      = 1
	VersionNamespaced = 2
)

// Version is the format version of a manifest whose chunks are named in
// namespace.
func Version(namespace string) int {
	if namespace == "" {
		return VersionPlain
	}
	return VersionNamespaced
}

// MaxNamespace bounds a namespace.
const MaxNamespace = 128

// ChunkName names a chunk of data in namespace, as lowercase hex: the
// SHA-256 of data when namespace is empty, else HMAC-SHA256 of data keyed by
// the namespace's bytes. Equal bytes in two namespaces get unrelated names,
// so a writer in one never finds, and never learns of, the other's chunk.
func ChunkName(namespace string, data []byte) string {
	if namespace == "" {
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	h := hmac.New(sha256.New, []byte(namespace))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Chunks is where chunk objects live; the snapshot engine adapts its blob
// store to it. Both methods are called concurrently.
type Chunks interface {
	// Put stores the compressed chunk under its name unless it is already
	// there, and reports whether it stored bytes. It must not modify or keep
	// compressed after it returns. Storing the same name twice is harmless.
	Put(ctx context.Context, name string, compressed []byte) (stored bool, err error)
	// Get returns the compressed chunk. The caller verifies it against the
	// name; a missing chunk is an error (the engine's not-found error,
	// passed through wrapped).
	Get(ctx context.Context, name string) ([]byte, error)
}

// Present is Chunks that can tell whether a chunk is stored, and its
// stored size, without its bytes: Write asks it first, and neither
// compresses nor puts a chunk it has. It says false for a chunk it wants
// put again (one old enough that a collector may take it).
type Present interface {
	Present(ctx context.Context, name string) (stored int64, ok bool, err error)
}
