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

// maskedFiles hide host information or kernel interfaces that /proc and
// /sys expose even inside namespaces; /dev/null is bound over each. The
// host's boot arguments, its disks and every sandbox's loop device with
// their I/O counters (a neighbour's activity), and the kernel's crash-dump
// layout (addresses that defeat KASLR).
var maskedFiles = []string{
	"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug",
	"proc/sysrq-trigger", "proc/latency_stats", "proc/kallsyms",
	"proc/cmdline", "proc/partitions", "proc/diskstats", "sys/kernel/vmcoreinfo",
}

// maskedDirs get an empty read-only tmpfs over them: firmware tables, and
// every view sysfs gives of the host's block devices (the sandboxes' loop
// devices among them, and the per-device ext4 and xfs directories named
// after them).
var maskedDirs = []string{
	"proc/acpi", "proc/scsi", "sys/firmware",
	"sys/block", "sys/class/block", "sys/dev/block", "sys/devices/virtual/block",
	"sys/fs/ext4", "sys/fs/xfs",
}

// bootID is the file that names the kernel's boot; the sandbox gets a
// random one of its own, as a machine that just booted would.
const bootID = "proc/sys/kernel/random/boot_id"

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

// maskProc hides and write-protects the parts of /proc and /sys listed
// above, and gives the sandbox a boot id of its own.
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
	if err := ownBootID(); err != nil {
		return err
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

// ownBootID binds a file holding a random UUID over the host's boot_id,
// read-only. The file is made in the sandbox's /dev tmpfs and unlinked
// there once bound: the mount alone keeps it.
func ownBootID() error {
	var b [16]byte
	if _, err := unix.Getrandom(b[:], 0); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	const tmp = "dev/.boot_id"
	if err := os.WriteFile(tmp, []byte(id), 0o444); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	defer os.Remove(tmp)
	if err := unix.Mount(tmp, bootID, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind boot id: %w", err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount(tmp, bootID, "", flags, ""); err != nil {
		return fmt.Errorf("read-only boot id: %w", err)
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
