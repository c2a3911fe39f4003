//go:build linux

package disk

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fitrim is FITRIM, _IOWR('X', 121, struct fstrim_range), which x/sys/unix
// does not define.
const fitrim = 0xc0185879

// fstrimRange is struct fstrim_range of linux/fs.h.
type fstrimRange struct {
	start, len, minlen uint64
}

// fiTrim discards every free extent of the filesystem that fd is open on.
func fiTrim(fd uintptr) error {
	r := fstrimRange{len: ^uint64(0)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, fitrim, uintptr(unsafe.Pointer(&r))); errno != 0 {
		return errno
	}
	return nil
}
