//go:build linux

package containerinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// keptCaps is the capability set of a sandbox's root (within its own user
// namespace): enough to be root of its own files and processes, nothing
// that reaches kernel-wide state. CAP_SYS_ADMIN, CAP_NET_ADMIN,
// CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_SYS_TIME, CAP_SYS_RAWIO and the rest
// are gone from the bounding set, so no exec can get them back.
var keptCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
	unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW, unix.CAP_SYS_CHROOT,
	unix.CAP_MKNOD, unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP,
}

// KeptCapabilities lists the numbers of the capabilities a sandbox keeps,
// for documentation and tests.
func KeptCapabilities() []uintptr { return keptCaps }

// keptMask is keptCaps as a bit mask.
func keptMask() uint64 {
	var mask uint64
	for _, c := range keptCaps {
		mask |= 1 << c
	}
	return mask
}

// shrinkBoundingSet drops every capability but keptCaps from the bounding
// set of every thread, so no exec can ever gain them.
func shrinkBoundingSet() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	mask := keptMask()
	for c := uintptr(0); c <= last; c++ {
		if mask&(1<<c) != 0 {
			continue
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// limitCapabilities sets the permitted, effective and inheritable sets of
// every thread to keptCaps. With no_new_privs set after it, no process of
// the sandbox can hold more. The ambient set needs no step of its own: the
// init's new user namespace started it empty, nothing raises it, and the
// kernel keeps it within the permitted and inheritable sets.
func limitCapabilities() error {
	mask := keptMask()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		v := uint32(mask >> (32 * i))
		data[i] = unix.CapUserData{Effective: v, Permitted: v, Inheritable: v}
	}
	if err := capsetAllThreads(&hdr, &data); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// lastCap is the highest capability number the running kernel knows.
func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("bad cap_last_cap %q", b)
	}
	return uintptr(n), nil
}

// LimitExecs shrinks the bounding set of every thread of the process to
// keptCaps and sets no_new_privs: whatever the process starts holds
// keptCaps at most, and no exec gains more, while the process keeps its
// own. The gVisor runtime's init calls it (its capabilities are gVisor's
// kernel's, and it keeps CAP_SYS_ADMIN to set a forked sandbox's
// hostname).
func LimitExecs() error {
	if err := shrinkBoundingSet(); err != nil {
		return err
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}
