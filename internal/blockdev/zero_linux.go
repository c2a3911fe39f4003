//go:build linux

package blockdev

import (
	"os"

	"golang.org/x/sys/unix"
)

// zeroRange makes [off, off+n) of f read as zeros by punching a hole, so the
// range takes no space.
func zeroRange(f *os.File, off, n int64) error {
	if n == 0 {
		return nil
	}
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
