//go:build linux

package vminit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/guest"

	"warren/internal/backoff"
)

// newRoot is where Setup mounts the root disk before switching into it.
const newRoot = "/newroot"

// diskWait bounds the wait for a disk, which appears asynchronously
// once virtio_blk is loaded. Generous: under software emulation (TCG) a
// guest is tens of times slower than the host.
const diskWait = 30 * time.Second

// Started reports whether this process is the init of a warren microVM:
// PID 1, on the initramfs (the kernel started it as /init), with
// warren.vm=1 on the kernel command line. It then must call Setup before it
// serves. To read the command line it mounts /proc, which nothing has
// mounted yet; that is its only effect, and only ever inside such a guest.
func Started() bool {
	if os.Getpid() != 1 || !onInitramfs() {
		return false
	}
	params, err := kernelParams()
	return err == nil && params[ParamVM] == "1"
}

// onInitramfs reports whether / is the kernel's initramfs (ramfs or tmpfs).
// A container's init starts on the host's root, never on one of these.
func onInitramfs() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return false
	}
	return st.Type == unix.RAMFS_MAGIC || st.Type == unix.TMPFS_MAGIC
}

// kernelParams reads the kernel command line, mounting /proc first when
// it is not there yet.
func kernelParams() (map[string]string, error) {
	data, err := os.ReadFile("/proc/cmdline")
	if errors.Is(err, os.ErrNotExist) {
		if err := mountFS("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return nil, err
		}
		data, err = os.ReadFile("/proc/cmdline")
	}
	if err != nil {
		return nil, fmt.Errorf("kernel command line: %w", err)
	}
	return parseCmdline(string(data)), nil
}

// parseCmdline splits a kernel command line into parameters: name=value,
// or a bare name (value ""); a value may be double-quoted to hold spaces,
// as the kernel allows. The last of repeated names wins.
func parseCmdline(s string) map[string]string {
	params := make(map[string]string)
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimLeft(s, " \t\n") {
		var field strings.Builder
		quoted := false
		i := 0
		for ; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				quoted = !quoted
				continue
			}
			if !quoted && (c == ' ' || c == '\t' || c == '\n') {
				break
			}
			field.WriteByte(c)
		}
		s = s[i:]
		name, value, _ := strings.Cut(field.String(), "=")
		params[name] = value
	}
	return params
}

