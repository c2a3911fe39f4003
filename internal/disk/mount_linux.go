//go:build linux

package disk

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
)

// MountImage attaches the ext4 image to a loop device (direct I/O,
// autoclear) and mounts it as a detached mount (fsmount), nodev, with
// online discard: what the sandbox frees becomes holes in its image, and
// the pool's trimmer hands those to the host (trim_linux.go says why
// online here and periodic for the pool). It returns the mount's
// descriptor. The mount holds the device; with autoclear the device
// detaches itself once the mount is gone (when the last namespace holding
// it ends, or when the descriptor is closed unattached).
func MountImage(image string) (int, error) {
	loop, err := AttachLoop(image, LoopOptions{DirectIO: true})
	if err != nil {
		return -1, fmt.Errorf("attach disk: %w", err)
	}
	defer loop.Close()
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen ext4: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", loop.Path()); err != nil {
		return -1, fmt.Errorf("mount disk: source: %w", err)
	}
	if err := unix.FsconfigSetFlag(fsfd, "discard"); err != nil {
		return -1, fmt.Errorf("mount disk: discard: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("mount disk: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount disk: %w", err)
	}
	return mnt, nil
}

// UnmountUnder detaches every mount of mounts (mountinfo.Read's, in its
// order) at or under dir, the deepest first, so that a directory a dead
// process left (a gvisor sandbox's disks) can be removed.
func UnmountUnder(mounts []mountinfo.Mount, dir string) error {
	var errs []error
	for _, m := range slices.Backward(mounts) {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m.Point, err))
			}
		}
	}
	return errors.Join(errs...)
}
