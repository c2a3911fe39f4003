//go:build linux

// Package netnsfile makes network namespaces that live in files: each is
// bound at a path, which keeps it alive with no process in it, until
// Remove. Routers (package network) and gVisor sandboxes' namespaces
// (package runtime/gvisor) are made so.
package netnsfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"warren/internal/osthread"
)

// Make makes a network namespace, writes sysctls (path → value, under
// /proc/sys/net) in it, and binds it at path, which must not exist. On
// error nothing is left.
func Make(path string, sysctls map[string]string) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("network namespace file: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		// /proc/sys/net shows the namespace of the thread that opens it.
		for p, v := range sysctls {
			if err = os.WriteFile(p, []byte(v), 0); err != nil {
				err = fmt.Errorf("network namespace sysctl: %w", err)
				return
			}
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err = unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			err = fmt.Errorf("bind network namespace: %w", err)
		}
	})
	return err
}

// Rebind binds the namespace at from at to (which must not exist) and
// removes from.
func Rebind(from, to string) error {
	f, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("network namespace file: %w", err)
	}
	f.Close()
	if err := unix.Mount(from, to, "", unix.MS_BIND, ""); err != nil {
		os.Remove(to)
		return fmt.Errorf("bind network namespace: %w", err)
	}
	return Remove(from)
}

// Remove unbinds and removes the namespace file at path; the namespace
// ends once nothing else holds it. A missing path is not an error.
func Remove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unbind network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
