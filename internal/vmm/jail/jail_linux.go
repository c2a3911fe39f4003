//go:build linux

// Package jail starts a VMM process confined so that, if a guest breaks out
// into it, it holds as little as possible of the host:
//
//   - New mount, pid, network, uts and ipc namespaces. The VMM is PID 1 of
//     its pid namespace and sees no other process (no /proc is mounted);
//     its network namespace has only a loopback that is down, so neither
//     the network nor the host's abstract unix sockets are reachable.
//   - A root of its own: a tmpfs, read-only once built, holding /usr (bound
//     read-only: the binary, its libraries, its firmware), the /lib, /lib64,
//     /bin and /sbin links or binds the host has, /etc/ld.so.cache,
//     /dev/{null,zero,random,urandom} plus the devices asked for (/dev/kvm),
//     and the files asked for, read-only (a kernel, an initrd). Nothing else
//     of the host is mounted: no /proc, /sys, /tmp, /home, /root, /etc or
//     data directory. Everything else the VMM needs read-write (disk image,
//     sockets, logs, snapshots) is an inherited file descriptor.
//   - An unprivileged uid and gid (never 0), so no capabilities, and
//     no_new_privs, so nothing it executes can gain any.
//   - Its own session, so no terminal signal reaches it, and no parent-death
//     signal: it does not die with the caller, who may be restarting.
//
// It does not put the process in a cgroup (the caller does, before the
// process runs untrusted code: see vmm/qemu), install a seccomp filter (QEMU
// installs its own with -sandbox; warren's own filter for VMMs is future
// work), set rlimits other than RLIMIT_CORE, or use a user namespace.
//
// # How
//
// The root is built in a mount namespace made for one OS thread: Start locks
// a goroutine to its thread, unshares the mount namespace (the rest of the
// process keeps the host's), builds the tmpfs root, pivot_roots the thread
// into it and detaches the host's mounts, then forks the VMM from that
// thread, which the child inherits. The goroutine then returns without
// unlocking, so the Go runtime ends the thread and its namespace is the
// VMM's alone. Go creates new threads from a clean template thread while
// one is locked (since Go 1.10), so no other thread inherits the jail. The
// main thread is never used: Go cannot end it (see package osthread).
package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"warren/internal/osthread"
)

// File is a host file shown read-only inside the jail.
type File struct {
	// Source is the host path.
	Source string
	// Target is the absolute path inside the jail, outside /usr, /dev, /etc
	// and the top-level links.
	Target string
}

// Spec is one process to start in a jail.
type Spec struct {
	// Path is the absolute host path of the binary; it must be under /usr,
	// the only host tree the jail shows, and is executed at the same path.
	Path string
	// Args are the arguments after argv[0] (which is Path).
	Args []string
	// Env is the whole environment.
	Env []string
	// ExtraFiles become file descriptors 3, 4, ... in the process, as in
	// exec.Cmd.
	ExtraFiles []*os.File
	// Stdout and Stderr receive the process's output; nil is /dev/null.
	// Stdin is always /dev/null.
	Stdout, Stderr *os.File
	// Files are host files bound read-only into the jail.
	Files []File
	// Devices are host device nodes (absolute paths under /dev) made in the
	// jail's /dev at the same path, with the host's mode and owner, besides
	// /dev/null, /dev/zero, /dev/random and /dev/urandom.
	Devices []string
	// UID and GID are the host ids the process runs as; never 0.
	UID, GID uint32
	// Groups are supplementary groups (e.g. /dev/kvm's group).
	Groups []uint32
	// Mountpoint is an existing empty directory on the host. The jail's
	// root is mounted on it, in the jail's mount namespace only; the host
	// never sees anything there. Many jails share one.
	Mountpoint string
}

// baseDevices are made in every jail.
var baseDevices = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}

// topLinks are the top-level paths recreated from the host when present:
// links to /usr on merged-/usr systems, read-only binds otherwise.
var topLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the only files of the host's /etc in the jail: the dynamic
// loader needs its cache to find libraries in multiarch directories.
var etcFiles = []string{"/etc/ld.so.cache"}

// reserved are jail paths Files may not be placed under.
var reserved = append([]string{"/usr", "/dev", "/etc"}, topLinks...)

func (s *Spec) validate() error {
	if !filepath.IsAbs(s.Path) || filepath.Clean(s.Path) != s.Path || !strings.HasPrefix(s.Path, "/usr/") {
		return fmt.Errorf("binary %q must be a clean absolute path under /usr", s.Path)
	}
	if s.UID == 0 || s.GID == 0 {
		return errors.New("a jailed process may not run as uid or gid 0")
	}
	if fi, err := os.Stat(s.Mountpoint); err != nil || !fi.IsDir() {
		return fmt.Errorf("jail mountpoint %q is not a directory", s.Mountpoint)
	}
	for _, f := range s.Files {
		t := f.Target
		if !filepath.IsAbs(t) || filepath.Clean(t) != t || t == "/" {
			return fmt.Errorf("jail file target %q must be a clean absolute path", t)
		}
		for _, r := range reserved {
			if t == r || strings.HasPrefix(t, r+"/") {
				return fmt.Errorf("jail file target %q is under %s", t, r)
			}
		}
		if fi, err := os.Stat(f.Source); err != nil {
			return fmt.Errorf("jail file: %w", err)
		} else if !fi.Mode().IsRegular() {
			return fmt.Errorf("jail file %s is not a regular file", f.Source)
		}
	}
	for _, d := range s.Devices {
		if filepath.Dir(d) != "/dev" {
			return fmt.Errorf("device %q is not directly under /dev", d)
		}
		if fi, err := os.Stat(d); err != nil {
			return fmt.Errorf("device: %w", err)
		} else if fi.Mode()&fs.ModeDevice == 0 {
			return fmt.Errorf("%s is not a device", d)
		}
	}
	return nil
}

