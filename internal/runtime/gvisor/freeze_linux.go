//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"warren/internal/fsfreeze"
)

// Quiesce implements runtime.Instance: the Sentry writes file data through
// to the host's files as the sandbox writes it (no data is cached in the
// Sentry but what the sandbox maps), so a sync of the disk's host mount is
// what a clone needs, as for a container.
func (in *instance) Quiesce(ctx context.Context, path string) (func() error, error) {
	f, err := in.openDisk(path)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return nil, fmt.Errorf("sync %s: %w", path, err)
	}
	return func() error { return nil }, nil
}

// Freeze implements runtime.Instance. The host freezes the disk's mount:
// it is the host's, and the Sentry's writes to it wait in the host kernel
// until the thaw. A daemon that dies in between leaves the disk frozen
// until the next one adopts the sandbox.
func (in *instance) Freeze(ctx context.Context, path string) (func() error, error) {
	f, err := in.openDisk(path)
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", path, err)
	}
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("sync: %w", err)
	}
	if err := fsfreeze.Freeze(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("freeze: %w", err)
	}
	return func() error {
		defer f.Close()
		if err := fsfreeze.Thaw(int(f.Fd())); err != nil {
			return fmt.Errorf("thaw: %w", err)
		}
		return nil
	}, nil
}

// openDisk opens the host mount of the sandbox's disk at path, refusing a
// directory that is not a mount of its own (freezing the host's root
// filesystem would hang the host).
func (in *instance) openDisk(path string) (*os.File, error) {
	dir, err := in.diskDir(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	var st, parent unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Stat(in.dir, &parent); err != nil {
		f.Close()
		return nil, err
	}
	if st.Dev == parent.Dev {
		f.Close()
		return nil, fmt.Errorf("%s is not mounted", dir)
	}
	return f, nil
}
