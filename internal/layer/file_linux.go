//go:build linux

package layer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The FIEMAP ioctl (linux/fiemap.h, Documentation/filesystems/fiemap.rst).
const (
	fsIocFiemap = 0xc020660b // _IOWR('f', 11, struct fiemap)

	fiemapFlagSync = 0x1 // FIEMAP_FLAG_SYNC: write dirty data back first

	fiemapExtentLast        = 0x1   // the file's last extent
	fiemapExtentUnknown     = 0x2   // location unknown
	fiemapExtentDelalloc    = 0x4   // not allocated yet
	fiemapExtentEncoded     = 0x8   // compressed or encrypted: no plain address
	fiemapExtentNotAligned  = 0x100 // not block-aligned
	fiemapExtentDataInline  = 0x200 // stored in metadata
	fiemapExtentDataTail    = 0x400 // packed with other files' tails
	fiemapExtentUnwritten   = 0x800 // allocated, reads as zeros
	fiemapExtentNoPhysShare = fiemapExtentUnknown | fiemapExtentDelalloc | fiemapExtentEncoded |
		fiemapExtentNotAligned | fiemapExtentDataInline | fiemapExtentDataTail
)

// fiemapBatch is how many extents one FIEMAP call returns at most.
const fiemapBatch = 256

// fiemapHeader is struct fiemap without its extents.
type fiemapHeader struct {
	start, length uint64
	flags         uint32
	mapped        uint32
	count         uint32
	_             uint32
}

// fiemapExtent is struct fiemap_extent.
type fiemapExtent struct {
	logical, physical, length uint64
	_                         [2]uint64
	flags                     uint32
	_                         [3]uint32
}

// fiemapRequest is the ioctl's argument: a header and room for extents.
type fiemapRequest struct {
	hdr fiemapHeader
	ext [fiemapBatch]fiemapExtent
}

// physMap maps the data of f's first size bytes with FIEMAP (syncing f
// first, so that the addresses are final), unwritten extents counted as
// holes. Where the file system has no FIEMAP it falls back to dataMap,
// which shares nothing.
func physMap(f *os.File, size int64) ([]mapping, error) {
	var req fiemapRequest
	var out []mapping
	flags := uint32(fiemapFlagSync)
	for start := uint64(0); start < uint64(size); {
		req.hdr = fiemapHeader{start: start, length: uint64(size) - start, flags: flags, count: fiemapBatch}
		flags = 0 // synced once is enough
		if err := ioctlFiemap(f, &req); err != nil {
			if start == 0 && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY)) {
				return dataMap(f, size)
			}
			return nil, fmt.Errorf("fiemap: %w", err)
		}
		n := int(req.hdr.mapped)
		if n == 0 {
			break
		}
		for _, e := range req.ext[:n] {
			if e.flags&fiemapExtentUnwritten != 0 {
				continue
			}
			out = appendMapping(out, mapping{
				off:       int64(e.logical),
				len:       int64(e.length),
				phys:      int64(e.physical),
				shareable: e.flags&fiemapExtentNoPhysShare == 0,
			}, size)
		}
		last := req.ext[n-1]
		if last.flags&fiemapExtentLast != 0 {
			break
		}
		next := last.logical + last.length
		if next <= start {
			return nil, fmt.Errorf("fiemap: no progress at offset %d", start)
		}
		start = next
	}
	return out, nil
}

// appendMapping appends m clipped to [0, size) and to after the mappings
// before it (a file system may report an extent straddling a call's start
// again in the next call).
func appendMapping(ms []mapping, m mapping, size int64) []mapping {
	if n := len(ms); n > 0 && m.off < ms[n-1].end() {
		cut := ms[n-1].end() - m.off
		m.off, m.len, m.phys = m.off+cut, m.len-cut, m.phys+cut
	}
	m.len = min(m.len, size-m.off)
	if m.len <= 0 {
		return ms
	}
	return append(ms, m)
}

func ioctlFiemap(f *os.File, req *fiemapRequest) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	cerr := conn.Control(func(fd uintptr) {
		for {
			_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, fsIocFiemap, uintptr(unsafe.Pointer(req)))
			if errno != unix.EINTR {
				return
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// dataMap maps the data of f's first size bytes with SEEK_DATA and
// SEEK_HOLE, without physical addresses: nothing it returns is shareable.
func dataMap(f *os.File, size int64) ([]mapping, error) {
	var out []mapping
	for off := int64(0); off < size; {
		data, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, fmt.Errorf("seek data: %w", err)
		}
		if data >= size {
			break
		}
		hole, err := f.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole: %w", err)
		}
		hole = min(hole, size)
		out = append(out, mapping{off: data, len: hole - data})
		off = hole
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return out, nil
}

// punchHole makes [off, off+n) of f read as zeros, deallocating it.
func punchHole(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errors.ErrUnsupported
	}
	return err
}
