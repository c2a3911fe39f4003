//go:build linux

// Package disktest gives tests of packages built on internal/disk a real
// disk pool with reflink: a loop-mounted XFS image in a temporary data
// directory, torn down when the test ends. It is for tests only.
package disktest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
)

// ReflinkPool opens a disk pool on a fresh temporary data directory, with
// an XFS image of xfsSize bytes (sparse) when the directory has no reflink of
// its own. It skips the test, saying why, without root, loop devices,
// mkfs.xfs or reflink. When the test ends it closes the pool and unmounts
// the image; a loop device the kernel is slow to detach is logged, not
// failed (the disk package's own tests check that it goes).
func ReflinkPool(t testing.TB, xfsSize int64) *disk.Pool {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the disk pool loop-mounts an xfs image for reflink clones")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs loop devices for the pool's xfs image: %v", err)
	}
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		t.Skipf("needs mkfs.xfs for the pool's xfs image: %v", err)
	}
	dataDir := t.TempDir()
	pool, err := disk.Open(context.Background(), dataDir, nil, disk.Options{XFSImageSize: xfsSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closePool(t, pool, dataDir) })
	if pool.Mode() == disk.CloneCopy {
		t.Skip("no reflink available: clones would be full copies")
	}
	return pool
}

// closePool releases the pool and unmounts its xfs image, then waits for
// autoclear, which the kernel runs asynchronously (and slowly on a busy
// machine, udev may hold the device a while), to detach its loop device.
func closePool(t testing.TB, pool *disk.Pool, dataDir string) {
	if err := pool.Close(); err != nil {
		t.Error(err)
	}
	if pool.Mode() != disk.CloneReflinkXFSLoop {
		return
	}
	if err := unix.Unmount(pool.Dir(), 0); err != nil {
		t.Errorf("unmount %s: %v", pool.Dir(), err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, err := disk.StaleLoops(dataDir)
		if err == nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("loop devices still attached under %s 30 s after the unmount: %v (%v)", dataDir, left, err)
			return
		}
	}
}

// WriteAt writes data into the image at path at offset off.
func WriteAt(t testing.TB, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// ReadAt reads n bytes of the image at path at offset off.
func ReadAt(t testing.TB, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}
