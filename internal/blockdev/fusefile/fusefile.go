// Package fusefile serves one blockdev.Device as a single regular file in a
// FUSE mount, for a loop device to attach: the container runtime's front end
// for always-on disks on hosts without the kernel's NBD client. The sandbox's
// ext4 is mounted from the loop device, and each block it reads or writes
// becomes a read or write of the file and so a call on the Device.
//
// It is not a file system for people or sandboxes to use: the mount holds the
// one file, of the device's size, mode 0600, owned by root, and nothing in it
// can be created, removed, renamed, resized or given xattrs (EPERM, or
// EOPNOTSUPP for xattrs). Only root reaches it: the mount has
// default_permissions and no allow_other. It shows in /proc/mounts as
// "warren DIR fuse.warren".
//
// # What reaches the device
//
//   - read: ReadAt, up to the end of the file.
//   - write: WriteAt. A write reaching past the end fails with EFBIG: the
//     file never grows.
//   - fsync, fdatasync, and every close (FUSE's flush): Flush, before they
//     return. A loop device turns a flush request (REQ_PREFLUSH, what ext4's
//     journal commits send) into fsync.
//   - fallocate PUNCH_HOLE|KEEP_SIZE (a loop device's discard, so fstrim and
//     ext4's -o discard): Trim. ZERO_RANGE: WriteZeroes. Both hand whole
//     blocks to the device and write zeros over the partial blocks at their
//     ends. A plain fallocate within the file does nothing; one that would
//     grow it fails with EFBIG.
//   - truncate to the file's size succeeds and does nothing; to any other
//     size, EPERM. So does open with O_TRUNC.
//
// # The writeback deadlock
//
// A FUSE file under a loop device can deadlock under memory pressure: the
// kernel waits for this server to write back dirty pages of the FUSE file,
// while the server waits for memory that reclaim can only free by writing
// back those same pages. Three things keep that from happening:
//
//   - The file is opened with FOPEN_DIRECT_IO: the FUSE file has no page
//     cache, so no dirty page of it ever exists. Each loop request becomes
//     FUSE requests of at most MaxWrite bytes, answered before the loop
//     device completes it. The dirty pages that remain are those of the ext4
//     above the loop device, and their writeback is exactly the I/O this
//     server does.
//   - The server must not need that writeback to make progress: the daemon
//     starts the process that serves Files with StartIOFlusher, which makes
//     every thread of it an I/O flusher (PR_SET_IO_FLUSHER): its allocations
//     reclaim without starting I/O (PF_MEMALLOC_NOIO), and its own writes to
//     the local cache are not held up for the dirty pages of other devices
//     (PF_LOCAL_THROTTLE). It needs CAP_SYS_RESOURCE; where the daemon lacks
//     it (the bounding set of the development host drops it), the daemon
//     can only start the server plainly and log that it is unprotected.
//   - The server's memory is bounded, below.
//
// A loop device over the file works with direct I/O on (LO_FLAGS_DIRECT_IO,
// losetup --direct-io=on; checked on Linux 6.18), and should have it: the
// loop device then does not cache the file's pages a second time beside
// ext4's, and, as the server offers FUSE's asynchronous direct I/O, it sends
// requests concurrently. With direct I/O off it sends them one at a time
// (per cgroup issuing I/O). BenchmarkFUSE measures both.
//
// # Bounds
//
// Requests carry at most MaxWrite bytes, and at most MaxRequests of them
// call the device at once; the rest wait their turn in the server. The data
// of at most MaxRequests writes is held at once (go-fuse's in-flight budget:
// the kernel's further writes wait in the kernel). A read holds a reply
// buffer of up to MaxWrite from the moment go-fuse takes it from the kernel,
// and go-fuse does not count those, so how many reads wait in the server is
// bounded by what the kernel sends: at most MaxRequests asynchronous
// requests (a direct-I/O loop device's), plus one synchronous request per
// task blocked in I/O on the file: the loop device's workers, one per cgroup
// issuing I/O, and root's own processes, as no one else may open the file.
//
// The process serving a File must not itself use it: a thread of it blocked
// on the file when the process is killed (a close waiting on its flush, say)
// keeps the process, and so the FUSE connection, from ever going away.
// Tests do use the file from the serving process; when one is killed
// mid-request, umount -f of its mount directory aborts the connection.
package fusefile

import "log/slog"

const (
	// MaxWrite is the most bytes one FUSE read or write request carries
	// (Linux's own limit with the default fs.fuse.max_pages_limit).
	MaxWrite = 1 << 20
	// MaxRequests is how many requests call a File's device at once, and
	// how many writes' data the server holds. It is also the kernel's limit
	// of asynchronous requests in flight (max_background).
	MaxRequests = 16
)

// Options are a File's settings.
type Options struct {
	// Log receives the server's warnings and the device's errors; nil
	// discards them.
	Log *slog.Logger
}
