//go:build linux

package fusefile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
	"warren/internal/wait"
)

func requireLoop(t testing.TB, tools ...string) {
	t.Helper()
	requireFUSE(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs loop devices: %v", err)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// attachLoop attaches a loop device to path (with autoclear, so it goes
// even if the test process dies) and returns it with whether the kernel
// does direct I/O on it. When the test ends it closes the device and waits
// for the kernel to detach it, before the cleanups registered earlier (the
// FUSE mount's Close) run.
func attachLoop(t testing.TB, path string, directIO bool) (*disk.Loop, bool) {
	t.Helper()
	loop, err := disk.AttachLoop(path, disk.LoopOptions{DirectIO: directIO})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detach(t, loop, path) })
	dio, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loop.Path()), "loop/dio"))
	if err != nil {
		t.Fatal(err)
	}
	return loop, strings.TrimSpace(string(dio)) == "1"
}

// detach closes loop and waits until it no longer holds path.
func detach(t testing.TB, loop *disk.Loop, path string) {
	t.Helper()
	loop.Close()
	if err := disk.DetachLoop(loop.Path()); err != nil {
		t.Error(err)
	}
	wait.For(t, 30*time.Second, loop.Path()+" over "+path+" to detach", func() bool {
		left, err := disk.StaleLoops(path)
		return err == nil && !slices.Contains(left, loop.Path())
	})
}

// mountExt4 mounts the ext4 on dev on a new directory until the test ends
// (or unmount is called, which the cleanup then tolerates).
func mountExt4(t testing.TB, dev, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(dev, dir, "ext4", 0, opts); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestExt4OnLoop makes and uses an ext4 on a loop device over the FUSE
// file, and checks the backing image afterwards holds a clean file system
// with the data, with the loop device's direct I/O off and on.
func TestExt4OnLoop(t *testing.T) {
	requireLoop(t, "mkfs.ext4", "e2fsck", "debugfs")
	for _, directIO := range []bool{false, true} {
		name := map[bool]string{false: "buffered", true: "direct-io"}[directIO]
		t.Run(name, func(t *testing.T) {
			f, dev, img := serve(t)
			loop, dio := attachLoop(t, f.Path(), directIO)
			if dio != directIO {
				t.Errorf("loop device direct I/O is %v, asked for %v", dio, directIO)
			}
			run(t, "mkfs.ext4", "-q", "-F", "-E", "nodiscard", loop.Path())
			dir := mountExt4(t, loop.Path(), "")
			content := bytes.Repeat([]byte("warren fusefile "), 100000)
			if err := os.WriteFile(filepath.Join(dir, "file"), content, 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := os.Open(filepath.Join(dir, "file"))
			if err != nil {
				t.Fatal(err)
			}
			before := dev.flushes.Load()
			if err := g.Sync(); err != nil {
				t.Fatal(err)
			}
			g.Close()
			run(t, "sync", "-f", dir)
			if dev.flushes.Load() == before {
				t.Errorf("fsync on the ext4 reached no Device.Flush")
			}
			if err := unix.Unmount(dir, 0); err != nil {
				t.Fatal(err)
			}
			detach(t, loop, f.Path())
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			run(t, "e2fsck", "-fn", img)
			if got := run(t, "debugfs", "-R", "cat /file", img); !strings.Contains(got, string(content)) {
				t.Errorf("debugfs cat /file: %d bytes, want the %d written", len(got), len(content))
			}
		})
	}
}

// TestDiscardReachesTrim checks that the ways a loop device discards reach
// Device.Trim: fstrim on the ext4 mounted from it, and blkdiscard on it.
func TestDiscardReachesTrim(t *testing.T) {
	requireLoop(t, "mkfs.ext4", "fstrim", "blkdiscard")
	f, dev, _ := serve(t)
	loop, _ := attachLoop(t, f.Path(), true)

	run(t, "blkdiscard", "--offset", "4194304", "--length", "1048576", loop.Path())
	if got, want := dev.trimmed(), []extent{{4 << 20, 1 << 20}}; !equalExtents(got, want) {
		t.Errorf("blkdiscard: trims %v, want %v", got, want)
	}

	run(t, "mkfs.ext4", "-q", "-F", "-E", "nodiscard", loop.Path())
	dir := mountExt4(t, loop.Path(), "")
	if err := os.WriteFile(filepath.Join(dir, "junk"), randomBytes(8<<20, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "sync", "-f", dir)
	if err := os.Remove(filepath.Join(dir, "junk")); err != nil {
		t.Fatal(err)
	}
	run(t, "sync", "-f", dir)
	dev.trimmed()
	run(t, "fstrim", dir)
	var bytes int64
	for _, e := range dev.trimmed() {
		bytes += e.n
	}
	if bytes < 8<<20 {
		t.Errorf("fstrim trimmed %d bytes of the device, want at least the %d freed", bytes, 8<<20)
	}
}

// TestCloseWhileLoopHoldsFile checks what Close does while a loop device
// still has the file: it fails at once, naming the device, and the file
// stays served; once the device is gone, Close succeeds.
func TestCloseWhileLoopHoldsFile(t *testing.T) {
	requireLoop(t)
	f, _, _ := serve(t)
	loop, _ := attachLoop(t, f.Path(), true)

	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close hangs while a loop device holds the file")
	}
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), loop.Path()) {
		t.Fatalf("Close: %v, want EBUSY naming %s", err, loop.Path())
	}
	// Still served: the loop device works.
	buf := make([]byte, 4096)
	if _, err := loop.File().ReadAt(buf, 0); err != nil {
		t.Errorf("read from the loop device after the failed Close: %v", err)
	}

	detach(t, loop, f.Path())
	if err := f.Close(); err != nil {
		t.Fatalf("Close after detaching: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+filepath.Dir(f.Path())+" ") {
		t.Errorf("%s still mounted after Close", filepath.Dir(f.Path()))
	}
}

// TestDirectIOLoopIsConcurrent holds the first read that reaches the device
// from a direct-I/O loop device and checks that a second arrives meanwhile:
// the loop device's requests are served concurrently (FUSE's asynchronous
// direct I/O), not one at a time.
func TestDirectIOLoopIsConcurrent(t *testing.T) {
	requireLoop(t)
	_, file := newImage(t, testSize)
	dev := &gatedReads{Device: file, release: make(chan struct{})}
	f := mount(t, dev)
	loop, dio := attachLoop(t, f.Path(), true)
	if !dio {
		t.Skip("the loop device does no direct I/O over the FUSE file here")
	}
	release := dev.gate(t)

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			fd, err := os.OpenFile(loop.Path(), os.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer fd.Close()
			buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				t.Error(err)
				return
			}
			defer unix.Munmap(buf)
			if _, err := fd.ReadAt(buf, int64(i)<<20); err != nil {
				t.Error(err)
			}
		})
	}
	wait.For(t, 10*time.Second, "two reads from the loop device at the device at once", func() bool {
		return dev.inflight.Load() >= 2
	})
	release()
	wg.Wait()
}
