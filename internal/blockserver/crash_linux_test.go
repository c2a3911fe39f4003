package blockserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/blob/s3test"
	"warren/internal/detached"
	"warren/internal/disk"
)

// TestMain runs the block server when Start starts this binary as it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := Main(ctx, os.Args[2:], os.Stderr); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: FUSE mounts, loop devices and ext4 mounts")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
}

// blockServerPID is the PID of the block server holding dataDir.
func blockServerPID(t *testing.T, dataDir string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(dataDir, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid, _, err := detached.Holder(f)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// mountDisk attaches the disk file to a loop device and mounts its ext4
// (made first when mkfs), undone when the test ends.
func mountDisk(t *testing.T, path string, mkfs bool) string {
	t.Helper()
	if mkfs {
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", path).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v\n%s", err, out)
		}
	}
	loop, err := disk.AttachLoop(path, disk.LoopOptions{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	if err := unix.Mount(loop.Path(), mnt, "ext4", 0, ""); err != nil {
		loop.Close()
		t.Fatalf("mount %s: %v", loop.Path(), err)
	}
	loop.Close() // autoclear: the mount holds the device
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}

// record is line i of the records file: its number and a hash of it, padded
// to a block, so that a torn or foreign block shows.
func record(i int) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(i)))
	line := fmt.Sprintf("%08d %s", i, hex.EncodeToString(sum[:]))
	return line + strings.Repeat(".", 511-len(line)) + "\n"
}

// TestCrashKeepsFsyncedRecords is the always-on disk's promise: a writer
// fsyncs numbered records into ext4 on a volume served through FUSE, the
// block server is killed with -9 mid-stream, and another node (a block
// server with its own data directory, sharing only the stores) recovers
// the volume with every record whose fsync returned.
func TestCrashKeepsFsyncedRecords(t *testing.T) {
	needRoot(t)
	t.Run("file", func(t *testing.T) { crashTest(t, filepath.Join(t.TempDir(), "blobs")) })
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		crashTest(t, srv.URL)
	})
}

func crashTest(t *testing.T, blobStore string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node1, node2 := t.TempDir(), t.TempDir()
	start := func(dataDir string) *Client { return startServer(ctx, t, dataDir, blobStore) }
	c1 := start(node1)
	in, err := c1.Serve(ctx, "crash", VolumeRequest{SizeBytes: 64 << 20, Front: FrontFile})
	if err != nil {
		t.Fatal(err)
	}
	// The killed server's FUSE mount stays behind, dead, until this.
	t.Cleanup(func() { unix.Unmount(filepath.Join(node1, volsDir, "crash", mountDir), unix.MNT_DETACH) })
	mnt := mountDisk(t, in.Path, true)

	var acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(mnt, "records"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		for i := 1; ; i++ {
			if _, err := f.WriteString(record(i)); err != nil {
				done <- err
				return
			}
			if err := f.Sync(); err != nil {
				done <- err
				return
			}
			acked.Store(int64(i))
		}
	}()
	for acked.Load() < 40 {
		select {
		case err := <-done:
			t.Fatalf("the writer stopped before the crash: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	pid := blockServerPID(t, node1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(pid)
	select {
	case err := <-done:
		t.Logf("the writer stopped at the crash: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the writer hangs after the block server died")
	}
	last := acked.Load()

	c2 := start(node2)
	in2, err := c2.Serve(ctx, "crash", VolumeRequest{Front: FrontFile, Recover: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(mountDisk(t, in2.Path, false), "records"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		if got := sc.Text() + "\n"; got != record(n) {
			if int64(n) <= last {
				t.Fatalf("record %d of %d acknowledged is %q", n, last, got)
			}
			break // past the last fsync, a torn tail is allowed
		}
	}
	if int64(n) < last {
		t.Fatalf("recovered %d records, %d were fsynced", n, last)
	}
	t.Logf("%d records fsynced before the crash, %d recovered", last, n)
}

// startServer starts a block server on dataDir over the blob store, as a
// node's daemon does, and stops it (SIGTERM) when the test ends, after the
// test's later cleanups (ext4 mounts and loop devices go first; then the
// server unmounts its FUSE files).
func startServer(ctx context.Context, t *testing.T, dataDir, blobStore string) *Client {
	t.Helper()
	c, err := Start(ctx, Options{DataDir: dataDir, BlobStore: blobStore})
	if err != nil {
		t.Fatal(err)
	}
	pid := blockServerPID(t, dataDir)
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid)
	})
	return c
}

// waitGone waits up to 10 s for process pid to exit.
func waitGone(pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		return syscall.Kill(pid, 0) != nil, nil
	})
}

// TestCrashKeepsFlushedBlocksOverNBD is the same promise through the vm
// runtime's front end: QEMU's own NBD client (qemu-io, one process per
// record) writes numbered blocks, each followed by a flush, until the block
// server is killed with -9; another node's block server recovers the volume
// with every block whose flush returned.
func TestCrashKeepsFlushedBlocksOverNBD(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the block server's data directory and its lock")
	}
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io is not installed (Debian's qemu-utils)")
	}
	t.Run("file", func(t *testing.T) { crashTestNBD(t, filepath.Join(t.TempDir(), "blobs")) })
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		crashTestNBD(t, srv.URL)
	})
}

func crashTestNBD(t *testing.T, blobs string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node1, node2 := t.TempDir(), t.TempDir()
	start := func(dataDir string) *Client { return startServer(ctx, t, dataDir, blobs) }
	in, err := start(node1).Serve(ctx, "crashnbd", VolumeRequest{SizeBytes: 16 << 20, Front: FrontNBD})
	if err != nil {
		t.Fatal(err)
	}
	pattern := func(i int) string { return fmt.Sprintf("0x%02x", i%251+1) }
	qemuIO := func(sock string, cmds ...string) error {
		args := []string{"-f", "raw", "-t", "writeback"}
		for _, c := range cmds {
			args = append(args, "-c", c)
		}
		out, err := exec.Command("qemu-io", append(args, "nbd+unix:///?socket="+sock)...).CombinedOutput()
		if err == nil && strings.Contains(string(out), "failed") {
			err = fmt.Errorf("%s", out)
		}
		return err
	}
	// The kill lands while the writer runs, mid-record.
	var acked atomic.Int64
	pid := blockServerPID(t, node1)
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond}, func() (bool, error) {
			return acked.Load() >= 20, nil
		})
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid)
	}()
	for i := 1; i <= 10000; i++ {
		if err := qemuIO(in.Path, fmt.Sprintf("write -P %s %d 4k", pattern(i), i*4096), "flush"); err != nil {
			t.Logf("record %d failed at the crash: %v", i, err)
			break
		}
		acked.Store(int64(i))
	}
	<-killed
	last := int(acked.Load())
	in2, err := start(node2).Serve(ctx, "crashnbd", VolumeRequest{Front: FrontNBD, Recover: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= last; i++ {
		if err := qemuIO(in2.Path, fmt.Sprintf("read -P %s %d 4k", pattern(i), i*4096)); err != nil {
			t.Fatalf("record %d of %d flushed: %v", i, last, err)
		}
	}
	t.Logf("%d records flushed before the crash, all recovered", last)
}
