// Package fsfreeze freezes and thaws a mounted filesystem (FIFREEZE and
// FITHAW of linux/fs.h): writes to a frozen filesystem block until it is
// thawed, so a copy of its device taken meanwhile is consistent.
//
// It is the one place both the guest agent (inside a VM) and the container
// runtime (from the host, through the sandbox's /proc/PID/root) freeze a
// sandbox's filesystem. It does not sync first (callers call unix.Syncfs,
// so that freezing itself has little left to write) and does not track who
// froze what: a filesystem stays frozen until someone thaws it.
package fsfreeze

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ioctl numbers of linux/fs.h: _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

var (
	// ErrFrozen: Freeze of a filesystem that is frozen already.
	ErrFrozen = errors.New("already frozen")
	// ErrUnsupported: the filesystem cannot be frozen (tmpfs, procfs…).
	ErrUnsupported = errors.New("not supported by this filesystem")
	// ErrNotFrozen: Thaw of a filesystem that is not frozen.
	ErrNotFrozen = errors.New("not frozen")
)

// Freeze freezes the filesystem that fd (any file or directory on it) is
// on. The error wraps ErrFrozen or ErrUnsupported where they apply, and
// always the errno.
func Freeze(fd int) error {
	return freezeError(unix.IoctlSetInt(fd, ioctlFIFREEZE, 0))
}

// Thaw thaws the filesystem that fd is on. The error wraps ErrNotFrozen
// (and the errno) when it was not frozen.
func Thaw(fd int) error {
	return thawError(unix.IoctlSetInt(fd, ioctlFITHAW, 0))
}

func freezeError(err error) error {
	switch err {
	case nil:
		return nil
	case unix.EBUSY:
		return fmt.Errorf("%w (%w)", ErrFrozen, err)
	case unix.EOPNOTSUPP, unix.ENOTTY, unix.EINVAL:
		return fmt.Errorf("%w (%w)", ErrUnsupported, err)
	}
	return err
}

func thawError(err error) error {
	if err == unix.EINVAL {
		return fmt.Errorf("%w (%w)", ErrNotFrozen, err)
	}
	return err
}
