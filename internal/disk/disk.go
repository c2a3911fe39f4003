// Package disk manages the raw disk images on a node: the directory they live
// in, copy-on-write clones between them, growing them, and the loop devices
// that expose them as block devices.
//
// Every sandbox root disk is a raw ext4 image cloned from a template image.
// Cloning is only cheap on a filesystem with reflink (XFS, btrfs); when the
// data directory has none, Open builds a sparse XFS image with reflink and
// loop-mounts it as the image directory, and only when that is impossible does
// it fall back to full (sparse-aware) copies.
//
// # Giving freed space back to the host
//
// Space freed at any layer stays taken on the host unless every layer below
// hears of it. The layers, and how each passes frees on:
//
//   - A sandbox's ext4 (on a loop device, or a VM's virtio disk) is mounted
//     with -o discard: it discards the extents a journal commit freed.
//     Online, because the host has no cheap way to fstrim a filesystem
//     mounted only in a sandbox's mount namespace or guest, and the sandbox
//     may not (FITRIM needs CAP_SYS_ADMIN of the host). Its cost, a hole
//     punch per freed extent in the commit path, falls on that sandbox's
//     own journal, and a punch is metadata only: no data is written.
//   - A loop device turns a discard into fallocate(PUNCH_HOLE) on its image
//     (QEMU does the same with discard=unmap). On a reflink clone a punch
//     drops the clone's reference to the extent: blocks it shares with its
//     template or snapshot stay theirs, only blocks it alone held are freed.
//   - The pool's XFS image is not mounted with -o discard. XFS's
//     documentation advises fstrim over it: online discard keeps freed
//     extents busy until their discard completes, so clones and sandbox
//     writes that need space wait or fragment, and a sandbox delete frees
//     its whole image in one burst, which is better trimmed in one go.
//     The pool trims itself instead (Trim; a trimmer started by Open):
//     every DefaultTrimInterval it compares the free space with the last
//     trim's and trims when it grew. A FITRIM of the 256 GiB image costs
//     a few milliseconds when little was freed.
//   - A filesystem that the data directory already had (reflink or copy
//     mode) keeps its operator's policy: warren does not trim it.
//
// This package knows nothing of what is inside an image (templates, snapshots,
// layers): callers name the files. It does not mount sandbox images either;
// it hands out loop devices and the caller mounts them.
package disk

import "time"

// CloneMode is how a Pool clones images.
type CloneMode int

const (
	// CloneCopy copies the data extents of the image: it costs time and space
	// proportional to the data, so it is slow for large images.
	CloneCopy CloneMode = iota
	// CloneReflink shares extents copy-on-write (FICLONE) on a filesystem
	// that supports it natively in the data directory.
	CloneReflink
	// CloneReflinkXFSLoop shares extents copy-on-write inside an XFS image
	// that Open created and loop-mounted because the data directory had no
	// reflink.
	CloneReflinkXFSLoop
)

// String describes the mode for logs and status output.
func (m CloneMode) String() string {
	switch m {
	case CloneCopy:
		return "copy (no reflink: slow)"
	case CloneReflink:
		return "reflink"
	case CloneReflinkXFSLoop:
		return "reflink (xfs loop image)"
	}
	return "unknown"
}

// DefaultXFSImageSize is the apparent size of the XFS image when
// Options.XFSImageSize is zero.
const DefaultXFSImageSize int64 = 256 << 30

// Options for Open.
type Options struct {
	// XFSImageSize is the apparent size of the sparse XFS image created when
	// the data directory has no reflink (default DefaultXFSImageSize; sparse,
	// so it costs only what is written). It is used only when the image is
	// first created.
	XFSImageSize int64
	// TrimInterval is how often the pool looks for space freed in its XFS
	// image, to trim it (default DefaultTrimInterval).
	TrimInterval time.Duration
	// NoLoopImage never makes (or mounts) the XFS loop image: without
	// reflink in the data directory, clones are full copies. For data
	// directories that must not get a mount, such as a test's.
	NoLoopImage bool
}

// DefaultTrimInterval is the trimmer's period when Options.TrimInterval is
// zero: space a sandbox frees is back on the host within seconds, at the
// cost of a statfs every period.
const DefaultTrimInterval = 5 * time.Second
