//go:build linux

package agent

import "golang.org/x/sys/unix"

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
