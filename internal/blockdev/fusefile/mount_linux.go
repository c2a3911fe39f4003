//go:build linux

package fusefile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/blockdev"
	"warren/internal/disk"
)

// File is one Device served as a regular file in a FUSE mount of its own.
type File struct {
	dir    string
	path   string
	conn   uint64 // the FUSE connection's number (the mount's device)
	srv    *fuse.Server
	served chan struct{} // closed when the server has stopped
	log    *slog.Logger

	mu     sync.Mutex // guards closed, and makes Close calls take turns
	closed bool
}

// Mount mounts a FUSE file system at dir, an existing empty directory,
// holding one regular file, name, whose bytes are dev's, and serves it until
// Close. It needs root: it calls mount(2) itself (no fusermount), and
// returns its error rather than fall back to the setuid helper, which would
// fail the same way for root and mount with other options for anyone else.
func Mount(dir, name string, dev blockdev.Device, opts Options) (*File, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// go-fuse answers lookups of its poll-hack name itself.
	if name == "" || name == "." || name == ".." || name == ".go-fuse-epoll-hack" || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("fusefile: bad file name %q", name)
	}
	if size := dev.Size(); size <= 0 || size%blockdev.BlockSize != 0 {
		return nil, fmt.Errorf("fusefile: device of %d bytes is not a whole number of %d-byte blocks", size, blockdev.BlockSize)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fusefile: %w", err)
	}
	if entries, err := os.ReadDir(dir); err != nil {
		return nil, fmt.Errorf("fusefile: mount point: %w", err)
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("fusefile: mount point %s is not empty", dir)
	}

	f := &File{
		dir:    dir,
		path:   filepath.Join(dir, name),
		served: make(chan struct{}),
		log:    log.With("file", filepath.Join(dir, name)),
	}
	f.srv, err = fuse.NewServer(newFileSystem(name, dev, f.log), dir, &fuse.MountOptions{
		FsName: "warren",
		Name:   "warren", // the type in /proc/mounts: fuse.warren
		// No allow_other: the kernel refuses every user but the one who
		// mounted (root) before asking us; default_permissions makes it
		// check the file's mode (0600, root's) too.
		Options:           []string{"default_permissions"},
		DirectMountStrict: true,
		DirectMountFlags:  syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC,
		MaxWrite:          MaxWrite,
		MaxBackground:     MaxRequests,
		// go-fuse holds a write's input buffer (MaxWrite and headers) and
		// a request struct of a few KiB until the write is answered; the
		// slack is more than those KiB and less than another buffer, so
		// at most MaxRequests writes' data is held at once. (A read's
		// small input is given back at once: see the package comment.)
		MaxInflightRequestBytes: MaxRequests * (MaxWrite + 64<<10),
		// Without it the kernel completes a direct-I/O loop device's
		// asynchronous requests one at a time; with it they are
		// background requests, up to MaxBackground at once.
		ExtraCapabilities:  fuse.CAP_ASYNC_DIO,
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		Logger:             slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
	})
	if err != nil {
		return nil, fmt.Errorf("fusefile: mount %s: %w", dir, err)
	}
	go func() {
		defer close(f.served)
		f.srv.Serve()
	}()
	if err := f.srv.WaitMount(); err != nil {
		f.Close()
		return nil, fmt.Errorf("fusefile: mount %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("fusefile: mount %s: %w", dir, err)
	}
	// fusectl names a connection by its device, as the kernel encodes it.
	f.conn = uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev))
	f.log.Info("serving device", "bytes", dev.Size())
	return f, nil
}

// Path is the served file, dir/name.
func (f *File) Path() string { return f.path }

// Close unmounts the file system and returns once the server has stopped
// and no call on the Device is running or will start. Calling it again
// after it succeeded does nothing.
//
// While anything holds the file open, a loop device above all, the kernel
// refuses the unmount: Close then returns an error that wraps
// syscall.EBUSY and names the loop devices holding the file, and leaves the
// file served. The caller detaches them (and waits for the kernel to drop
// the file, which autoclear does asynchronously) and calls Close again.
// Close does not unmount lazily: that would leave the loop device on a
// file system that nothing serves once the server stops, or keep the server
// running with no mount to find it by.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	select {
	case <-f.served:
		// Someone else unmounted it; the server has stopped.
	default:
		// A mount namespace made while the file was mounted (a
		// sandbox's, whose copy of the host's mounts is private) still
		// holds the file system after the unmount here: the connection
		// lives on, and the server with it (and Unmount, which waits for
		// it), until it is aborted. Those copies then fail, as they should:
		// nothing serves them.
		refused := make(chan struct{})
		go f.abortOnceUnmounted(refused)
		if err := f.srv.Unmount(); err != nil {
			close(refused)
			return f.unmountError(err)
		}
		<-f.served
	}
	f.closed = true
	f.log.Info("unmounted")
	return nil
}

func (f *File) unmountError(err error) error {
	if !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("fusefile: unmount %s: %w", f.dir, err)
	}
	loops, lerr := disk.StaleLoops(f.dir)
	if lerr != nil || len(loops) == 0 {
		return fmt.Errorf("fusefile: unmount %s: %w (the file is open)", f.dir, err)
	}
	return fmt.Errorf("fusefile: unmount %s: %w: loop device %s holds %s", f.dir, err, strings.Join(loops, ", "), f.path)
}

// abortOnceUnmounted aborts the connection once the mount point is no
// longer a FUSE mount, unless the server stopped first or the unmount was
// refused.
func (f *File) abortOnceUnmounted(refused <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		select {
		case <-f.served:
			return true, nil
		case <-refused:
			return true, nil
		default:
		}
		var st unix.Statfs_t
		if err := unix.Statfs(f.dir, &st); err != nil || st.Type == fuseMagic {
			return false, nil
		}
		return true, abortConn(f.conn)
	})
	if err != nil {
		f.log.Warn("abort the FUSE connection: the server may wait for a copy of its mount elsewhere", "err", err)
	}
}

// fuseMagic is a FUSE file system's magic number.
const fuseMagic = 0x65735546

// fusectl is where systemd mounts the kernel's FUSE control file system.
const fusectl = "/sys/fs/fuse/connections"

// abortConn aborts FUSE connection conn if it still exists, through the
// control file system: the host's, or, where the host has none mounted, one
// mounted for the purpose in a temporary directory (it is one file system
// wherever it is mounted) and unmounted after.
func abortConn(conn uint64) error {
	ctl := fusectl
	var st unix.Statfs_t
	if err := unix.Statfs(ctl, &st); err != nil || st.Type != fusectlMagic {
		tmp, err := os.MkdirTemp("", "warren-fusectl-")
		if err != nil {
			return err
		}
		defer os.Remove(tmp)
		if err := unix.Mount("fusectl", tmp, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer unix.Unmount(tmp, unix.MNT_DETACH)
		ctl = tmp
	}
	err := os.WriteFile(filepath.Join(ctl, strconv.FormatUint(conn, 10), "abort"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the connection has ended
	}
	return err
}

// fusectlMagic is the fusectl file system's magic number.
const fusectlMagic = 0x65735543
