//go:build linux

package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setFilter installs filter with seccomp(SECCOMP_SET_MODE_FILTER,
// SECCOMP_FILTER_FLAG_TSYNC) on every thread of the process. The kernel
// copies the program, so filter need only live through the call.
func setFilter(filter []unix.SockFilter) error {
	if len(filter) == 0 || len(filter) > 0xffff {
		return fmt.Errorf("set filter: %d instructions", len(filter))
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	// With TSYNC a positive result is the ID of a thread that could not
	// take the filter (it has one that is not an ancestor of ours); then no
	// thread got it.
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d cannot be synchronised", r)
	}
	return nil
}
