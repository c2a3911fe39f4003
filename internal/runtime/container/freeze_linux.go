//go:build linux

package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/fsfreeze"
	"warren/internal/procid"
	"warren/internal/runtime/container/containerinit"
)

// Quiesce implements runtime.Instance: a sync of the filesystem, from the
// host, and nothing more. Freezing it would stall the sandbox for some
// 40 ms here, most of it the RCU grace periods FIFREEZE waits for
// (docs/BENCHMARKS.md, "Snapshot acknowledgement").
func (in *instance) Quiesce(ctx context.Context, path string) (func() error, error) {
	root, err := in.openMount(path)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", path, err)
	}
	defer root.Close()
	if err := unix.Syncfs(int(root.Fd())); err != nil {
		return nil, fmt.Errorf("sync %s: %w", path, err)
	}
	return func() error { return nil }, nil
}

// Freeze implements runtime.Instance. The freeze is done by the host: it
// needs CAP_SYS_ADMIN over the filesystem, which the sandbox's root does not
// have (its user namespace does not own the mount). The host reaches the
// sandbox's root directory through its init's /proc/PID/root.
//
// A frozen filesystem whose thaw never comes (the daemon dies in between)
// is thawed when the next daemon process adopts the sandbox.
func (in *instance) Freeze(ctx context.Context, path string) (func() error, error) {
	root, err := in.openMount(path)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", path, err)
	}
	t0 := time.Now()
	if err := unix.Syncfs(int(root.Fd())); err != nil {
		root.Close()
		return nil, fmt.Errorf("sync: %w", err)
	}
	t1 := time.Now()
	if err := fsfreeze.Freeze(int(root.Fd())); err != nil {
		root.Close()
		return nil, fmt.Errorf("freeze: %w", err)
	}
	in.r.log.Debug("freeze timings", "sandbox", in.id, "syncfs", t1.Sub(t0), "fifreeze", time.Since(t1))
	return func() error {
		defer root.Close()
		if err := fsfreeze.Thaw(int(root.Fd())); err != nil {
			return fmt.Errorf("thaw: %w", err)
		}
		return nil
	}, nil
}

// thaw thaws the sandbox's filesystem at path if it is frozen.
func (in *instance) thaw(path string) error {
	f, err := in.openMount(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := fsfreeze.Thaw(int(f.Fd())); !errors.Is(err, fsfreeze.ErrNotFrozen) {
		return err
	}
	return nil
}

// openMount opens the directory at path in the sandbox, "/" or
// "/workspace". The workspace is looked up inside the sandbox's root without
// following any symlink (the sandbox controls its tree), and must be the
// root of a filesystem of its own.
func (in *instance) openMount(path string) (*os.File, error) {
	root, err := in.openRoot()
	if err != nil || path == "/" {
		return root, err
	}
	defer root.Close()
	if path != "/"+containerinit.WorkspaceDir {
		return nil, fmt.Errorf("no disk is mounted at %q", path)
	}
	fd, err := unix.Openat2(int(root.Fd()), containerinit.WorkspaceDir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st, rst unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Fstat(int(root.Fd()), &rst); err != nil {
		f.Close()
		return nil, err
	}
	const ext4RootInode = 2
	if st.Dev == rst.Dev || st.Ino != ext4RootInode {
		f.Close()
		return nil, errors.New("/workspace is not the workspace disk's root")
	}
	return f, nil
}

// openRoot opens the root directory of the sandbox's init. It makes sure
// the pid still names that init, and that the directory is not on the
// host's root filesystem: freezing that would hang the host.
func (in *instance) openRoot() (*os.File, error) {
	select {
	case <-in.done:
		return nil, errors.New("the sandbox's init has exited")
	default:
	}
	root, err := os.Open(fmt.Sprintf("/proc/%d/root", in.st.PID))
	if err != nil {
		return nil, err
	}
	// Checked after the open (procid.Is): a reused pid shows another start
	// time.
	if !procid.Is(in.st.PID, in.st.StartTime) {
		root.Close()
		return nil, errors.New("the sandbox's init has exited")
	}
	var st, host unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		root.Close()
		return nil, err
	}
	if err := unix.Stat("/", &host); err != nil {
		root.Close()
		return nil, err
	}
	if st.Dev == host.Dev {
		root.Close()
		return nil, errors.New("the sandbox's root is on the host's root filesystem")
	}
	return root, nil
}
