//go:build linux

package containerinit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hostDevices are the device nodes a sandbox gets, bound from the host's
// /dev. Nothing else: no block devices, no /dev/kvm, no /dev/mem.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// maskedFiles hide host information or kernel interfaces that /proc exposes
// even inside namespaces; /dev/null is bound over each.
var maskedFiles = []string{
	"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug",
	"proc/sysrq-trigger", "proc/latency_stats", "proc/kallsyms",
}

// maskedDirs get an empty read-only tmpfs over them.
var maskedDirs = []string{"proc/acpi", "proc/scsi", "sys/firmware"}

// readOnly are made read-only: bound on themselves, then remounted.
var readOnly = []string{"proc/sys", "proc/irq", "proc/bus", "proc/fs"}

// mountSystem mounts the kernel filesystems and /dev under the current
// directory, which is the sandbox's root before pivot_root.
func mountSystem() error {
	const (
		nsd = unix.MS_NOSUID | unix.MS_NODEV
		all = nsd | unix.MS_NOEXEC
	)
	steps := []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "proc", "proc", all, ""},
		{"sysfs", "sys", "sysfs", all | unix.MS_RDONLY, ""},
		{"tmpfs", "dev", "tmpfs", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=755,size=1m"},
	}
	for _, s := range steps {
		if err := ensureDir(s.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(s.src, s.dst, s.fstype, s.flags, s.data); err != nil {
			return fmt.Errorf("mount %s: %w", s.dst, err)
		}
	}
	for _, d := range hostDevices {
		dst := "dev/" + d
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return fmt.Errorf("device %s: %w", d, err)
		}
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	for _, d := range []string{"dev/pts", "dev/shm"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := unix.Mount("devpts", "dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mount dev/pts: %w", err)
	}
	if err := unix.Mount("shm", "dev/shm", "tmpfs", all, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount dev/shm: %w", err)
	}
	links := [][2]string{
		{"pts/ptmx", "dev/ptmx"}, {"/proc/self/fd", "dev/fd"},
		{"/proc/self/fd/0", "dev/stdin"}, {"/proc/self/fd/1", "dev/stdout"}, {"/proc/self/fd/2", "dev/stderr"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return fmt.Errorf("symlink %s: %w", l[1], err)
		}
	}
	if err := ensureDir("run", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "run", "tmpfs", nsd, "mode=755,size=64m"); err != nil {
		return fmt.Errorf("mount run: %w", err)
	}
	return maskProc()
}

// maskProc hides and write-protects the parts of /proc and /sys listed above.
func maskProc() error {
	for _, f := range maskedFiles {
		if _, err := os.Lstat(f); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", f, err)
		}
	}
	for _, d := range maskedDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_RDONLY, "size=0"); err != nil {
			return fmt.Errorf("mask %s: %w", d, err)
		}
	}
	for _, p := range readOnly {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if err := unix.Mount(p, p, "", flags, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", p, err)
		}
	}
	return nil
}

// ensureDir makes dir unless it exists as a directory. The disk is the
// sandbox's own, so a file or symlink there is refused rather than followed.
func ensureDir(dir string, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.Mkdir(dir, mode)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s on the sandbox disk is not a directory", dir)
	}
	return nil
}
