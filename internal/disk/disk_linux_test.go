//go:build linux

package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
	"warren/internal/wait"
)

func TestCloneModeString(t *testing.T) {
	for _, tc := range []struct {
		mode CloneMode
		want string
	}{
		{CloneCopy, "copy (no reflink: slow)"},
		{CloneReflink, "reflink"},
		{CloneReflinkXFSLoop, "reflink (xfs loop image)"},
	} {
		if got := tc.mode.String(); got != tc.want {
			t.Errorf("CloneMode(%d).String() = %q, want %q", tc.mode, got, tc.want)
		}
	}
}

func TestIsUnder(t *testing.T) {
	for _, tc := range []struct {
		dir, path string
		want      bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/b/c.img", true},
		{"/a/b", "/a/bc.img", false},
		{"/a/b", "/a", false},
		{"/", "/x", true},
	} {
		if got := isUnder(tc.dir, tc.path); got != tc.want {
			t.Errorf("isUnder(%q, %q) = %v, want %v", tc.dir, tc.path, got, tc.want)
		}
	}
}

// TestCloneCopyKeepsHoles runs the copy fallback, which needs no root.
func TestCloneCopyKeepsHoles(t *testing.T) {
	p := &Pool{dir: t.TempDir(), mode: CloneCopy}
	src := filepath.Join(p.Dir(), "src.img")
	writeSparse(t, src, 1<<30, 10<<20)
	dst := filepath.Join(p.Dir(), "dst.img")

	start := time.Now()
	if err := p.Clone(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	t.Logf("copy clone of a 1 GiB image with 10 MiB of data: %v", time.Since(start))
	sameContents(t, src, dst)
	if used := allocated(t, dst); used > 12<<20 {
		t.Errorf("copy allocated %d bytes for 10 MiB of data: holes were filled", used)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("clone mode = %v (err %v), want 0600", fi.Mode(), err)
	}
}

func TestCloneFailures(t *testing.T) {
	p := &Pool{dir: t.TempDir(), mode: CloneCopy}
	src := filepath.Join(p.Dir(), "src.img")
	writeSparse(t, src, 1<<20, 4096)
	existing := filepath.Join(p.Dir(), "existing.img")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Clone(context.Background(), src, existing); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Clone onto an existing file: err = %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Errorf("Clone onto an existing file changed it to %q", b)
	}

	missing := filepath.Join(p.Dir(), "from-missing.img")
	if err := p.Clone(context.Background(), filepath.Join(p.Dir(), "nope.img"), missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Clone of a missing source: err = %v, want ErrNotExist", err)
	}
	assertMissing(t, missing)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cancelled := filepath.Join(p.Dir(), "cancelled.img")
	if err := p.Clone(ctx, src, cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Clone with a cancelled context: err = %v, want context.Canceled", err)
	}
	assertMissing(t, cancelled)
}

