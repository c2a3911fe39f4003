//go:build linux

package fusefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/blockdev"
	"warren/internal/wait"
)

const testSize = 64 << 20

// requireFUSE skips a test that cannot mount FUSE here.
func requireFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a FUSE file system with mount(2)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
}

// extent is a range a Trim or WriteZeroes was called with.
type extent struct{ off, n int64 }

// countingDevice is a real Device that counts what reaches it.
type countingDevice struct {
	blockdev.Device
	flushes atomic.Int64
	// flushHook, if set before Mount, runs at the start of every Flush;
	// its error is Flush's.
	flushHook func() error

	mu     sync.Mutex // guards trims and zeroes
	trims  []extent
	zeroes []extent
}

func (d *countingDevice) Flush() error {
	if d.flushHook != nil {
		if err := d.flushHook(); err != nil {
			return err
		}
	}
	err := d.Device.Flush()
	d.flushes.Add(1)
	return err
}

func (d *countingDevice) Trim(off, n int64) error {
	d.mu.Lock()
	d.trims = append(d.trims, extent{off, n})
	d.mu.Unlock()
	return d.Device.Trim(off, n)
}

func (d *countingDevice) WriteZeroes(off, n int64) error {
	d.mu.Lock()
	d.zeroes = append(d.zeroes, extent{off, n})
	d.mu.Unlock()
	return d.Device.WriteZeroes(off, n)
}

// trimmed returns the Trim calls so far and forgets them.
func (d *countingDevice) trimmed() []extent {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.trims
	d.trims = nil
	return t
}

func (d *countingDevice) zeroed() []extent {
	d.mu.Lock()
	defer d.mu.Unlock()
	z := d.zeroes
	d.zeroes = nil
	return z
}

// newImage makes a sparse image of size bytes in a new temporary directory
// and returns its path and a blockdev.File over it, closed when the test
// ends.
func newImage(t testing.TB, size int64) (string, *blockdev.File) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev, err := blockdev.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return img, dev
}

