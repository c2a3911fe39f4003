//go:build linux

package template

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
)

// TestBuildDefault builds the default template for real. The first run on a
// machine pays for debootstrap (about 70 s) unless the e2e suite did; the
// template stays in $WARREN_TEST_TEMPLATE_CACHE/template-test and the root
// filesystem cache in $WARREN_TEST_TEMPLATE_CACHE/rootfs for later runs.
// -short skips the rebuild and cancellation checks, which cost an unpack
// and a mkfs each.
func TestBuildDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: debootstrap, mkfs with device nodes, loop mounts")
	}
	for _, tool := range []string{"debootstrap", "mkfs.ext4", "tar", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs loop devices to check the image: %v", err)
	}
	cacheDir := os.Getenv("WARREN_TEST_TEMPLATE_CACHE")
	if fi, err := os.Stat(cacheDir); cacheDir == "" || err != nil || !fi.IsDir() {
		t.Skip("set WARREN_TEST_TEMPLATE_CACHE to a directory to build a real template (about 70 s once, reused after)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))

	dataDir := filepath.Join(cacheDir, "template-test")
	disks := filepath.Join(dataDir, "disks")
	wasMounted := isMountPoint(disks)
	pool, err := disk.Open(ctx, dataDir, log, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		// Leave the machine as we found it; the image stays for the next run.
		if !wasMounted && isMountPoint(pool.Dir()) {
			if err := unix.Unmount(pool.Dir(), 0); err != nil {
				t.Errorf("unmount %s: %v", pool.Dir(), err)
			}
		}
	})
	t.Logf("pool %s: %v", pool.Dir(), pool.Mode())

	// The root filesystem cache is the e2e suite's too (its daemons'
	// --rootfs-cache): debootstrap runs once per machine.
	c, err := NewCatalog(pool, log, Options{AgentBinary: buildTestAgent(t), RootfsCache: filepath.Join(cacheDir, "rootfs")})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	info, err := c.Ensure(ctx, "default", testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Ensure(default): %v", time.Since(start))
	if info.Name != "default" || info.Recipe != "default" || info.SizeBytes != DefaultImageSize ||
		info.UsedBytes <= 0 || info.UsedBytes >= info.SizeBytes/2 {
		t.Errorf("Ensure = %+v; want default, %d bytes, sparse", info, DefaultImageSize)
	}
	if got, err := c.Get("default"); err != nil || got != info {
		t.Errorf("Get = %+v, %v; want %+v", got, err, info)
	}
	if list, err := c.List(); err != nil || len(list) != 1 || list[0] != info {
		t.Errorf("List = %+v, %v; want [%+v]", list, err, info)
	}
	checkImage(t, info.Path)

	if testing.Short() {
		return
	}
	t.Run("rebuild uses the cache", func(t *testing.T) {
		var progress syncBuffer
		start := time.Now()
		re, err := c.Build(ctx, "default", &progress)
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		t.Logf("rebuild from cache: %v", time.Since(start))
		out := progress.String()
		if !strings.Contains(out, "rootfs: unpacking cached root filesystem") || strings.Contains(out, "\ndebootstrap: ") {
			t.Errorf("rebuild did not use the cached root filesystem:\n%s", out)
		}
		if re.Path != info.Path || !re.BuiltAt.After(info.BuiltAt) {
			t.Errorf("rebuild = %+v, want a newer build at %s", re, info.Path)
		}
		checkImage(t, re.Path)
		info = re
	})
	t.Run("cancelled build keeps the old template", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cancel once the build is making its image: the last step.
		_, err := c.Build(cctx, "default", cancelOn{prefix: "mkfs: ", cancel: cancel})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Build err = %v, want context.Canceled", err)
		}
		if got, err := c.Get("default"); err != nil || got.BuiltAt != info.BuiltAt {
			t.Errorf("after a cancelled build, Get = %+v, %v; want the old %+v", got, err, info)
		}
		if work, _ := filepath.Glob(filepath.Join(pool.Dir(), "templates", ".build-*")); len(work) > 0 {
			t.Errorf("work directories left behind: %v", work)
		}
	})
}

