//go:build linux

package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// loopAttachAttempts bounds the retries when a concurrent attacher takes the
// free device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const loopAttachAttempts = 32

// Loop is a loop device attached to an image file, and our open descriptor
// of it.
//
// Devices are attached with autoclear: the kernel detaches the device once
// nothing has it open or mounted. A caller that mounts the device may Close
// the Loop right after mounting (the mount keeps the device until unmount);
// a caller that uses the device directly keeps the Loop open while it does.
type Loop struct {
	path string
	f    *os.File
}

// LoopOptions say how a loop device reaches its image.
type LoopOptions struct {
	// ReadOnly devices refuse writes and need only read access to the image.
	ReadOnly bool
	// DirectIO bypasses the page cache of the image file, so that data a
	// filesystem on the device caches itself is not cached twice (the
	// kernel drops the request when the image's filesystem cannot do it).
	// Leave it off for an image whose cache is shared, like the XFS image
	// holding reflink clones: blocks the clones share are then read from
	// disk once for all of them.
	DirectIO bool
}

// AttachLoop attaches image to a free loop device.
func AttachLoop(image string, opts LoopOptions) (*Loop, error) {
	abs, err := filepath.Abs(image)
	if err != nil {
		return nil, fmt.Errorf("attach loop: %w", err)
	}
	flag := os.O_RDWR
	if opts.ReadOnly {
		flag = os.O_RDONLY
	}
	img, err := os.OpenFile(abs, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop: %w", err)
	}
	// The kernel takes its own reference to the file on LOOP_CONFIGURE.
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop: %w", err)
	}
	defer ctl.Close()

	for range loopAttachAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop: get free device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		l, err := configureLoop(dev, img, flag, opts.DirectIO, abs)
		if errors.Is(err, unix.EBUSY) {
			continue // another attacher won this device; ask for the next free one
		}
		if err != nil {
			return nil, fmt.Errorf("attach loop %s: %w", dev, err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("attach loop: no free device after %d attempts: %w", loopAttachAttempts, unix.EBUSY)
}

// configureLoop binds img to the loop device dev, opened with flag.
func configureLoop(dev string, img *os.File, flag int, directIO bool, name string) (*Loop, error) {
	f, err := os.OpenFile(dev, flag, 0)
	if err != nil {
		return nil, err
	}
	var cfg unix.LoopConfig
	cfg.Fd = uint32(img.Fd())
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if directIO {
		cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
	}
	if flag == os.O_RDONLY {
		cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
	}
	// lo_file_name is informational (losetup shows it) and NUL-terminated.
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
	err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
	if errors.Is(err, unix.EINVAL) && directIO {
		// Older kernels reject direct I/O they cannot do instead of
		// dropping the flag.
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Loop{path: dev, f: f}, nil
}

// Path is the device node, e.g. /dev/loop3.
func (l *Loop) Path() string { return l.path }

// File is our open descriptor of the device; it stays valid until Close.
func (l *Loop) File() *os.File { return l.f }

// Close closes our descriptor. Because of autoclear, the kernel then detaches
// the device as soon as nothing else has it open or mounted.
func (l *Loop) Close() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close loop %s: %w", l.path, err)
	}
	return nil
}

// StaleLoops lists the loop devices (e.g. /dev/loop3) whose backing file is
// under dir, sorted. A daemon calls it at start to find devices left behind
// by a crashed predecessor; tests call it to check that nothing leaked.
func StaleLoops(dir string) ([]string, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("stale loops: %w", err)
	}
	// The kernel reports backing files by their real path.
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	sysDirs, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return nil, fmt.Errorf("stale loops: %w", err)
	}
	var devs []string
	for _, d := range sysDirs {
		b, err := os.ReadFile(filepath.Join(d, "loop", "backing_file"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENXIO) {
			continue // not bound to a file, or detached meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("stale loops: %w", err)
		}
		backing := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
		if isUnder(root, backing) {
			devs = append(devs, "/dev/"+filepath.Base(d))
		}
	}
	sort.Strings(devs)
	return devs, nil
}

// isUnder reports whether path is dir or inside it; both must be clean and
// absolute.
func isUnder(dir, path string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// DetachLoop detaches the loop device dev (LOOP_CLR_FD). If the device is
// still open or mounted, the kernel detaches it when that ends. Detaching a
// device that is not attached is not an error.
func DetachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("detach loop: %w", err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach loop %s: %w", dev, err)
	}
	return nil
}
