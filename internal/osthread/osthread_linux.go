//go:build linux

// Package osthread runs code on an OS thread of its own that is thrown away
// afterwards, for work that changes a thread's namespaces, root or
// credentials: no other goroutine ever runs on that thread after it.
package osthread

import (
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// Throwaway runs f on an OS thread that ends when f returns, and waits for
// it. f may change its thread's namespaces, root and credentials at will.
//
// The Go runtime ends a thread whose goroutine exits locked to it, except
// the main thread, which it cannot end and wedges instead. The main thread
// must never be changed: it would stay so, and /proc/self (the thread group
// leader's view) would show its mounts and namespaces to the whole process.
// So when the locked goroutine finds itself on the main thread, it holds
// that thread (no other goroutine can take it) and tries again from there.
func Throwaway(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		goruntime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			Throwaway(f)
			goruntime.UnlockOSThread()
			return
		}
		f()
		// Still locked: the runtime ends this thread now.
	}()
	<-done
}
