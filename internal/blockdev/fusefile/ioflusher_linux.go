//go:build linux

package fusefile

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// StartIOFlusher starts cmd, the process that will serve a File, as an I/O
// flusher (prctl PR_SET_IO_FLUSHER, Linux 5.6, CAP_SYS_RESOURCE): its
// memory allocations never recurse into file system or block I/O, and it
// is not throttled for dirty pages that are not its own. That breaks the
// writeback deadlock the package comment describes.
//
// The flag belongs to a thread. It is inherited by every thread and process
// the thread creates and kept across execve, so StartIOFlusher sets it on a
// locked OS thread, starts cmd from that thread, and clears it again before
// the thread goes back to the Go runtime: the calling process is not a
// flusher, every thread of the child is. If the flag cannot be cleared the
// thread ends instead, which also sends cmd's Pdeathsig, if it has one.
//
// Without CAP_SYS_RESOURCE the error wraps syscall.EPERM and cmd is not
// started; the caller decides whether to start it plainly.
func StartIOFlusher(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_IO_FLUSHER, 1, 0, 0, 0); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("start io flusher: prctl PR_SET_IO_FLUSHER: %w", err)
			return
		}
		err := cmd.Start()
		if unix.Prctl(unix.PR_SET_IO_FLUSHER, 0, 0, 0, 0) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// IsIOFlusher reports whether the calling thread is an I/O flusher. Only a
// goroutine locked to its thread learns anything lasting from it; in a
// process started by StartIOFlusher every thread is.
func IsIOFlusher() (bool, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_IO_FLUSHER, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Errorf("prctl PR_GET_IO_FLUSHER: %w", err)
	}
	return v == 1, nil
}
