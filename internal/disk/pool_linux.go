//go:build linux

package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
)

const (
	disksDirName = "disks"       // the image directory, under the data directory
	xfsImageName = "reflink.xfs" // the XFS image, under the data directory
)

// Pool is the directory where disk images live, plus how it clones them.
// Its methods may be called concurrently.
type Pool struct {
	dir  string
	mode CloneMode
	// loop is our descriptor of the XFS image's device when this Open
	// attached it, nil otherwise; Close releases it. The mount, not this
	// descriptor, keeps the device attached: with autoclear the kernel
	// detaches it once it is unmounted and no longer open.
	loop *Loop
	// image is the XFS image's path in the CloneReflinkXFSLoop mode, ""
	// otherwise.
	image string
	// stopTrim ends the trimmer, which closes trimDone when it is gone;
	// both are nil when the pool does not trim (see startTrimmer).
	stopTrim context.CancelFunc
	trimDone chan struct{}
}

// Open prepares the image directory dataDir/disks and finds the best way to
// clone in it: reflink if dataDir's filesystem has it; otherwise, as root
// with mkfs.xfs installed, a sparse XFS image dataDir/reflink.xfs with reflink,
// loop-mounted on dataDir/disks (created the first time, reused when already
// mounted, e.g. after a daemon restart); otherwise full copies, with a warning.
// Concurrent Opens of one dataDir are serialized.
func Open(ctx context.Context, dataDir string, log *slog.Logger, opts Options) (*Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.XFSImageSize < 0 {
		return nil, fmt.Errorf("open disk pool: negative xfs image size %d", opts.XFSImageSize)
	}
	if opts.XFSImageSize == 0 {
		opts.XFSImageSize = DefaultXFSImageSize
	}
	if opts.TrimInterval < 0 {
		return nil, fmt.Errorf("open disk pool: negative trim interval %v", opts.TrimInterval)
	}
	if opts.TrimInterval == 0 {
		opts.TrimInterval = DefaultTrimInterval
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("open disk pool: %w", err)
	}
	// Mount points and loop backing files are reported by real path.
	root, err := filepath.EvalSymlinks(dataDir)
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		return nil, fmt.Errorf("open disk pool: %w", err)
	}
	unlock, err := lockDir(root)
	if err != nil {
		return nil, fmt.Errorf("open disk pool: %w", err)
	}
	defer unlock()
	p, err := open(ctx, root, log, opts)
	if err != nil {
		return nil, fmt.Errorf("open disk pool: %w", err)
	}
	if p.mode == CloneReflinkXFSLoop {
		p.startTrimmer(log, opts.TrimInterval)
	}
	log.Info("disk pool open", "dir", p.dir, "clone", p.mode.String())
	return p, nil
}

func open(ctx context.Context, dataDir string, log *slog.Logger, opts Options) (*Pool, error) {
	disks := filepath.Join(dataDir, disksDirName)
	image := filepath.Join(dataDir, xfsImageName)
	m, mounted, err := mountAt(disks)
	if err != nil {
		return nil, err
	}
	if mounted {
		return adoptMount(disks, image, m, log)
	}
	ok, err := reflinkWorks(dataDir)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := os.MkdirAll(disks, 0o755); err != nil {
			return nil, err
		}
		return &Pool{dir: disks, mode: CloneReflink}, nil
	}
	err = errors.New("no loop image wanted (Options.NoLoopImage)")
	var loop *Loop
	if !opts.NoLoopImage {
		log.Info("data directory has no reflink; trying an xfs loop image", "dir", dataDir)
		loop, err = mountXFSImage(ctx, image, disks, opts.XFSImageSize, log)
	}
	if err != nil {
		log.Warn("no reflink: clones will be full copies, slow and as large as their data",
			"dir", disks, "err", err)
		if err := os.MkdirAll(disks, 0o755); err != nil {
			return nil, err
		}
		return &Pool{dir: disks, mode: CloneCopy}, nil
	}
	return &Pool{dir: disks, mode: CloneReflinkXFSLoop, loop: loop, image: image}, nil
}

// mountAt returns the topmost mount whose mount point is path, if any.
func mountAt(path string) (mountinfo.Mount, bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return mountinfo.Mount{}, false, err
	}
	for _, m := range slices.Backward(mounts) {
		if m.Point == path {
			return m, true, nil
		}
	}
	return mountinfo.Mount{}, false, nil
}