// mount serves dev as "disk" in a new temporary directory until the test
// ends; a test that closes it itself may, as Close is idempotent.
func mount(t testing.TB, dev blockdev.Device) *File {
	t.Helper()
	f, err := Mount(t.TempDir(), "disk", dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return f
}

// serve mounts a counting device over a fresh image of testSize bytes.
func serve(t testing.TB) (*File, *countingDevice, string) {
	t.Helper()
	requireFUSE(t)
	img, file := newImage(t, testSize)
	dev := &countingDevice{Device: file}
	return mount(t, dev), dev, img
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

func openRW(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readImage(t testing.TB, img string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMountShowsOneRootFile(t *testing.T) {
	f, _, _ := serve(t)
	if got, want := f.Path(), filepath.Join(filepath.Dir(f.Path()), "disk"); got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	var st unix.Stat_t
	if err := unix.Stat(f.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != unix.S_IFREG|0o600 || st.Uid != 0 || st.Gid != 0 || st.Size != testSize {
		t.Errorf("stat: mode %o uid %d gid %d size %d; want %o 0 0 %d", st.Mode, st.Uid, st.Gid, st.Size, unix.S_IFREG|0o600, testSize)
	}
	entries, err := os.ReadDir(filepath.Dir(f.Path()))
	if err != nil || len(entries) != 1 || entries[0].Name() != "disk" {
		t.Errorf("ReadDir = %v, %v; want just disk", entries, err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for l := range strings.Lines(string(mounts)) {
		if fields := strings.Fields(l); len(fields) > 3 && fields[1] == filepath.Dir(f.Path()) {
			line = l
		}
	}
	for _, want := range []string{"warren ", " fuse.warren ", "default_permissions", "nosuid", "nodev", "noexec", "max_read=1048576"} {
		if !strings.Contains(line, want) {
			t.Errorf("mount line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "allow_other") {
		t.Errorf("mount line %q has allow_other", line)
	}
}

func TestMountRefusesBadArguments(t *testing.T) {
	requireFUSE(t)
	_, dev := newImage(t, 1<<20)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, dir, name string }{
		{"non-empty directory", full, "disk"},
		{"missing directory", filepath.Join(full, "nope"), "disk"},
		{"name with a slash", t.TempDir(), "a/b"},
		{"empty name", t.TempDir(), ""},
		{"dot dot", t.TempDir(), ".."},
	} {
		if f, err := Mount(tc.dir, tc.name, dev, Options{}); err == nil {
			f.Close()
			t.Errorf("%s: Mount succeeded, want an error", tc.what)
		}
	}
}

// TestReadWrite writes through the FUSE file and through the device and
// checks each side sees the other's bytes, at offsets and lengths that do
// not line up with blocks or with MaxWrite.
func TestReadWrite(t *testing.T) {
	f, dev, img := serve(t)
	fd := openRW(t, f.Path())
	for i, tc := range []struct{ off, n int64 }{
		{0, 4096},
		{12345, 1},
		{3<<20 - 100, 3<<20 + 333}, // several requests of MaxWrite
		{testSize - 4096, 4096},    // the last block
	} {
		want := randomBytes(int(tc.n), uint64(i))
		if n, err := fd.WriteAt(want, tc.off); err != nil || n != len(want) {
			t.Fatalf("pwrite %d at %d: %d, %v", tc.n, tc.off, n, err)
		}
		if got := readImage(t, img, tc.off, int(tc.n)); !bytes.Equal(got, want) {
			t.Errorf("image at %d after pwrite differs", tc.off)
		}
		got := make([]byte, tc.n)
		if n, err := fd.ReadAt(got, tc.off); err != nil || n != len(got) || !bytes.Equal(got, want) {
			t.Errorf("pread %d at %d: %d, %v, equal %v", tc.n, tc.off, n, err, bytes.Equal(got, want))
		}
	}

	// The device's own writes show through the file, even where it was
	// read before: the kernel caches none of it.
	got := make([]byte, 8192)
	if _, err := fd.ReadAt(got, 1<<20); err != nil {
		t.Fatal(err)
	}
	want := randomBytes(8192, 99)
	if _, err := dev.WriteAt(want, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, want) {
		t.Errorf("pread after a device write: %v, equal %v", err, bytes.Equal(got, want))
	}

	// Reads stop at the end of the file, as on a regular file.
	buf := make([]byte, 8192)
	if n, err := fd.ReadAt(buf, testSize-4096); n != 4096 || err != io.EOF {
		t.Errorf("pread across the end: %d, %v; want 4096, EOF", n, err)
	}
	if n, err := fd.ReadAt(buf, testSize); n != 0 || err != io.EOF {
		t.Errorf("pread at the end: %d, %v; want 0, EOF", n, err)
	}
}

func TestConcurrentReadWrite(t *testing.T) {
	f, _, img := serve(t)
	const workers, chunk = 8, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			fd, err := os.OpenFile(f.Path(), os.O_RDWR, 0)
			if err != nil {
				errs <- err
				return
			}
			defer fd.Close()
			for i := range 8 {
				off := int64(w*8+i) * chunk
				data := randomBytes(chunk, uint64(off))
				if _, err := fd.WriteAt(data, off); err != nil {
					errs <- err
					return
				}
				got := make([]byte, chunk)
				if _, err := fd.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
					errs <- errors.New("read back differs")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for off := int64(0); off < workers*8*chunk; off += chunk {
		if !bytes.Equal(readImage(t, img, off, chunk), randomBytes(chunk, uint64(off))) {
			t.Errorf("image at %d differs", off)
		}
	}
}

// TestFsyncWaitsForFlush holds Device.Flush and checks that fsync does not
// return until it is let go.
func TestFsyncWaitsForFlush(t *testing.T) {
	requireFUSE(t)
	_, file := newImage(t, testSize)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var holding atomic.Bool
	dev := &countingDevice{Device: file, flushHook: func() error {
		if holding.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}}
	f := mount(t, dev)
	fd := openRW(t, f.Path())
	t.Cleanup(func() { // first: let any held Flush go before the close and unmount
		holding.Store(false)
		close(release)
	})
	if _, err := fd.WriteAt([]byte("durable"), 0); err != nil {
		t.Fatal(err)
	}
	for _, sync := range []struct {
		name string
		call func() error
	}{
		{"fsync", fd.Sync},
		{"fdatasync", func() error { return unix.Fdatasync(int(fd.Fd())) }},
	} {
		holding.Store(true)
		before := dev.flushes.Load()
		done := make(chan error, 1)
		go func() { done <- sync.call() }()
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("%s returned (%v) before Device.Flush was called or had returned", sync.name, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never reached Device.Flush", sync.name)
		}
		holding.Store(false)
		// The absence of an event can only be waited for: give a wrong
		// implementation a moment to return early.
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) while Device.Flush was still running", sync.name, err)
		case <-time.After(100 * time.Millisecond):
		}
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Errorf("%s: %v", sync.name, err)
		}
		if got := dev.flushes.Load(); got != before+1 {
			t.Errorf("%s: %d flushes, want %d", sync.name, got, before+1)
		}
	}

	// A close flushes too.
	before := dev.flushes.Load()
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dev.flushes.Load(); got <= before {
		t.Errorf("close: %d flushes, want more than %d", got, before)
	}
}

func TestFsyncReportsFlushError(t *testing.T) {
	requireFUSE(t)
	_, file := newImage(t, testSize)
	var failing atomic.Bool
	dev := &countingDevice{Device: file, flushHook: func() error {
		if failing.Load() {
			return errors.New("tier unreachable")
		}
		return nil
	}}
	f := mount(t, dev)
	fd := openRW(t, f.Path())
	failing.Store(true)
	if err := fd.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync with a failing Flush: %v, want EIO", err)
	}
	failing.Store(false)
	if err := fd.Sync(); err != nil {
		t.Errorf("fsync once Flush works again: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	f, _, img := serve(t)
	dir := filepath.Dir(f.Path())
	fd := openRW(t, f.Path())
	other := filepath.Join(dir, "other")
	for _, tc := range []struct {
		what string
		err  error
		call func() error
	}{
		{"truncate to a smaller size", syscall.EPERM, func() error { return os.Truncate(f.Path(), testSize-4096) }},
		{"truncate to a larger size", syscall.EPERM, func() error { return fd.Truncate(testSize + 4096) }},
		{"open with O_TRUNC", syscall.EPERM, func() error {
			g, err := os.OpenFile(f.Path(), os.O_RDWR|os.O_TRUNC, 0)
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"create", syscall.EPERM, func() error {
			g, err := os.Create(other)
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"mkdir", syscall.EPERM, func() error { return os.Mkdir(other, 0o700) }},
		{"mknod", syscall.EPERM, func() error { return unix.Mknod(other, unix.S_IFIFO|0o600, 0) }},
		{"unlink", syscall.EPERM, func() error { return os.Remove(f.Path()) }},
		{"rename", syscall.EPERM, func() error { return os.Rename(f.Path(), other) }},
		{"symlink", syscall.EPERM, func() error { return os.Symlink(f.Path(), other) }},
		{"link", syscall.EPERM, func() error { return os.Link(f.Path(), other) }},
		{"chmod", syscall.EPERM, func() error { return os.Chmod(f.Path(), 0o666) }},
		{"chown", syscall.EPERM, func() error { return os.Chown(f.Path(), 65534, 65534) }},
		{"setxattr", syscall.EOPNOTSUPP, func() error { return unix.Setxattr(f.Path(), "user.x", []byte("y"), 0) }},
		{"write past the end", syscall.EFBIG, func() error { _, err := fd.WriteAt([]byte("x"), testSize); return err }},
		{"write across the end", syscall.EFBIG, func() error { _, err := fd.WriteAt(make([]byte, 8192), testSize-4096); return err }},
		{"fallocate growing the file", syscall.EFBIG, func() error { return unix.Fallocate(int(fd.Fd()), 0, testSize-4096, 8192) }},
		{"zero range growing the file", syscall.EFBIG, func() error {
			return unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_ZERO_RANGE, testSize-4096, 8192)
		}},
		{"collapse range", syscall.EOPNOTSUPP, func() error {
			return unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096)
		}},
	} {
		if err := tc.call(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.err)
		}
	}
	for _, tc := range []struct {
		what string
		call func() error
	}{
		{"truncate to the same size", func() error { return os.Truncate(f.Path(), testSize) }},
		{"touch", func() error { return os.Chtimes(f.Path(), time.Now(), time.Now()) }},
		{"fallocate within the file", func() error { return unix.Fallocate(int(fd.Fd()), 0, 0, testSize) }},
		{"fallocate past the end keeping the size", func() error {
			return unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_KEEP_SIZE, testSize-4096, 1<<20)
		}},
	} {
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v, want success", tc.what, err)
		}
	}
	if st, err := os.Stat(img); err != nil || st.Size() != testSize {
		t.Errorf("image after refusals: %v, %v; want %d bytes", st.Size(), err, testSize)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("mount after refusals holds %v, %v; want just disk", entries, err)
	}
}

// TestOtherUsersCannotOpen opens the file as nobody, next to a file in the
// same directories that nobody can read, so that only the FUSE mount can be
// what refuses.
func TestOtherUsersCannotOpen(t *testing.T) {
	f, _, _ := serve(t)
	mnt := filepath.Dir(f.Path())
	for d := filepath.Dir(mnt); d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if d == os.TempDir() {
			break
		}
	}
	control := filepath.Join(filepath.Dir(mnt), "control")
	if err := os.WriteFile(control, []byte("readable"), 0o644); err != nil {
		t.Fatal(err)
	}
	asNobody := func(path string) ([]byte, error) {
		cmd := exec.Command("head", "-c", "1", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd.CombinedOutput()
	}
	if out, err := asNobody(control); err != nil {
		t.Skipf("nobody cannot read a plain file beside the mount either (%v: %s)", err, out)
	}
	out, err := asNobody(f.Path())
	if err == nil {
		t.Fatalf("nobody read the FUSE file: %q", out)
	}
	if !strings.Contains(string(out), "Permission denied") {
		t.Errorf("nobody's read failed with %q, want Permission denied", out)
	}
}

// TestPunchHoleAndZeroRange punches and zeroes unaligned ranges through the
// FUSE file: whole blocks reach Trim and WriteZeroes, the partial blocks at
// the ends are written as zeros, and nothing outside the range changes.
func TestPunchHoleAndZeroRange(t *testing.T) {
	f, dev, img := serve(t)
	fd := openRW(t, f.Path())
	for _, tc := range []struct {
		name  string
		mode  uint32
		calls func() []extent
	}{
		{"punch hole", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, dev.trimmed},
		{"zero range", unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, dev.zeroed},
		{"zero range, size unchanged", unix.FALLOC_FL_ZERO_RANGE, dev.zeroed},
	} {
		const base, n = 1 << 20, 64 << 10
		data := randomBytes(n, 7)
		if _, err := fd.WriteAt(data, base); err != nil {
			t.Fatal(err)
		}
		off, length := int64(base+1000), int64(3*4096+500) // ends at base+13788
		if err := unix.Fallocate(int(fd.Fd()), tc.mode, off, length); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := append([]byte(nil), data...)
		clear(want[1000 : 1000+length])
		if got := readImage(t, img, base, n); !bytes.Equal(got, want) {
			t.Errorf("%s: image differs from the data with [%d, %d) zeroed", tc.name, off, off+length)
		}
		if got, want := tc.calls(), []extent{{base + 4096, 2 * 4096}}; !equalExtents(got, want) {
			t.Errorf("%s: device calls %v, want %v", tc.name, got, want)
		}
	}

	// A range within one block reaches the device as a write of zeros only.
	if err := unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 100, 200); err != nil {
		t.Fatal(err)
	}
	if got := dev.trimmed(); len(got) != 0 {
		t.Errorf("punch within a block: trims %v, want none", got)
	}

	// The part of a punch past the end is ignored, as on a regular file.
	if err := unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, testSize-4096, 1<<20); err != nil {
		t.Fatal(err)
	}
	if got, want := dev.trimmed(), []extent{{testSize - 4096, 4096}}; !equalExtents(got, want) {
		t.Errorf("punch across the end: trims %v, want %v", got, want)
	}

	// fallocate(1), the tool, gets there too.
	if out, err := exec.Command("fallocate", "--punch-hole", "--offset", "8192", "--length", "65536", f.Path()).CombinedOutput(); err != nil {
		t.Fatalf("fallocate --punch-hole: %v: %s", err, out)
	}
	if got, want := dev.trimmed(), []extent{{8192, 65536}}; !equalExtents(got, want) {
		t.Errorf("fallocate --punch-hole: trims %v, want %v", got, want)
	}
}

func equalExtents(a, b []extent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gatedReads is a Device whose reads wait for release while gating is set,
// and which records how many ran at once.
type gatedReads struct {
	blockdev.Device
	gating   atomic.Bool
	release  chan struct{}
	inflight atomic.Int64
	peak     atomic.Int64
}

func (d *gatedReads) ReadAt(p []byte, off int64) (int, error) {
	n := d.inflight.Add(1)
	defer d.inflight.Add(-1)
	for {
		peak := d.peak.Load()
		if n <= peak || d.peak.CompareAndSwap(peak, n) {
			break
		}
	}
	if d.gating.Load() {
		<-d.release
	}
	return d.Device.ReadAt(p, off)
}

// TestRequestsBounded issues twice MaxRequests reads at once and checks
// that the server takes on MaxRequests of them and no more.
func TestRequestsBounded(t *testing.T) {
	requireFUSE(t)
	_, file := newImage(t, testSize)
	dev := &gatedReads{Device: file, release: make(chan struct{})}
	f := mount(t, dev)
	fds := make([]*os.File, 2*MaxRequests)
	for i := range fds {
		fds[i] = openRW(t, f.Path())
	}
	release := dev.gate(t)

	var wg sync.WaitGroup
	for i, fd := range fds {
		wg.Go(func() {
			buf := make([]byte, MaxWrite)
			if _, err := fd.ReadAt(buf, int64(i)*MaxWrite); err != nil {
				t.Error(err)
			}
		})
	}
	wait.For(t, 30*time.Second, "MaxRequests reads to reach the device", func() bool {
		return dev.inflight.Load() >= MaxRequests
	})
	// The absence of more can only be waited for: give them a moment.
	time.Sleep(100 * time.Millisecond)
	if got := dev.peak.Load(); got != MaxRequests {
		t.Errorf("%d reads reached the device at once, want %d", got, MaxRequests)
	}
	release()
	wg.Wait()
}

// TestCloseWithACopyElsewhere: a mount namespace made while the file is
// mounted (a sandbox's, private) holds a copy of the mount, which an
// unmount here does not reach; Close still returns, the connection
// aborted. (Close waited forever before: the e2e suite's delete of an
// always-on sandbox hung on it.)
func TestCloseWithACopyElsewhere(t *testing.T) {
	requireFUSE(t)
	_, file := newImage(t, testSize)
	f, err := Mount(t.TempDir(), "disk", file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	// The copy exists once the holder is in a mount namespace of its own.
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}, func() (bool, error) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid))
		return err == nil && ns != self, nil
	})
	if err != nil {
		t.Fatalf("the holder never left this mount namespace: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs while another namespace holds a copy of the mount")
	}
}

// gate holds every call on dev until the release it returns, which also
// runs when the test ends, before the test's earlier cleanups (the closes,
// the detach and the unmount).
func (dev *gatedReads) gate(t testing.TB) (release func()) {
	dev.gating.Store(true)
	released := false
	release = func() {
		if !released {
			released = true
			dev.gating.Store(false)
			close(dev.release)
		}
	}
	t.Cleanup(release)
	return release
}
