//go:build linux

// Package seccomp is the syscall filter of warren's container sandboxes.
//
// The container runtime calls Install in the sandbox's init process, after
// it has built the sandbox's namespaces, mounts and cgroup, right before it
// execs the guest agent as the sandbox's PID 1. The filter is inherited by
// every process in the sandbox and can never be removed or loosened (a
// later filter can only add denials).
//
// The filter allows by default and denies what a sandbox must never do on a
// shared kernel: load modules or kexec, reboot, set clocks, mount or pivot,
// enter or create namespaces, use bpf, perf, keyrings, userfaultfd or
// io_uring, and the like (Denied lists them). It is not the sandbox's
// isolation boundary on its own — namespaces, the user namespace, cgroups
// and dropped capabilities are — and it is not for jailing a VMM, which
// wants a far tighter allow-list of its own. It is x86_64 only: elsewhere
// Program and Install fail, so that no sandbox starts unfiltered.
//
// # Invariants
//
//   - A syscall not made through the x86_64 ABI kills the process: the filter
//     checks seccomp_data.arch first (an i386 int 0x80 call carries
//     AUDIT_ARCH_I386 and i386 numbers, which would otherwise slip past a
//     deny list of x86_64 numbers), then kills any x32 call (nr with
//     __X32_SYSCALL_BIT set: x32 shares the x86_64 arch value but numbers
//     its syscalls differently).
//   - Argument checks only read registers (clone and unshare flags,
//     personality), never user memory, so a sandboxed thread cannot change
//     what was checked after the check. clone3 passes its flags in memory,
//     which a filter cannot read, so clone3 fails with ENOSYS and libc falls
//     back to clone, whose flags it can read. (Go's os/exec calls clone3 only
//     for SysProcAttr.UseCgroupFD, which fails inside the sandbox.)
//   - Flag checks test the low 32 bits of the 64-bit argument: the kernel
//     reads clone's flags and personality's value as 32 bits, and rejects
//     unshare flags above bit 31 with EINVAL, so the high half can neither
//     hide nor add a namespace flag.
//   - Syscall numbers come from golang.org/x/sys/unix, never typed by hand.
//   - A default-allow filter does not deny syscalls added to later kernels;
//     new namespace-, mount- or kernel-state syscalls must be added to the
//     list when the kernel gains them.
package seccomp

import (
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// Install builds the filter and installs it on every thread of the calling
// process (SECCOMP_FILTER_FLAG_TSYNC), so that no Go runtime thread is left
// unfiltered, and every process forked afterwards inherits it. It sets
// no_new_privs first, as an unprivileged filter requires (a no-op when the
// runtime already set it), which TSYNC carries to every thread too. It
// cannot be undone.
func Install() error {
	raw, err := Program()
	if err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	// no_new_privs is per thread: set it and install the filter on the
	// same one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: set no_new_privs: %w", err)
	}
	if err := setFilter(filter); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}

// Denied names the syscalls the filter refuses, sorted, for documentation
// (docs/SECURITY.md). A plain name is refused with EPERM whatever its
// arguments; a name followed by a note in parentheses is refused as the
// note says. Beyond these, any syscall not made through the x86_64 ABI
// (i386, x32) kills the process.
func Denied() []string {
	var names []string
	for _, r := range rules {
		names = append(names, r.describe())
	}
	slices.Sort(names)
	return names
}
