//go:build !linux

package fusefile

import (
	"errors"
	"os/exec"

	"warren/internal/blockdev"
)

var errUnsupported = errors.New("fusefile: FUSE files are served on Linux only")

// File is one Device served as a regular file in a FUSE mount of its own.
type File struct{}

// Mount fails: FUSE files are served on Linux only.
func Mount(dir, name string, dev blockdev.Device, opts Options) (*File, error) {
	return nil, errUnsupported
}

// Path is the served file.
func (f *File) Path() string { return "" }

// Close does nothing.
func (f *File) Close() error { return nil }

// StartIOFlusher fails: I/O flushers are a Linux feature.
func StartIOFlusher(cmd *exec.Cmd) error { return errUnsupported }

// IsIOFlusher fails: I/O flushers are a Linux feature.
func IsIOFlusher() (bool, error) { return false, errUnsupported }
