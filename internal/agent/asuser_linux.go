//go:build linux

package agent

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// asUser runs fn with acc's filesystem credentials, so that what fn does
// to files the kernel checks as acc's (its uid, gid and groups) and what
// fn creates belongs to acc: a file API call naming a user can then do
// only what that user could, through any symlink. fn runs on an OS thread
// of its own, locked for the call, whose fsuid, fsgid and groups are set
// (per thread, raw syscalls; a root fsuid that becomes another drops the
// filesystem capabilities, as the kernel does for setfsuid) and put back
// after; if they cannot be put back, the thread ends with fn's goroutine.
//
// When the agent is not root, or acc is the agent's own identity, fn runs
// as is.
func asUser(acc *account, fn func() error) error {
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	if euid != 0 || (acc.uid == euid && acc.gid == egid) {
		return fn()
	}
	groups, err := unix.Getgroups()
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("agent groups: %w", err))
	}
	own := make([]uint32, len(groups))
	for i, g := range groups {
		own[i] = uint32(g)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := setThreadFSCreds(acc.uid, acc.gid, acc.groups); err != nil {
			done <- connect.NewError(connect.CodeInternal, fmt.Errorf("act as user %s: %w", acc.name, err))
			return // the thread ends, half switched
		}
		err := fn()
		if setThreadFSCreds(euid, egid, own) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// setThreadFSCreds sets the calling thread's supplementary groups, fsgid
// and fsuid (in that order: setgroups needs CAP_SETGID, which a non-root
// fsuid keeps) and checks that they took.
func setThreadFSCreds(uid, gid uint32, groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); e == unix.ENOSYS {
		if err := setThreadEffectiveIDs(uid, gid); err != nil {
			return err
		}
		return checkGroups(groups)
	}
	// setfsgid and setfsuid return the previous id, never an error: a call
	// with an invalid id changes nothing and tells the one in force.
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); uint32(got) != gid {
		return fmt.Errorf("setfsgid(%d): fsgid is %d", gid, got)
	}
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(got) != uid {
		return fmt.Errorf("setfsuid(%d): fsuid is %d", uid, got)
	}
	return checkGroups(groups)
}

// checkGroups checks that the calling thread's supplementary groups are
// groups.
func checkGroups(groups []uint32) error {
	got := make([]uint32, len(groups)+1)
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, uintptr(len(got)), uintptr(unsafe.Pointer(&got[0])), 0)
	want := slices.Sorted(slices.Values(groups)) // the kernel keeps them sorted
	if e != 0 || !slices.Equal(got[:n], want) {
		return fmt.Errorf("setgroups(%v): groups are %v (%v)", groups, got[:n], e)
	}
	return nil
}

// setThreadEffectiveIDs is setThreadFSCreds's way where the kernel has no
// setfsuid (gVisor's): the thread's effective uid and gid, which the
// filesystem ids follow, with the saved ids left as they are (root's), so
// that the thread can switch back. A root euid that becomes another clears
// the effective capabilities, and switching back restores them, as
// setfsuid does for the filesystem's. The gid changes while the thread is
// still root, and back after it is root again.
func setThreadEffectiveIDs(uid, gid uint32) error {
	setgid := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresgid(-1, %d, -1): %w", gid, e)
		}
		return nil
	}
	setuid := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid(-1, %d, -1): %w", uid, e)
		}
		return nil
	}
	steps := []func() error{setgid, setuid}
	if uid == 0 {
		steps = []func() error{setuid, setgid}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	if u, g := unix.Geteuid(), unix.Getegid(); uint32(u) != uid || uint32(g) != gid {
		return fmt.Errorf("effective ids are %d:%d, want %d:%d", u, g, uid, gid)
	}
	return nil
}