// adoptMount uses the filesystem already mounted on the image directory: the
// XFS image after a daemon restart, or a filesystem the operator mounted there.
func adoptMount(disks, image string, m mountinfo.Mount, log *slog.Logger) (*Pool, error) {
	ok, err := reflinkWorks(disks)
	if err != nil {
		return nil, err
	}
	if !ok {
		log.Warn("image directory is a mount without reflink: clones will be full copies, slow and as large as their data",
			"dir", disks, "fs", m.FSType, "source", m.Source)
		return &Pool{dir: disks, mode: CloneCopy}, nil
	}
	if loopBacking(m.Source) == image {
		log.Info("reusing mounted xfs image", "dir", disks, "device", m.Source)
		return &Pool{dir: disks, mode: CloneReflinkXFSLoop, image: image}, nil
	}
	return &Pool{dir: disks, mode: CloneReflink}, nil
}

// loopBacking returns the backing file of the loop device dev (/dev/loopN),
// or "" if dev is not an attached loop device.
func loopBacking(dev string) string {
	name := filepath.Base(dev)
	if !strings.HasPrefix(name, "loop") {
		return ""
	}
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// mountXFSImage mounts the XFS image (creating it first if missing) on disks
// and checks that reflink works there. It returns the attached device.
func mountXFSImage(ctx context.Context, image, disks string, size int64, log *slog.Logger) (*Loop, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("an xfs loop image needs root")
	}
	if err := os.MkdirAll(disks, 0o755); err != nil {
		return nil, err
	}
	// Images written in copy mode by an earlier run would vanish under the
	// mount; keep them visible instead.
	entries, err := os.ReadDir(disks)
	if err != nil {
		return nil, err
	}
	if len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty; not mounting the xfs image over it", disks)
	}
	if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
		if err := createXFSImage(ctx, image, size); err != nil {
			return nil, err
		}
		log.Info("created xfs image", "path", image, "size", size)
	} else if err != nil {
		return nil, err
	}
	loop, err := AttachLoop(image, LoopOptions{})
	if err != nil {
		return nil, err
	}
	// No MS_NODEV: templates are built in the pool, and debootstrap makes
	// device nodes there.
	if err := unix.Mount(loop.Path(), disks, "xfs", unix.MS_NOSUID, ""); err != nil {
		loop.Close()
		return nil, fmt.Errorf("mount %s on %s: %w", loop.Path(), disks, err)
	}
	ok, err := reflinkWorks(disks)
	if err == nil && !ok {
		err = errors.New("no reflink on the mounted xfs image")
	}
	if err != nil {
		if uerr := unix.Unmount(disks, 0); uerr != nil {
			log.Error("unmount xfs image", "dir", disks, "err", uerr)
		}
		loop.Close()
		return nil, err
	}
	log.Info("mounted xfs image", "path", image, "dir", disks, "device", loop.Path())
	return loop, nil
}

// createXFSImage makes a sparse file of size bytes at image and formats it as
// XFS with reflink. The image appears under its name only once formatted.
func createXFSImage(ctx context.Context, image string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		return err
	}
	tmp := image + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		out, cerr := exec.CommandContext(ctx, mkfs, "-q", "-m", "reflink=1", tmp).CombinedOutput()
		if cerr != nil {
			err = fmt.Errorf("mkfs.xfs: %w: %s", cerr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, image)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("create xfs image: %w", err)
	}
	return nil
}

// reflinkWorks reports whether FICLONE works in dir, by cloning a small file.
func reflinkWorks(dir string) (bool, error) {
	src, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return false, fmt.Errorf("probe reflink: %w", err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	dst, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return false, fmt.Errorf("probe reflink: %w", err)
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return false, fmt.Errorf("probe reflink: %w", err)
	}
	// Any failure (EOPNOTSUPP, EXDEV, EINVAL...) means: no reflink here.
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil, nil
}

// lockDir takes an exclusive flock on dir and returns its release.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// Dir is the directory for images, e.g. DATA/disks. Callers create their
// own subdirectories in it; clones are cheap only within it.
func (p *Pool) Dir() string { return p.dir }

// Mode is how Clone works in this pool.
func (p *Pool) Mode() CloneMode { return p.mode }

// Close stops the trimmer and releases the descriptors the pool holds. It
// leaves the XFS image mounted, for the next Open to reuse. Close must not
// be called concurrently with itself.
func (p *Pool) Close() error {
	if p.stopTrim != nil {
		p.stopTrim()
		<-p.trimDone
		p.stopTrim = nil
	}
	if p.loop == nil {
		return nil
	}
	err := p.loop.Close()
	p.loop = nil
	if err != nil {
		return fmt.Errorf("close disk pool: %w", err)
	}
	return nil
}
