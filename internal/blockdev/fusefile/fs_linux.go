//go:build linux

package fusefile

import (
	"errors"
	"log/slog"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"warren/internal/blockdev"
)

// The file system's two inodes. Neither ever changes or goes away, so
// lookups need no counting and Forget has nothing to do.
const (
	rootID = fuse.FUSE_ROOT_ID
	fileID = rootID + 1
)

// attrTimeout is how long the kernel may cache names and attributes. They
// never change while the file system is mounted (the device's size is
// fixed, times are the mount's), so a long timeout costs nothing.
const attrTimeout = time.Hour

// zeroBlock is the source of the zero writes for the partial blocks at the
// ends of a hole punch or zeroed range. It is only ever read.
var zeroBlock [blockdev.BlockSize]byte

// fileSystem is the FUSE file system: a root directory holding one regular
// file whose bytes are the device's. It keeps no state that changes: there
// are no file handles (Open answers Fh 0), and the size is fixed, so every
// request is answered from the request and the device alone, and requests
// may run concurrently as the Device allows.
//
// Operations it does not define answer ENOSYS through the embedded default,
// which the kernel turns into EOPNOTSUPP (xattrs) or falls back from
// (statx, lseek, copy_file_range). Everything that would change the tree
// answers EPERM explicitly.
type fileSystem struct {
	fuse.RawFileSystem

	name  string
	dev   blockdev.Device
	size  int64
	mtime time.Time // every inode's atime, mtime and ctime: the mount's
	log   *slog.Logger

	// calls holds a token for each request calling the device, so that at
	// most MaxRequests do at once.
	calls chan struct{}
}

func newFileSystem(name string, dev blockdev.Device, log *slog.Logger) *fileSystem {
	return &fileSystem{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		name:          name,
		dev:           dev,
		size:          dev.Size(),
		mtime:         time.Now(),
		log:           log,
		calls:         make(chan struct{}, MaxRequests),
	}
}

func (fs *fileSystem) String() string { return "warren-fusefile" }

// call takes a token of fs.calls for a request that calls the device, and
// returns the function that gives it back.
func (fs *fileSystem) call() (done func()) {
	fs.calls <- struct{}{}
	return func() { <-fs.calls }
}

func (fs *fileSystem) attr(id uint64, a *fuse.Attr) fuse.Status {
	*a = fuse.Attr{Ino: id, Blksize: blockdev.BlockSize}
	a.SetTimes(&fs.mtime, &fs.mtime, &fs.mtime)
	switch id {
	case rootID:
		a.Mode = syscall.S_IFDIR | 0o755
		a.Nlink = 2
	case fileID:
		a.Mode = syscall.S_IFREG | 0o600
		a.Nlink = 1
		a.Size = uint64(fs.size)
		a.Blocks = uint64(fs.size) / 512
	default:
		return fuse.ENOENT
	}
	return fuse.OK
}

func (fs *fileSystem) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if h.NodeId != rootID {
		return fuse.ENOTDIR
	}
	if name != fs.name {
		return fuse.ENOENT
	}
	out.NodeId = fileID
	out.Generation = 1
	out.SetEntryTimeout(attrTimeout)
	out.SetAttrTimeout(attrTimeout)
	return fs.attr(fileID, &out.Attr)
}

func (fs *fileSystem) Forget(nodeID, nlookup uint64) {}

func (fs *fileSystem) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.SetTimeout(attrTimeout)
	return fs.attr(in.NodeId, &out.Attr)
}

// SetAttr refuses every change but a truncate to the size the file already
// has; times are accepted and not kept (they are the mount's).
func (fs *fileSystem) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		return fuse.EPERM
	}
	if size, ok := in.GetSize(); ok && (in.NodeId != fileID || size != uint64(fs.size)) {
		return fuse.EPERM
	}
	out.SetTimeout(attrTimeout)
	return fs.attr(in.NodeId, &out.Attr)
}

// Open opens the file for direct I/O: the kernel keeps no page cache of it,
// so it never holds dirty pages only this server can write back (the
// package comment says why that matters), and writes to different ranges
// run in parallel instead of under the inode lock.
func (fs *fileSystem) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.NodeId != fileID {
		return fuse.EISDIR
	}
	out.OpenFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	return fuse.OK
}

// Read reads up to the end of the file; at or past it, nothing, as a
// regular file does.
func (fs *fileSystem) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if in.NodeId != fileID {
		return nil, fuse.EISDIR
	}
	if in.Offset >= uint64(fs.size) {
		return fuse.ReadResultData(nil), fuse.OK
	}
	n := min(int64(in.Size), int64(len(buf)), fs.size-int64(in.Offset))
	defer fs.call()()
	if _, err := fs.dev.ReadAt(buf[:n], int64(in.Offset)); err != nil {
		return nil, fs.fail("read", int64(in.Offset), n, err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

// Write writes within the file; a write reaching past its end is refused
// whole with EFBIG, as the file never grows.
func (fs *fileSystem) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.NodeId != fileID {
		return 0, fuse.EISDIR
	}
	if !fs.within(in.Offset, uint64(len(data))) {
		return 0, fuse.Status(syscall.EFBIG)
	}
	defer fs.call()()
	n, err := fs.dev.WriteAt(data, int64(in.Offset))
	if err != nil {
		return 0, fs.fail("write", int64(in.Offset), int64(len(data)), err)
	}
	return uint32(n), fuse.OK
}

// Flush runs on every close of a descriptor of the file: what was written
// through it is durable once close returns without error.
func (fs *fileSystem) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return fs.flush(in.NodeId)
}