func TestOpenBuildsXFSLoopImage(t *testing.T) {
	requireLoop(t)
	requireTools(t, "mkfs.xfs", "filefrag")
	dataDir := t.TempDir()
	if ok, err := reflinkWorks(dataDir); err != nil || ok {
		t.Skipf("temp dir has reflink (or probe failed: %v): the xfs loop path would not run", err)
	}
	cleanupPoolMounts(t, dataDir)
	ctx := context.Background()

	p, err := Open(ctx, dataDir, nil, Options{XFSImageSize: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != CloneReflinkXFSLoop {
		t.Fatalf("Mode = %v, want %v", p.Mode(), CloneReflinkXFSLoop)
	}
	if want := filepath.Join(realPath(t, dataDir), "disks"); p.Dir() != want {
		t.Errorf("Dir = %q, want %q", p.Dir(), want)
	}
	if m, ok, err := mountAt(p.Dir()); err != nil || !ok || m.FSType != "xfs" {
		t.Fatalf("mount at %s = %+v, %v, %v; want an xfs mount", p.Dir(), m, ok, err)
	}
	loops, err := StaleLoops(dataDir)
	if err != nil || len(loops) != 1 {
		t.Fatalf("StaleLoops = %v, %v; want the xfs image's device", loops, err)
	}

	src := filepath.Join(p.Dir(), "src.img")
	writeSparse(t, src, 1<<30, 10<<20)
	dst := filepath.Join(p.Dir(), "dst.img")
	start := time.Now()
	if err := p.Clone(ctx, src, dst); err != nil {
		t.Fatal(err)
	}
	t.Logf("reflink clone of a 1 GiB image with 10 MiB of data: %v", time.Since(start))
	sameContents(t, src, dst)
	out, err := exec.Command("filefrag", "-v", dst).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "shared") {
		t.Errorf("clone extents not shared (err %v):\n%s", err, out)
	}

	// A second Open, as after a daemon restart, reuses the mount.
	p2, err := Open(ctx, dataDir, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if p2.Mode() != CloneReflinkXFSLoop || p2.Dir() != p.Dir() {
		t.Errorf("reopen: Mode = %v, Dir = %q; want %v, %q", p2.Mode(), p2.Dir(), CloneReflinkXFSLoop, p.Dir())
	}
	if got := mountsUnder(t, dataDir); len(got) != 1 {
		t.Errorf("mounts under the data dir after reopen = %v, want one", got)
	}
	if again, _ := StaleLoops(dataDir); len(again) != 1 {
		t.Errorf("loop devices after reopen = %v, want only %v", again, loops)
	}
	if err := p2.Clone(ctx, dst, filepath.Join(p2.Dir(), "dst2.img")); err != nil {
		t.Errorf("clone after reopen: %v", err)
	}
}

// TestOpenFallsBackToCopy: images from an earlier copy-mode run must not
// vanish under a new mount, so Open keeps copying, with a warning.
func TestOpenFallsBackToCopy(t *testing.T) {
	requireLoop(t)
	dataDir := t.TempDir()
	if ok, err := reflinkWorks(dataDir); err != nil || ok {
		t.Skipf("temp dir has reflink (or probe failed: %v): no fallback to test", err)
	}
	cleanupPoolMounts(t, dataDir)
	old := filepath.Join(dataDir, "disks", "old.img")
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	p, err := Open(context.Background(), dataDir, slog.New(slog.NewTextHandler(&logs, nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != CloneCopy {
		t.Errorf("Mode = %v, want %v", p.Mode(), CloneCopy)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "full copies") {
		t.Errorf("no warning about full copies in the log:\n%s", logs.String())
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "old" {
		t.Errorf("old image = %q, %v; want it still visible", b, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, xfsImageName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("xfs image created although it could not be used (stat err %v)", err)
	}
}

func TestAttachLoop(t *testing.T) {
	requireLoop(t)
	requireTools(t, "mkfs.ext4")
	dir := t.TempDir()
	img := filepath.Join(dir, "root.img")
	mkext4(t, img, 64<<20)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupPoolMounts(t, dir)

	l, err := AttachLoop(img, LoopOptions{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := StaleLoops(dir); len(got) != 1 || got[0] != l.Path() {
		t.Fatalf("StaleLoops = %v, want [%s]", got, l.Path())
	}
	sys := filepath.Join("/sys/block", filepath.Base(l.Path()), "loop")
	if got := readTrim(t, filepath.Join(sys, "autoclear")); got != "1" {
		t.Errorf("autoclear = %q, want 1", got)
	}
	t.Logf("%s direct I/O: %s", l.Path(), readTrim(t, filepath.Join(sys, "dio")))
	if err := unix.Mount(l.Path(), mnt, "ext4", 0, ""); err != nil {
		l.Close()
		t.Fatalf("mount %s: %v", l.Path(), err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "hello"), []byte("hi"), 0o644); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	// Still mounted: the device must stay.
	if got, _ := StaleLoops(dir); len(got) != 1 {
		t.Errorf("after Close of a mounted device, StaleLoops = %v, want it attached", got)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	waitNoLoops(t, dir)

	// Read-only: the data written above is there, and the device refuses writes.
	ro, err := AttachLoop(img, LoopOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join("/sys/block", filepath.Base(ro.Path()), "ro")); got != "1" {
		t.Errorf("read-only device ro = %q, want 1", got)
	}
	if err := unix.Mount(ro.Path(), mnt, "ext4", unix.MS_RDONLY, ""); err != nil {
		ro.Close()
		t.Fatalf("mount read-only: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hi" {
		t.Errorf("read back %q, %v; want hi", b, err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Error(err)
	}
	if err := ro.Close(); err != nil {
		t.Error(err)
	}
	waitNoLoops(t, dir)
}

// TestAttachLoopConcurrent races attachers for free devices (EBUSY retries).
func TestAttachLoopConcurrent(t *testing.T) {
	requireLoop(t)
	dir := t.TempDir()
	cleanupPoolMounts(t, dir)
	const n = 8
	loops := make([]*Loop, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		img := filepath.Join(dir, fmt.Sprintf("%d.img", i))
		if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { loops[i], errs[i] = AttachLoop(img, LoopOptions{DirectIO: true}) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("attach %d: %v", i, errs[i])
			continue
		}
		if seen[loops[i].Path()] {
			t.Errorf("device %s handed out twice", loops[i].Path())
		}
		seen[loops[i].Path()] = true
		if want := filepath.Join(realPath(t, dir), fmt.Sprintf("%d.img", i)); loopBacking(loops[i].Path()) != want {
			t.Errorf("%s backs onto %q, want %q", loops[i].Path(), loopBacking(loops[i].Path()), want)
		}
		loops[i].Close()
	}
	waitNoLoops(t, dir)
}

// TestDetachLoop detaches a device attached without autoclear, as a crashed
// process or losetup leaves behind.
func TestDetachLoop(t *testing.T) {
	requireLoop(t)
	requireTools(t, "losetup")
	dir := t.TempDir()
	cleanupPoolMounts(t, dir)
	img := filepath.Join(dir, "left.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	stale, err := StaleLoops(dir)
	if err != nil || len(stale) != 1 || stale[0] != dev {
		t.Fatalf("StaleLoops = %v, %v; want [%s]", stale, err, dev)
	}
	if err := DetachLoop(dev); err != nil {
		t.Fatal(err)
	}
	waitNoLoops(t, dir)
	if err := DetachLoop(dev); err != nil {
		t.Errorf("second DetachLoop: %v, want nil", err)
	}
}

func TestGrow(t *testing.T) {
	requireTools(t, "mkfs.ext4", "resize2fs", "dumpe2fs")
	p := &Pool{dir: t.TempDir(), mode: CloneCopy}
	img := filepath.Join(p.Dir(), "root.img")
	mkext4(t, img, 64<<20)

	if err := p.Grow(img, 32<<20); !errors.Is(err, ErrShrink) {
		t.Errorf("Grow to a smaller size: err = %v, want ErrShrink", err)
	}
	if got := fsBytes(t, img); got != 64<<20 {
		t.Errorf("after refused shrink, filesystem has %d bytes, want %d", got, 64<<20)
	}
	if err := p.Grow(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 256<<20 {
		t.Errorf("image size after Grow = %v, %v; want %d", fi.Size(), err, 256<<20)
	}
	if got := fsBytes(t, img); got != 256<<20 {
		t.Errorf("filesystem after Grow has %d bytes, want %d", got, 256<<20)
	}
	if err := p.Grow(filepath.Join(p.Dir(), "missing.img"), 1<<30); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Grow of a missing image: err = %v, want ErrNotExist", err)
	}
}

// Grow of a disk cloned while it was mounted, as a snapshot's is, replays
// its journal first: the grown filesystem mounts with every file written
// before the clone, and checks clean after use.
func TestGrowReplaysTheJournal(t *testing.T) {
	requireLoop(t)
	requireTools(t, "mkfs.ext4", "resize2fs", "e2fsck", "mount")
	p := &Pool{dir: t.TempDir(), mode: CloneCopy}
	img, clone := filepath.Join(p.Dir(), "root.img"), filepath.Join(p.Dir(), "clone.img")
	mkext4(t, img, 64<<20)
	mnt := t.TempDir()
	mount := func(img string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v: %s", err, out)
		}
	}
	umount := func() {
		t.Helper()
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}
	}
	mount(img)
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 64<<10), 0o644); err != nil {
			umount()
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("sync", "-f", mnt).CombinedOutput(); err != nil {
		umount()
		t.Fatalf("sync: %v: %s", err, out)
	}
	if err := p.Clone(context.Background(), img, clone); err != nil {
		umount()
		t.Fatal(err)
	}
	umount()
	if err := p.Grow(clone, 256<<20); err != nil {
		t.Fatal(err)
	}
	mount(clone)
	got, err := os.ReadFile(filepath.Join(mnt, "f49"))
	werr := os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644)
	umount()
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{49}, 64<<10)) || werr != nil {
		t.Fatalf("the grown clone's file: %d bytes, %v; a write: %v", len(got), err, werr)
	}
	if out, err := exec.Command("e2fsck", "-fn", clone).CombinedOutput(); err != nil {
		t.Errorf("the grown clone does not check clean: %v\n%s", err, out)
	}
	if got := fsBytes(t, clone); got != 256<<20 {
		t.Errorf("filesystem after Grow has %d bytes, want %d", got, 256<<20)
	}
}

// requireLoop skips tests that attach loop devices when they cannot.
func requireLoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: attaches loop devices and mounts")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
}

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// cleanupPoolMounts registers a cleanup (run before dir is removed) that
// unmounts whatever the test left mounted under dir, then checks that no
// mount or loop device under dir remains.
func cleanupPoolMounts(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		points := mountsUnder(t, dir)
		for i := len(points) - 1; i >= 0; i-- {
			if err := unix.Unmount(points[i], 0); err != nil {
				t.Errorf("unmount %s: %v", points[i], err)
			}
		}
		if left := mountsUnder(t, dir); len(left) > 0 {
			t.Errorf("mounts left under %s: %v", dir, left)
		}
		waitNoLoops(t, dir)
	})
}

// waitNoLoops waits for autoclear, which the kernel runs asynchronously, to
// detach every loop device backed by a file under dir.
func waitNoLoops(t *testing.T, dir string) {
	t.Helper()
	wait.For(t, 10*time.Second, "the loop devices under "+dir+" to detach", func() bool {
		left, err := StaleLoops(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	})
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	root := realPath(t, dir)
	var points []string
	for _, m := range mounts {
		if isUnder(root, m.Point) {
			points = append(points, m.Point)
		}
	}
	return points
}

func realPath(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeSparse makes a file of size bytes holding data bytes of random data
// in two runs, the rest holes.
func writeSparse(t *testing.T, path string, size, data int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{1})
	for _, off := range []int64{size / 8, size / 2} {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(f, rng, data/2); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func sameContents(t *testing.T, a, b string) {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 4<<20), make([]byte, 4<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			t.Fatalf("%s and %s differ in the 4 MiB at %d", a, b, off)
		}
		if erra != nil || errb != nil {
			return
		}
	}
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func assertMissing(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists after a failed clone (stat err %v)", path, err)
	}
}

func mkext4(t *testing.T, img string, size int64) {
	t.Helper()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
}

// fsBytes is the size of the ext4 filesystem in img, from its superblock.
func fsBytes(t *testing.T, img string) int64 {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", img).Output()
	if err != nil {
		t.Fatalf("dumpe2fs: %v", err)
	}
	var count, size int64
	for line := range strings.Lines(string(out)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "Block count":
			count = n
		case "Block size":
			size = n
		}
	}
	return count * size
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// BenchmarkClone clones a 1 GiB image whose every block holds data, the
// worst case for the copy fallback (its source is in the page cache).
func BenchmarkClone(b *testing.B) {
	b.Run("copy", func(b *testing.B) {
		benchmarkClone(b, &Pool{dir: b.TempDir(), mode: CloneCopy})
	})
	b.Run("reflink", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root for the xfs loop image")
		}
		dataDir := b.TempDir()
		p, err := Open(context.Background(), dataDir, nil, Options{XFSImageSize: 8 << 30})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			p.Close()
			if p.Mode() == CloneReflinkXFSLoop {
				unix.Unmount(p.Dir(), 0)
			}
		})
		if p.Mode() == CloneCopy {
			b.Skip("no reflink available")
		}
		benchmarkClone(b, p)
	})
}

func benchmarkClone(b *testing.B, p *Pool) {
	src := filepath.Join(p.Dir(), "src.img")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{2}), 1<<30); err != nil {
		b.Fatal(err)
	}
	// Written back first: a clone flushes its source's dirty pages.
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 30)
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(p.Dir(), fmt.Sprintf("dst-%d.img", i))
		if err := p.Clone(context.Background(), src, dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(dst)
		b.StartTimer()
	}
}

// TestMakeExt4Sparse is a regression test of issue 13, item 4: a 256 GiB
// workspace took 1.1 GiB of the host at create (its zeroed journal).
func TestMakeExt4Sparse(t *testing.T) {
	requireTools(t, "mkfs.ext4", "dumpe2fs")
	img := filepath.Join(t.TempDir(), "ws.img")
	if err := MakeExt4(t.Context(), img, 256<<30); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 64<<20 {
		t.Errorf("a new 256 GiB workspace uses %d MiB of the host, want under 64", used>>20)
	}
	if out, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput(); err != nil || !strings.Contains(string(out), "Block size:               4096") {
		t.Errorf("dumpe2fs: %v\n%s", err, out)
	}
}
