//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// fsError turns a filesystem error into a connect error whose code says what
// went wrong. The message names the operation and the sandbox path, both safe
// to show to the caller.
func fsError(op, p string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	msg := fmt.Errorf("%s %s: %w", op, p, unwrapPathError(err))
	return connect.NewError(errnoCode(err), msg)
}

// unwrapPathError drops the *PathError wrapper, whose path is the one the
// caller already knows.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// errnoCode maps an errno (possibly wrapped) to a connect code.
func errnoCode(err error) connect.Code {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return connect.CodeNotFound
		case errors.Is(err, fs.ErrExist):
			return connect.CodeAlreadyExists
		case errors.Is(err, fs.ErrPermission):
			return connect.CodePermissionDenied
		}
		return connect.CodeInternal
	}
	switch errno {
	case unix.ENOENT:
		return connect.CodeNotFound
	case unix.EEXIST:
		return connect.CodeAlreadyExists
	case unix.EACCES, unix.EPERM:
		return connect.CodePermissionDenied
	case unix.ENOTDIR, unix.EISDIR, unix.ENOTEMPTY, unix.EROFS, unix.EXDEV, unix.EBUSY, unix.ETXTBSY:
		return connect.CodeFailedPrecondition
	case unix.EINVAL, unix.ENAMETOOLONG, unix.ELOOP:
		return connect.CodeInvalidArgument
	case unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE, unix.EFBIG, unix.EAGAIN, unix.ENOMEM:
		return connect.CodeResourceExhausted
	}
	return connect.CodeInternal
}
