//go:build linux

package agent

import "golang.org/x/sys/unix"

// FirstExecFiles are what a first exec in a sandbox of a Debian-like image
// reads: the shell, true, the dynamic loader and libc, and the user
// database. Each sandbox reads its disk through a loop device of its own,
// whose page cache no other sandbox shares, so a first exec that finds
// none of them cached waits some milliseconds for them (docs/BENCHMARKS.md,
// "Warm pools").
var FirstExecFiles = []string{
	"/bin/sh", "/usr/bin/true", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/etc/passwd", "/etc/group",
}

// maxPrefetch bounds what Prefetch reads ahead of one file.
const maxPrefetch = 8 << 20

// Prefetch asks the kernel to read paths into the page cache, without
// waiting for the reads: a container's init calls it once its root is the
// sandbox's disk, so that the reads overlap the rest of the sandbox's
// start. What is not a regular file (the disk is the tenant's: a path may
// be a FIFO or a device by now) is skipped, as is what is missing.
func Prefetch(paths []string) {
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			unix.Fadvise(fd, 0, min(st.Size, maxPrefetch), unix.FADV_WILLNEED)
		}
		unix.Close(fd)
	}
}
