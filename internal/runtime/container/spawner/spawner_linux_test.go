//go:build linux

package spawner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/wait"
)

// The test binary is its own spawner: started as Arg0, it serves.
func TestMain(m *testing.M) {
	if Started() {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

const hostID = 300_000_000 // far above any uid the host hands out

func newClient(t *testing.T) *Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("writing a child's uid map to another uid range needs root")
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(self)
	t.Cleanup(func() {
		c.Close()
		self.Close()
	})
	return c
}

// outFile makes the file a child's stdout and stderr go to; it is closed
// when the test ends.
func outFile(t *testing.T) *os.File {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return out
}

// spawnShell runs script in sh in a new user and pid namespace through c,
// and returns its output once it has exited.
func spawnShell(t *testing.T, c *Client, script string) string {
	t.Helper()
	out := outFile(t)
	req := Request{
		Path: "/bin/sh", Args: []string{"sh", "-c", script},
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID, HostID: hostID, Size: 65536,
	}
	pid, pidfd, err := c.Spawn(req, out, nil, nil)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	defer unix.Close(pidfd)
	if pid <= 0 {
		t.Fatalf("pid %d", pid)
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 10_000); err != nil || n != 1 {
		t.Fatalf("the child did not exit (poll %d, %v)", n, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSpawnInItsOwnUserNamespace(t *testing.T) {
	c := newClient(t)
	got := spawnShell(t, c, `id -u; echo $$; cat /proc/self/uid_map`)
	f := strings.Fields(got)
	if len(f) != 5 || f[0] != "0" || f[1] != "1" || f[2] != "0" || f[3] != "300000000" || f[4] != "65536" {
		t.Fatalf("child saw %q; want uid 0, pid 1 and the map 0 300000000 65536", got)
	}
}

func TestSpawnRefusals(t *testing.T) {
	c := newClient(t)
	out := outFile(t)
	if _, _, err := c.Spawn(Request{Path: "/bin/true", Args: []string{"true"}}, out, nil, nil); err == nil {
		t.Error("a child without a user namespace of its own was spawned")
	}
	missing := Request{Path: "/nonexistent", Args: []string{"x"}, Cloneflags: syscall.CLONE_NEWUSER, HostID: hostID, Size: 1}
	if _, _, err := c.Spawn(missing, out, nil, nil); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("spawning a missing binary: %v; want the exec's error", err)
	}
	many := make([]*os.File, maxFiles)
	for i := range many {
		many[i] = out
	}
	if _, _, err := c.Spawn(Request{Path: "/bin/true", Cloneflags: syscall.CLONE_NEWUSER}, out, many, nil); err == nil {
		t.Error("a request over the file bound was sent")
	}
	// The spawner still serves after refusals.
	if got := spawnShell(t, c, "echo ok"); got != "ok\n" {
		t.Errorf("after the refusals the child printed %q", got)
	}
}

// TestSpawnBornInItsCgroup: a child spawned with a cgroup's tasks files is
// born in that cgroup (no process was moved: the spawner's cloning thread
// joined it), with CLONE_NEWCGROUP its cgroup namespace is rooted there,
// and once Spawn returns no thread of the spawner is in the group: the one
// that joined it has ended.
func TestSpawnBornInItsCgroup(t *testing.T) {
	c := newClient(t)
	h, err := cgroup.Detect(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	if h.Version() != 1 {
		t.Skip("cgroup v2: the runtime moves its inits instead")
	}
	g, err := h.Create(fmt.Sprintf("spawner-test-%d", os.Getpid()), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(context.Background()); err != nil {
			t.Errorf("destroy the test's cgroup: %v", err)
		}
	})
	join, err := g.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range join {
			f.Close()
		}
	}()
	out := outFile(t)
	req := Request{
		Path: "/bin/sh", Args: []string{"sh", "-c", "cat /proc/self/cgroup; exec sleep 30"},
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP, HostID: hostID, Size: 1,
	}
	pid, pidfd, err := c.Spawn(req, out, nil, join)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	defer unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	procs, err := g.Procs()
	if err != nil || !slices.Contains(procs, pid) || slices.Contains(procs, spawnerPid(t)) {
		t.Errorf("the group holds %v (%v); want the child %d and no thread of the spawner %d", procs, err, pid, spawnerPid(t))
	}
	var seen string
	wait.For(t, 10*time.Second, "the child's /proc/self/cgroup", func() bool {
		b, _ := os.ReadFile(out.Name())
		seen = string(b)
		return strings.Contains(seen, ":memory:")
	})
	for line := range strings.Lines(seen) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && (f[1] == "memory" || f[1] == "pids") && f[2] != "/" {
			t.Errorf("the child sees its %s cgroup as %q; want / (its namespace's root)", f[1], f[2])
		}
	}
}

// TestSpawnerComesBack: a spawner that died is started again at the next
// Spawn; its children outlive it.
func TestSpawnerComesBack(t *testing.T) {
	c := newClient(t)
	out := outFile(t)
	req := Request{Path: "/bin/sleep", Args: []string{"sleep", "30"}, Cloneflags: syscall.CLONE_NEWUSER, HostID: hostID, Size: 1}
	_, pidfd, err := c.Spawn(req, out, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	defer unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	c.mu.Lock()
	exited := c.exited
	c.mu.Unlock()
	unix.Kill(spawnerPid(t), unix.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the spawner did not die")
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Error("the child died with its spawner")
	}
	if got := spawnShell(t, c, "echo back"); got != "back\n" {
		t.Errorf("after the spawner died the child printed %q", got)
	}
}

// spawnerPid finds the test's spawner: its child started as Arg0.
func spawnerPid(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := bytes.LastIndexByte(stat, ')')
		if !bytes.Equal(argv, []byte(Arg0+"\x00")) || i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	t.Fatal("no spawner runs")
	return 0
}
