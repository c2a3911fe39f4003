// Package blockdev is the block server behind always-on disks: one sandbox
// disk as a map from block ranges to content-addressed chunks (the chunks
// and manifests of snapshot layers, docs/LAYERS.md), kept in tiers. Reads
// fault chunks in from the nearest tier that has them (the node's local
// cache, then the in-cluster store, then object storage); writes land in the
// local cache and go back through the tiers as chunks.
//
// This package holds the tiered disk and the Device contract its front ends
// serve. The front ends live in their own packages: blockdev/nbd (NBD over
// a unix socket, for QEMU's built-in client) and blockdev/fusefile (one file
// through FUSE, for a loop device where the host has no kernel NBD). It
// knows nothing of sandboxes or the store.
package blockdev

import (
	"errors"
	"fmt"
	"os"
)

// BlockSize is the unit of every offset and length a Device accepts from its
// front ends' Trim and WriteZeroes, and of the local cache's maps.
const BlockSize = 4096

// ErrRange means an access reaches outside the device.
var ErrRange = errors.New("access beyond the end of the device")

// Device is one disk as a front end serves it. Every method may be called
// concurrently, from many goroutines; accesses that overlap see each other
// in some order, as on a real disk. An error is returned to the guest as an
// I/O error; it never leaves the device in a state later reads cannot
// explain (a failed write may have written any part of its range).
type Device interface {
	// Size is the device's size in bytes, a multiple of BlockSize. It does
	// not change while the device is served.
	Size() int64
	// ReadAt reads len(p) bytes at off. It returns len(p) and nil, or an
	// error; never a short read without one. A read past Size wraps
	// ErrRange.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt writes p at off. The write is visible to every later read at
	// once, but durable only after a Flush that starts after it returns.
	WriteAt(p []byte, off int64) (int, error)
	// Flush returns once every write that returned before it was called is
	// durable: it survives the loss of this process, and of this node where
	// the device has a tier beyond the node.
	Flush() error
	// Trim discards [off, off+n): later reads return zeros. off and n are
	// multiples of BlockSize.
	Trim(off, n int64) error
	// WriteZeroes makes [off, off+n) read as zeros, like a write of zeros;
	// off and n are multiples of BlockSize.
	WriteZeroes(off, n int64) error
}

// checkRange returns an error wrapping ErrRange unless [off, off+n) lies in
// a device of the given size.
func checkRange(size, off, n int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: %d bytes at %d, device of %d", ErrRange, n, off, size)
	}
	return nil
}

// checkBlocks is checkRange for Trim and WriteZeroes, which also take only
// whole blocks.
func checkBlocks(size, off, n int64) error {
	if off%BlockSize != 0 || n%BlockSize != 0 {
		return fmt.Errorf("%d bytes at %d: not whole %d-byte blocks", n, off, BlockSize)
	}
	return checkRange(size, off, n)
}

// File is a Device over a local file, with no tiers: the raw image that the
// front ends are measured against, and the device their tests serve.
type File struct {
	f    *os.File
	size int64
}

var _ Device = (*File)(nil)

// OpenFile serves the file at path, which must exist and be a whole number
// of blocks long.
func OpenFile(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size()%BlockSize != 0 || st.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("open %s: %d bytes is not a whole number of %d-byte blocks", path, st.Size(), BlockSize)
	}
	return &File{f: f, size: st.Size()}, nil
}

func (d *File) Size() int64 { return d.size }

func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(d.size, off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.f.ReadAt(p, off)
}

func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if err := checkRange(d.size, off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.f.WriteAt(p, off)
}

func (d *File) Flush() error { return d.f.Sync() }

func (d *File) Trim(off, n int64) error {
	if err := checkBlocks(d.size, off, n); err != nil {
		return err
	}
	return zeroRange(d.f, off, n)
}

func (d *File) WriteZeroes(off, n int64) error { return d.Trim(off, n) }

// Close closes the file.
func (d *File) Close() error { return d.f.Close() }
