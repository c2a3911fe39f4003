//go:build linux

// Package e2e is warren's end-to-end suite: it builds the real binaries,
// starts the real daemon on a data directory of its own, and drives real
// sandboxes through the CLI and the Go client. Nothing is mocked.
//
// It needs root (the container runtime does) and the default template, which
// it builds on first use into $WARREN_TEST_TEMPLATE_CACHE (set by
// scripts/test.sh) and reuses on later runs.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/blob/s3test"
	"warren/internal/blockserver"
	"warren/internal/network"
)

// skipReason is why this machine cannot run the suite; "" when it can.
var skipReason string

// bin is the directory holding the warren and warren-agent binaries.
var bin string

// shared is the daemon most tests use.
var shared *daemon

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	switch {
	case os.Geteuid() != 0:
		skipReason = "the end-to-end suite starts container sandboxes, which needs root"
	case os.Getenv("WARREN_TEST_TEMPLATE_CACHE") == "":
		skipReason = "WARREN_TEST_TEMPLATE_CACHE is not set (scripts/test.sh sets it): the suite needs a place to keep the default template"
	}
	if skipReason != "" {
		return m.Run()
	}
	unlock, err := lockHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer unlock()
	noteForeign()
	if strayFile, strayInode, err = strayPipe(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if bin, err = binaries(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dataDir := filepath.Join(os.Getenv("WARREN_TEST_TEMPLATE_CACHE"), "e2e-data")
	// The template first (debootstrap from the host's mirror, cached in
	// dataDir), by a daemon without networking, before the test internet
	// exists: nothing of the suite's can be in the way of the mirror.
	builder, err := startDaemonWith(dataDir, "default", 15*time.Minute, nil, "--no-network")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build the default template:", err)
		return 1
	}
	builder.stop()
	if inet, err = startInternet(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer inet.stop()
	shared, err = startDaemon(dataDir, "default", time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	shared.stop()
	// The block server outlives its daemons by design: the suite's goes
	// with the suite.
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := blockserver.Stop(stopCtx, dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: stop the block server:", err)
		code = 1
	}
	cancel()
	if err := inet.checkRoutes(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: the suite's routes:", err)
		code = 1
	}
	// Every daemon is stopped and its sandboxes deleted: what their pools
	// left on the host goes too (a pool with a sandbox left stays, and
	// says why).
	for _, p := range inet.pools {
		if err := network.Release("", p); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
		}
	}
	return code
}

// hostLock is the lock one run of the suite holds on the host: what a run
// makes there (its test internet, its routing table and rules) is swept
// by the next run as stale, which is right only when no other run is
// still using it. A second run waits for the first.
const hostLock = "/run/warren-e2e.lock"

// lockHost takes hostLock, waiting for a run that holds it, and returns
// its release. The descriptor is close-on-exec: no daemon inherits it.
func lockHost() (func(), error) {
	f, err := os.OpenFile(hostLock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the suite's host lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: another run of the suite holds %s: waiting for it\n", hostLock)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("the suite's host lock: %w", err)
		}
	}
	return func() { f.Close() }, nil
}

// strayFile is handed to every daemon (fd 3) without close-on-exec, and
// strayInode is its pipe's inode, as /proc/PID/fd shows it.
var (
	strayFile  *os.File
	strayInode uint64
)

// strayPipe makes the stray descriptor: the read end of a pipe.
func strayPipe() (*os.File, uint64, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	w.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		return nil, 0, err
	}
	return r, st.Ino, nil
}

