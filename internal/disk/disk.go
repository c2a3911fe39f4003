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
// This package knows nothing of what is inside an image (templates, snapshots,
// layers): callers name the files. It does not mount sandbox images either;
// it hands out loop devices and the caller mounts them.
package disk

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
}
