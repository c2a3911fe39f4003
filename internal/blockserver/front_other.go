//go:build !linux

package blockserver

import (
	"errors"
	"log/slog"

	"warren/internal/blockdev"
)

// attach needs Linux: FUSE and the block server's process are Linux's.
func attach(dir, front string, vol blockdev.Device, log *slog.Logger) (string, func() error, error) {
	return "", nil, errors.New("always-on disks need Linux")
}

// clearMount has nothing to clear: no mount is made off Linux.
func clearMount(dir string) error { return nil }

// growFS needs Linux: it mounts a FUSE file.
func growFS(dir string, vol blockdev.Device, log *slog.Logger) error {
	return errors.New("always-on disks need Linux")
}