// binaries returns a directory with freshly built warren binaries:
// $WARREN_BIN when set (scripts/test.sh builds them there), else a build.
func binaries() (string, error) {
	if dir := os.Getenv("WARREN_BIN"); dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "warren-bin-")
	if err != nil {
		return "", err
	}
	for _, b := range []struct{ out, pkg, cgo string }{
		{"warren-agent", "warren/cmd/warren-agent", "0"},
		{"warren", "warren/cmd/warren", "1"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return dir, nil
}

// daemon is a running `warren server`.
type daemon struct {
	dataDir string
	url     string
	key     string
	cmd     *exec.Cmd
	waited  chan struct{}
	log     *lockedBuffer
	// cl is the one API client of the daemon: one transport, so that
	// its keep-alive connections are reused and each test's calls do not
	// leave the daemon a connection of their own to idle out.
	cl *client.Client
}

var serving = regexp.MustCompile(`serving on (https?://[^ ]+)`)

// startDaemon starts `warren server` on dataDir (listening on a free port)
// and waits until it serves; building template tpl may take minutes the
// first time.
func startDaemon(dataDir, tpl string, wait time.Duration) (*daemon, error) {
	return startDaemonWith(dataDir, tpl, wait, nil)
}

// rootfsCache is the suite's daemons' --rootfs-cache, which the template
// package's tests share: debootstrap runs once per cache.
func rootfsCache() string {
	return filepath.Join(os.Getenv("WARREN_TEST_TEMPLATE_CACHE"), "rootfs")
}

// spillAfter is the suite's daemons' --pause-spill-after.
const spillAfter = 2 * time.Second

// startDaemonWith is startDaemon with more environment variables and
// server flags; its sandboxes reach the test internet (startSandboxDaemon).
func startDaemonWith(dataDir, tpl string, wait time.Duration, env []string, flags ...string) (*daemon, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	// Registries on loopback are the suite's own (template_test.go). A
	// paused gvisor sandbox's memory is saved soon, so that tests see both
	// of its pauses (conformance_test.go).
	args := []string{"server", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--template", tpl, "--registry-allow", "127.0.0.1",
		"--pause-spill-after", spillAfter.String(), "--rootfs-cache", rootfsCache()}
	if n := os.Getenv("WARREN_E2E_WARM"); n != "" {
		args = append(args, "--warm", n) // benchmarks compare pool sizes
	}
	return startSandboxDaemon(dataDir, wait, env, append(args, flags...)...)
}

// startSandboxDaemon is startWarren for a daemon that runs sandboxes (args:
// server or node, and its flags). Once the test internet is up, its
// sandboxes resolve names through it and reach it: the daemon gets a
// network pool of its own (daemonNetFlags, which the flags in args
// override), routed there (routePool).
func startSandboxDaemon(dataDir string, wait time.Duration, env []string, args ...string) (*daemon, error) {
	if inet != nil {
		args = slices.Concat(args[:1], daemonNetFlags(), args[1:])
	}
	d, err := startWarren(dataDir, wait, env, args...)
	if err != nil {
		return nil, err
	}
	if inet != nil {
		if err := d.routePool(); err != nil {
			d.kill()
			return nil, err
		}
	}
	return d, nil
}

// startWarren runs the warren command line args (a daemon: server, node or
// control) with dataDir as its data directory, and waits until it serves.
func startWarren(dataDir string, wait time.Duration, env []string, args ...string) (*daemon, error) {
	d := &daemon{dataDir: dataDir, log: &lockedBuffer{}, waited: make(chan struct{})}
	d.cmd = exec.Command(filepath.Join(bin, "warren"), args...)
	d.cmd.Env = append(os.Environ(), env...)
	// A descriptor without close-on-exec, as a careless parent leaves:
	// nothing of a sandbox may ever hold it (TestEscapeAgent).
	d.cmd.ExtraFiles = []*os.File{strayFile}
	d.cmd.Stderr = d.log
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	go func() { d.cmd.Wait(); close(d.waited) }()
	select {
	case d.url = <-urls:
	case <-d.waited:
		return nil, fmt.Errorf("warren %s exited before serving:\n%s", args[0], d.log.String())
	case <-time.After(wait):
		d.kill()
		return nil, fmt.Errorf("warren %s did not serve within %v:\n%s", args[0], wait, d.log.String())
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		d.kill()
		return nil, err
	}
	d.key = strings.TrimSpace(string(key))
	d.cl = client.New(d.url, d.key)
	return d, nil
}

// routePool sends the sandboxes of the daemon's network pool, which it
// recorded in its data directory, to the test internet.
func (d *daemon) routePool() error {
	b, err := os.ReadFile(filepath.Join(d.dataDir, "net-pool"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // sandbox networking is off
	}
	if err != nil {
		return err
	}
	pool, err := netip.ParsePrefix(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("the daemon's recorded network pool: %w", err)
	}
	return inet.routePool(pool)
}

// startNode starts a second node for the test on a fresh data directory,
// with no template, and stops it when the test ends, after the test's other
// cleanups (which may still delete sandboxes through it), then stops the
// block server it may have started and unmounts the reflink image it
// mounted in its data directory.
func startNode(t testing.TB, env []string, flags ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := blockserver.Stop(ctx, dir); err != nil {
			t.Errorf("stop the node's block server: %v", err)
		}
		unix.Unmount(filepath.Join(dir, "disks"), unix.MNT_DETACH)
	})
	d, err := startDaemonWith(dir, "", time.Minute, env, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d
}

// snapshotNode starts a node (startNode) on the suite's blob store with
// flags, and takes a durable snapshot of a new sandbox of the shared daemon
// for the test to restore there (a node has no template). The snapshot is
// deleted when the test ends.
func snapshotNode(t *testing.T, flags ...string) (*daemon, string) {
	t.Helper()
	id := shared.newSandbox(t)
	snap, err := shared.client().Snapshot(context.Background(), id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), snap.ID) })
	return startNode(t, nil, append([]string{"--blob-store", filepath.Join(shared.dataDir, "blobs")}, flags...)...), snap.ID
}