// Fsync (and fdatasync: the file has no metadata of its own to skip)
// returns once Device.Flush has.
func (fs *fileSystem) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return fs.flush(in.NodeId)
}

func (fs *fileSystem) flush(id uint64) fuse.Status {
	if id != fileID {
		return fuse.OK
	}
	defer fs.call()()
	if err := fs.dev.Flush(); err != nil {
		return fs.fail("flush", 0, 0, err)
	}
	return fuse.OK
}

// Fallocate maps the modes a loop device and fstrim use onto the device:
// PUNCH_HOLE to Trim, ZERO_RANGE to WriteZeroes, and a plain allocation
// (every block of a device exists) to nothing. Nothing may grow the file.
func (fs *fileSystem) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if in.NodeId != fileID {
		return fuse.EISDIR
	}
	if in.Mode&unix.FALLOC_FL_KEEP_SIZE == 0 && !fs.within(in.Offset, in.Length) {
		return fuse.Status(syscall.EFBIG)
	}
	// With KEEP_SIZE, the part of the range past the end is left alone,
	// as on a regular file.
	off := min(in.Offset, uint64(fs.size))
	end := off + min(in.Length, uint64(fs.size)-off)
	switch in.Mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
		return fuse.OK
	case unix.FALLOC_FL_PUNCH_HOLE:
		return fs.zero("trim", int64(off), int64(end), fs.dev.Trim)
	case unix.FALLOC_FL_ZERO_RANGE:
		return fs.zero("write zeroes", int64(off), int64(end), fs.dev.WriteZeroes)
	default:
		return fuse.Status(syscall.EOPNOTSUPP)
	}
}

// zero makes [off, end) read as zeros: its whole blocks through whole,
// the partial blocks at either end by writing zeros over them.
func (fs *fileSystem) zero(op string, off, end int64, whole func(off, n int64) error) fuse.Status {
	const bs = blockdev.BlockSize
	defer fs.call()()
	head := min((off+bs-1)/bs*bs, end) // end of the partial block at off
	tail := max(end/bs*bs, head)       // start of the partial block at end
	if head > off {
		if _, err := fs.dev.WriteAt(zeroBlock[:head-off], off); err != nil {
			return fs.fail(op, off, head-off, err)
		}
	}
	if tail > head {
		if err := whole(head, tail-head); err != nil {
			return fs.fail(op, head, tail-head, err)
		}
	}
	if end > tail {
		if _, err := fs.dev.WriteAt(zeroBlock[:end-tail], tail); err != nil {
			return fs.fail(op, tail, end-tail, err)
		}
	}
	return fuse.OK
}

// within reports whether [off, off+n) lies in the file, without overflow.
func (fs *fileSystem) within(off, n uint64) bool {
	return off <= uint64(fs.size) && n <= uint64(fs.size)-off
}

// fail logs a device error and answers EIO, which is what a disk's
// failure looks like to the loop device and the file system above it, or
// ENOSPC for a volume past a bound (its durable bytes, the node's reserve),
// which the loop device passes up as a lack of space.
func (fs *fileSystem) fail(op string, off, n int64, err error) fuse.Status {
	fs.log.Error("device "+op+" failed", "offset", off, "bytes", n, "err", err)
	if errors.Is(err, syscall.ENOSPC) {
		return fuse.Status(syscall.ENOSPC)
	}
	return fuse.EIO
}

func (fs *fileSystem) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.NodeId != rootID {
		return fuse.ENOTDIR
	}
	return fuse.OK
}

func (fs *fileSystem) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	entries := []fuse.DirEntry{
		{Name: ".", Ino: rootID, Mode: syscall.S_IFDIR},
		{Name: "..", Ino: rootID, Mode: syscall.S_IFDIR},
		{Name: fs.name, Ino: fileID, Mode: syscall.S_IFREG},
	}
	// A directory offset is the index of the next entry to return.
	for i := in.Offset; i < uint64(len(entries)); i++ {
		e := entries[i]
		e.Off = i + 1
		if !out.AddDirEntry(e) {
			break
		}
	}
	return fuse.OK
}

func (fs *fileSystem) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	*out = fuse.StatfsOut{
		Blocks:  uint64(fs.size) / blockdev.BlockSize,
		Files:   2,
		Bsize:   blockdev.BlockSize,
		Frsize:  blockdev.BlockSize,
		NameLen: 255,
	}
	return fuse.OK
}

// The tree is fixed: one directory, one file.

func (fs *fileSystem) Mknod(<-chan struct{}, *fuse.MknodIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Mkdir(<-chan struct{}, *fuse.MkdirIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Unlink(<-chan struct{}, *fuse.InHeader, string) fuse.Status { return fuse.EPERM }

func (fs *fileSystem) Rmdir(<-chan struct{}, *fuse.InHeader, string) fuse.Status { return fuse.EPERM }

func (fs *fileSystem) Rename(<-chan struct{}, *fuse.RenameIn, string, string) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Link(<-chan struct{}, *fuse.LinkIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Symlink(<-chan struct{}, *fuse.InHeader, string, string, *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Create(<-chan struct{}, *fuse.CreateIn, string, *fuse.CreateOut) fuse.Status {
	return fuse.EPERM
}

func (fs *fileSystem) Tmpfile(<-chan struct{}, *fuse.CreateIn, *fuse.CreateOut) fuse.Status {
	return fuse.EPERM
}
