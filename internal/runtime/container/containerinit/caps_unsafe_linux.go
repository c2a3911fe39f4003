//go:build linux

package containerinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// capsetAllThreads is capset(2) on every OS thread: capabilities belong to
// each thread, and unix.Capset would change only the calling one.
func capsetAllThreads(hdr *unix.CapUserHeader, data *[2]unix.CapUserData) error {
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