// Setup turns the freshly booted guest into the sandbox: it mounts /proc,
// /sys and /dev (devtmpfs), loads the modules of ModulesManifest in order,
// waits for RootDevice, mounts it, mounts WorkspaceDevice on its
// WorkspaceDir when warren.workspace=1, moves /dev, /proc and /sys into it,
// empties the initramfs, makes the disk the root (mount --move, chroot:
// what switch_root does; pivot_root cannot leave the initramfs), sets the
// hostname from warren.hostname, brings loopback up and, when
// warren.network=1, configures the network device. It returns with the
// process in the new root; the caller then serves (vmport.Listen) as PID 1.
//
// On error the guest is half set up; the caller should say why on the
// console and power off.
func Setup() error {
	params, err := kernelParams()
	if err != nil {
		return err
	}
	if err := mountFS("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mountFS("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return err
	}
	if err := loadModules(ModulesManifest, ModulesDir); err != nil {
		return err
	}
	if err := mountDisk("root disk", RootDevice, newRoot); err != nil {
		return err
	}
	if params[ParamWorkspace] == "1" {
		// On the root disk, as the container runtime does: the mount
		// point is made if the template has none.
		if err := mountDisk("workspace disk", WorkspaceDevice, newRoot+WorkspaceDir); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if err := ensureDir(newRoot+d, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, newRoot+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s to the root disk: %w", d, err)
		}
	}
	if err := mountDev(newRoot); err != nil {
		return err
	}
	// The initramfs cannot be unmounted: it is the namespace's first mount.
	// What it holds (the modules, /init) would stay in RAM, out of reach,
	// for the guest's lifetime, so it is removed first, as switch_root does.
	// /init's pages stay until the agent exits (they are its text).
	if err := emptyInitramfs(); err != nil {
		return err
	}
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("enter the root disk: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root disk to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if hn := params[ParamHostname]; hn != "" {
		if err := unix.Sethostname([]byte(hn)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	if err := guest.Up("lo"); err != nil {
		return err
	}
	if params[ParamNetwork] == "1" {
		return network(params[ParamHostname])
	}
	return nil
}

// network configures the guest's interface, which appears asynchronously
// once virtio_net is loaded, and writes /etc/hosts and /etc/resolv.conf.
func network(hostname string) error {
	if err := waitFor(diskWait, func() bool { _, err := os.Stat("/sys/class/net/" + guest.Iface); return err == nil }); err != nil {
		return fmt.Errorf("network device %s did not appear: %w", guest.Iface, err)
	}
	if err := guest.Configure(); err != nil {
		return err
	}
	if err := guest.WriteFiles("/", hostname); err != nil {
		return fmt.Errorf("network files: %w", err)
	}
	return nil
}

// mountDisk waits for the ext4 disk dev to appear, which it does
// asynchronously once virtio_blk is loaded, and mounts it on dir, with
// online discard: QEMU (discard=unmap) punches what the guest frees out of
// the image, as the container runtime's loop device does (package
// internal/disk says why online at this layer).
func mountDisk(what, dev, dir string) error {
	if err := waitFor(diskWait, func() bool { _, err := os.Stat(dev); return err == nil }); err != nil {
		return fmt.Errorf("%s %s did not appear: %w", what, dev, err)
	}
	if err := mountFS(dev, dir, "ext4", 0, "discard"); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// mountDev completes /dev under root the way udev and systemd would: pty
// and shared-memory filesystems, the /proc/self/fd links, and a tmpfs /run.
func mountDev(root string) error {
	const nsd = unix.MS_NOSUID | unix.MS_NODEV
	if err := mountFS("devpts", root+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return err
	}
	if err := mountFS("shm", root+"/dev/shm", "tmpfs", nsd|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return err
	}
	links := [][2]string{
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], root+"/dev/"+l[1]); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("symlink /dev/%s: %w", l[1], err)
		}
	}
	return mountFS("tmpfs", root+"/run", "tmpfs", nsd, "mode=0755")
}

// emptyInitramfs removes every file of the initramfs, which is /, staying
// on its filesystem: what is mounted under it (the root disk) is left alone.
func emptyInitramfs() error {
	var st unix.Stat_t
	if err := unix.Lstat("/", &st); err != nil {
		return fmt.Errorf("empty initramfs: %w", err)
	}
	return removeOnDevice("/", st.Dev, false)
}

// removeOnDevice removes dir's entries that are on device dev, recursively,
// and dir itself when self is set.
func removeOnDevice(dir string, dev uint64, self bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty initramfs: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("empty initramfs: %w", err)
		}
		switch {
		case st.Dev != dev:
			// A mount point: not the initramfs's.
		case e.IsDir():
			if err := removeOnDevice(p, dev, true); err != nil {
				return err
			}
		default:
			if err := unix.Unlink(p); err != nil {
				return fmt.Errorf("empty initramfs: %w", err)
			}
		}
	}
	if self {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("empty initramfs: %w", err)
		}
	}
	return nil
}

// loadModules loads, in the manifest's order, each module NAME.ko of dir.
// One that is already loaded is fine.
func loadModules(manifest, dir string) error {
	data, err := os.ReadFile(manifest)
	if err != nil {
		return fmt.Errorf("kernel modules: %w", err)
	}
	for name := range strings.FieldsSeq(string(data)) {
		if err := loadModule(filepath.Join(dir, name+".ko")); err != nil {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.FinitModule(fd, "", 0); err != nil && err != unix.EEXIST {
		return err
	}
	return nil
}

// mountFS mounts src on dst (made if missing).
func mountFS(src, dst, fstype string, flags uintptr, data string) error {
	if err := ensureDir(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// ensureDir makes dir unless it exists as a directory.
func ensureDir(dir string, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(dir, mode); err != nil {
			return err
		}
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// waitFor polls cond with a short backoff until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) { return cond(), nil }) != nil {
		return fmt.Errorf("gave up after %v", timeout)
	}
	return nil
}
