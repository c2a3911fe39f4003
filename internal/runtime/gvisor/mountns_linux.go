//go:build linux

package gvisor

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
	"warren/internal/osthread"
)

// startRunsc starts cmd, a runsc command that may set a sandbox's network
// up, in a mount namespace of its own in which /proc/sys/net is an empty
// tmpfs.
//
// Why: runsc 20240729 (Debian 13's) refuses to take over a network
// namespace in which /proc/sys/net/core/rmem_default exists, taking it for
// the host's; kernels since 6.x have that file in every namespace. Hidden
// from runsc alone, the check passes, and nothing else runsc does reads
// /proc/sys/net. runsc's processes (its file server and the sandbox) are
// born in that namespace and keep it.
//
// The namespace starts as a copy of the host's, which would pin, for the
// sandbox's life, every mount that exists now: other sandboxes' network
// namespaces (whose links could then never be made again), their disks'
// loop devices, FUSE mounts. Those are detached in the copy; only the
// mounts under keep (the sandbox's own directory) stay.
func startRunsc(cmd *exec.Cmd, keep string) (err error) {
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNS); err != nil {
			err = fmt.Errorf("runsc mount namespace: %w", err)
			return
		}
		if err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			err = fmt.Errorf("runsc mount namespace: %w", err)
			return
		}
		if err = detachPinning(keep); err != nil {
			return
		}
		if err = unix.Mount("warren-net-sysctl", "/proc/sys/net", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555"); err != nil {
			err = fmt.Errorf("hide /proc/sys/net from runsc: %w", err)
			return
		}
		err = cmd.Start()
	})
	return err
}

// detachPinning detaches, in the calling thread's mount namespace, every
// mount that would pin another sandbox's resources (see startRunsc), but
// those under keep.
func detachPinning(keep string) error {
	mounts, err := mountinfo.ReadThread()
	if err != nil {
		return fmt.Errorf("runsc mount namespace: %w", err)
	}
	keep = filepath.Clean(keep) + "/"
	for _, m := range slices.Backward(mounts) { // submounts first
		pins := m.FSType == "nsfs" || strings.HasPrefix(m.FSType, "fuse") || strings.HasPrefix(m.Source, "/dev/loop")
		if !pins || strings.HasPrefix(m.Point+"/", keep) {
			continue
		}
		if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("runsc mount namespace: detach %s: %w", m.Point, err)
		}
	}
	return nil
}