// sharedOnBucket restarts the shared daemon on srv's bucket, its blob
// store until the test ends, and returns it; when the test ends, after the
// cleanups registered later, the shared daemon is back on its own.
func sharedOnBucket(t testing.TB, srv s3test.Server) *daemon {
	t.Helper()
	var a *daemon
	t.Cleanup(func() {
		if a != nil {
			a.stop()
		}
		var err error
		if shared, err = startDaemon(shared.dataDir, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	shared.stop()
	var err error
	if a, err = startDaemonWith(shared.dataDir, "", time.Minute, srv.Env, "--blob-store", srv.URL); err != nil {
		t.Fatal(err)
	}
	return a
}

// stop asks the daemon to exit (SIGTERM) and waits.
func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.waited:
	case <-time.After(20 * time.Second):
		d.kill()
	}
}

// kill is kill -9 of the daemon.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	<-d.waited
}

func (d *daemon) client() *client.Client { return d.cl }

// need skips the test when the suite cannot run here.
func need(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// cli runs the warren CLI against daemon d with stdin, returning stdout,
// stderr and the exit code.
func (d *daemon) cli(t testing.TB, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "warren"), args...)
	cmd.Env = append(os.Environ(), "WARREN_URL="+d.url, "WARREN_API_KEY="+d.key)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("warren %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// newSandbox creates a sandbox with the CLI and deletes it when the test ends.
func (d *daemon) newSandbox(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, code := d.cli(t, nil, append([]string{"create"}, args...)...)
	if code != 0 {
		t.Fatalf("warren create: exit %d: %s\ndaemon log:\n%s", code, errOut, d.log.tail(30))
	}
	id := strings.TrimSuffix(out, "\n")
	if !regexp.MustCompile(`^sb-[a-z0-9]+$`).MatchString(id) {
		t.Fatalf("warren create printed %q, want the sandbox ID alone", out)
	}
	t.Cleanup(func() { d.client().DeleteSandbox(context.Background(), id) })
	return id
}

// tenantClient makes a key for tenant on the shared daemon and returns a
// client that uses it.
func tenantClient(t testing.TB, tenant string) *client.Client {
	t.Helper()
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return client.New(shared.url, k.Key)
}

// lockedBuffer collects a process's output safely across goroutines.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail is the last n lines written.
func (b *lockedBuffer) tail(n int) string {
	lines := strings.Split(b.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
