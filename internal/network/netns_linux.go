//go:build linux

package network

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"warren/internal/osthread"
)

// routerSysctls are set in every router namespace when it is made: it
// forwards IPv4, answers every refusal at once, and has no IPv6 at all (the sandbox network is IPv4, and
// an IPv6 path would bypass every rule).
var routerSysctls = map[string]string{
	"/proc/sys/net/ipv4/ip_forward": "1",
	// Every refusal is an ICMP error, which must not be rate limited: a
	// connect would otherwise fail only at its SYN's retry, a second on.
	"/proc/sys/net/ipv4/icmp_ratelimit":            "0",
	"/proc/sys/net/ipv6/conf/all/disable_ipv6":     "1",
	"/proc/sys/net/ipv6/conf/default/disable_ipv6": "1",
}

// newNetNS makes a network namespace, sets routerSysctls in it and binds it
// at path (which must not exist), which keeps it alive without any process
// in it. On error nothing is left.
func newNetNS(path string) (err error) {
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
		for p, v := range routerSysctls {
			if err = os.WriteFile(p, []byte(v), 0); err != nil {
				err = fmt.Errorf("router sysctl: %w", err)
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

// rebind binds the namespace at from at to (which must not exist) and
// removes from.
func rebind(from, to string) error {
	f, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("network namespace file: %w", err)
	}
	f.Close()
	if err := unix.Mount(from, to, "", unix.MS_BIND, ""); err != nil {
		os.Remove(to)
		return fmt.Errorf("bind network namespace: %w", err)
	}
	return removeNetNS(from)
}

// removeNetNS unbinds and removes the namespace file at path; the namespace
// ends once nothing else holds it. A missing path is not an error.
func removeNetNS(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unbind network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