// Start starts the process described by spec in a new jail and returns it
// started; the caller waits for it (cmd.Wait) and owns it. On error nothing
// is running and nothing is left mounted.
func Start(spec Spec) (*exec.Cmd, error) {
	if err := spec.validate(); err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	var r struct {
		cmd *exec.Cmd
		err error
	}
	osthread.Throwaway(func() {
		r.cmd, r.err = startOnThisThread(&spec)
	})
	if r.err != nil {
		return nil, fmt.Errorf("jail: %w", r.err)
	}
	return r.cmd, nil
}

// startOnThisThread runs on a locked thread that is thrown away afterwards.
func startOnThisThread(spec *Spec) (*exec.Cmd, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Nothing done below may propagate to the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	root := spec.Mountpoint
	// No nodev: the device nodes made below live on it. No exec either
	// way matters: binaries come from the /usr bind.
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID, "mode=0755,size=1m,nr_inodes=1024"); err != nil {
		return nil, fmt.Errorf("mount jail root: %w", err)
	}
	if err := buildRoot(root, spec); err != nil {
		return nil, err
	}
	if err := enterRoot(root); err != nil {
		return nil, err
	}
	// Inherited by the child: nothing it executes gains privileges.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("no_new_privs: %w", err)
	}
	groups := make([]uint32, len(spec.Groups))
	copy(groups, spec.Groups)
	cmd := &exec.Cmd{
		Path:       spec.Path,
		Args:       append([]string{spec.Path}, spec.Args...),
		Env:        spec.Env,
		Dir:        "/",
		ExtraFiles: spec.ExtraFiles,
		SysProcAttr: &syscall.SysProcAttr{
			// The mount namespace is this thread's, already the jail's.
			Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
			Credential: &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: groups},
			Setsid:     true,
			// No Pdeathsig: it fires when the forking thread ends, which is
			// now; and a VMM outlives a restarting daemon on purpose.
		},
	}
	// Set only when non-nil: a nil *os.File in an io.Writer is not nil.
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(spec.Path), err)
	}
	if err := noCoreDumps(cmd.Process.Pid, spec.UID, spec.GID); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("limit core dumps: %w", err)
	}
	return cmd, nil
}

// noCoreDumps sets RLIMIT_CORE of process pid to 0: a VMM's core dump
// would hold guest memory. (The process has not reached the guest yet, so a
// dump before this holds no guest data.)
//
// Setting another uid's limit needs CAP_SYS_RESOURCE, which a daemon in a
// container may lack (it does on the machines warren is built on), or the
// same uids. So this thread, which is thrown away afterwards, takes the
// process's uid and gid first: set*id as raw syscalls change only the
// calling thread (glibc's and Go's wrappers would change them all).
func noCoreDumps(pid int, uid, gid uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid on jail thread: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid on jail thread: %w", e)
	}
	zero := unix.Rlimit{}
	return unix.Prlimit(pid, unix.RLIMIT_CORE, &zero, nil)
}

// buildRoot fills the tmpfs at root.
func buildRoot(root string, spec *Spec) error {
	if err := bindDir("/usr", filepath.Join(root, "usr")); err != nil {
		return err
	}
	for _, p := range topLinks {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
				return fmt.Errorf("jail link %s: %w", p, err)
			}
		case fi.IsDir():
			if err := bindDir(p, filepath.Join(root, p)); err != nil {
				return err
			}
		}
	}
	for _, p := range etcFiles {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := bindFile(p, filepath.Join(root, p)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	for _, d := range slices.Concat(baseDevices, spec.Devices) {
		if err := copyDevice(d, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	for _, f := range spec.Files {
		if err := bindFile(f.Source, filepath.Join(root, f.Target)); err != nil {
			return err
		}
	}
	return nil
}

// bindDir binds host directory src at dst, read-only, nosuid, nodev.
func bindDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return bindReadOnly(src, dst)
}

// bindFile binds host file src at dst, read-only.
func bindFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return fmt.Errorf("jail file %s: %w", dst, err)
	}
	f.Close()
	return bindReadOnly(src, dst)
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	// A bind keeps the source's flags until remounted; read-only needs the
	// remount (and then keeps nosuid, nodev).
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", src, err)
	}
	return nil
}

// copyDevice makes a device node at dst like the host's src.
func copyDevice(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("device %s: %w", src, err)
	}
	if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
		return fmt.Errorf("make device %s: %w", src, err)
	}
	// Mknod applies the umask; restore the host's mode and owner.
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.Chown(dst, int(st.Uid), int(st.Gid))
}

// enterRoot makes root this thread's root and detaches every host mount
// from the namespace, then makes the root read-only.
func enterRoot(root string) error {
	old := filepath.Join(root, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host mounts: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("make jail root read-only: %w", err)
	}
	return nil
}