// checkImage loop-mounts the template read-only and checks what sandboxes
// rely on, running programs from it in a chroot.
func checkImage(t *testing.T, img string) {
	t.Helper()
	l, err := disk.AttachLoop(img, disk.LoopOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mnt := t.TempDir()
	if err := unix.Mount(l.Path(), mnt, "ext4", unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("mount %s: %v", img, err)
	}
	defer func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()

	for _, name := range []string{"usr/bin/python3", "usr/bin/git", "usr/bin/curl", "usr/bin/ps", "etc/ssl/certs/ca-certificates.crt"} {
		if _, err := os.Stat(filepath.Join(mnt, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(mnt, "usr/local/sbin/warren-agent")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("agent: %v, %v; want mode 0755", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(mnt, "etc/passwd")); !strings.Contains(string(b), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("/etc/passwd has no sandbox user:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(mnt, "etc/hostname")); string(b) != "sandbox\n" {
		t.Errorf("/etc/hostname = %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(mnt, "etc/resolv.conf")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("/etc/resolv.conf: %v, %v; want an empty file", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(mnt, "tmp")); err != nil || fi.Mode() != fs.ModeDir|fs.ModeSticky|0o777 {
		t.Errorf("/tmp: %v, %v; want 1777", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(mnt, "home/user")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("/home/user: %v, %v; want owned by 1000", fi, err)
	}
	if junk, _ := filepath.Glob(filepath.Join(mnt, "var/cache/apt/archives/*.deb")); len(junk) > 0 {
		t.Errorf("downloaded packages left in the image: %d", len(junk))
	}
	if junk, _ := filepath.Glob(filepath.Join(mnt, "var/cache/apt/*.bin")); len(junk) > 0 {
		t.Errorf("apt caches left in the image: %v", junk)
	}
	for _, argv := range [][]string{
		{"/usr/local/sbin/warren-agent"},
		{"/usr/bin/python3", "-c", "import ssl, json; print('python ok')"},
		{"/usr/bin/git", "--version"},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: mnt}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "HOME=/root"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v in the image: %v: %s", argv, err, out)
		}
	}
}

// buildTestAgent builds a small static program to stand in for the guest
// agent, which another package provides.
func buildTestAgent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"test agent\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "warren-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build test agent: %v: %s", err, out)
	}
	return bin
}

func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// testWriter logs each write (a progress line) to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cancelOn calls cancel when a progress line starts with prefix.
type cancelOn struct {
	prefix string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte(c.prefix)) {
		c.cancel()
	}
	return len(p), nil
}

// TestDebootstrapSilentMirror: a mirror that accepts connections and never
// answers (the failure of issue 12, where debootstrap sat for 12 minutes)
// fails the install within its bounds, naming the mirror: through wget's
// read timeout, and through the watchdog when nothing is printed.
func TestDebootstrapSilentMirror(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: debootstrap")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skipf("needs debootstrap: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	mirror := "http://" + ln.Addr().String() + "/debian"
	for _, tc := range []struct {
		name   string
		bounds fetchBounds
		want   string
		within time.Duration
	}{
		{"read timeout", fetchBounds{Connect: time.Second, Read: time.Second, Tries: 1, Stall: time.Minute, Max: 2 * time.Minute},
			"debootstrap from " + mirror + ": debootstrap: exit status", time.Minute},
		{"no progress", fetchBounds{Connect: time.Minute, Read: time.Minute, Tries: 1, Stall: 2 * time.Second, Max: 2 * time.Minute},
			"debootstrap from " + mirror + ": debootstrap too slow: no progress for 2s", 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			r := recipes["default"]
			start := time.Now()
			var out bytes.Buffer
			err := debootstrap(context.Background(), newLineWriter(&out, "debootstrap"),
				r.debootstrapArgs(filepath.Join(work, "rootfs"), mirror), mirror, work, tc.bounds)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q\noutput:\n%s", err, tc.want, out.String())
			}
			if took > tc.within {
				t.Errorf("failed after %v, want within %v", took, tc.within)
			}
			t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}
