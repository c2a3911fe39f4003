//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warren/internal/backoff"
)

// These tests use the host's real cgroup v1 hierarchy. They need root and a
// v1 host (the build machine is one); elsewhere they skip, and the v2 logic
// is covered by the fake hierarchy in v2_linux_test.go.

var groupSeq atomic.Int64

// testName is a group name no other test run on this host uses.
func testName() string {
	return fmt.Sprintf("gotest-%d-%d", os.Getpid(), groupSeq.Add(1))
}

func requireV1(t *testing.T) *Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	h, err := Detect(nil)
	if err != nil {
		t.Skipf("no usable cgroup hierarchy: %v", err)
	}
	if h.Version() != 1 {
		t.Skipf("host has cgroup v%d; the v1 tests need v1", h.Version())
	}
	return h
}

// newGroup creates a group that is destroyed when the test ends, even when
// it fails.
func newGroup(t *testing.T, h *Hierarchy, l Limits) *Group {
	t.Helper()
	g, err := h.Create(testName(), l)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := g.Destroy(ctx); err != nil {
			t.Errorf("cleanup Destroy: %v", err)
		}
	})
	return g
}

// child is a process the test started inside a group.
type child struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File
	done           chan struct{} // closed when cmd.Wait returned
}

// startInGroup starts cmd held at a gate (it must read a line from stdin
// before doing anything), moves it into g, then opens the gate, so that it
// runs nothing outside the group. Its output goes to files, not pipes, so
// that grandchildren holding them open cannot stall cmd.Wait.
func startInGroup(t *testing.T, g *Group, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{cmd: cmd, done: make(chan struct{})}
	var err error
	if c.stdout, err = os.CreateTemp(t.TempDir(), "stdout"); err != nil {
		t.Fatal(err)
	}
	if c.stderr, err = os.CreateTemp(t.TempDir(), "stderr"); err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("child %d not reaped 10s after SIGKILL", cmd.Process.Pid)
		}
		c.stdout.Close()
		c.stderr.Close()
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	if _, err := gate.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	return c
}

// output reads what the child wrote to f so far.
func (c *child) output(t *testing.T, f *os.File) string {
	t.Helper()
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// helper is the test binary re-executed as one of TestMain's helpers.
func helper(name string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	return cmd
}

// wait returns the child's exit state, failing the test after d.
func (c *child) wait(t *testing.T, d time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState
	case <-time.After(d):
		t.Fatalf("child %d still running after %v", c.cmd.Process.Pid, d)
		return nil
	}
}

func signaled(ps *os.ProcessState) syscall.Signal {
	ws := ps.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestV1CreateWritesLimits(t *testing.T) {
	h := requireV1(t)
	const mem = 64 << 20
	g := newGroup(t, h, Limits{CPUs: 0.5, MemoryBytes: mem, Pids: 32})

	want := map[string]map[string]string{
		"cpu":    {"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "5000"},
		"memory": {"memory.limit_in_bytes": fmt.Sprint(mem), "memory.swappiness": "0"},
		"pids":   {"pids.max": "32"},
	}
	if g.exists("memory", "memory.memsw.limit_in_bytes") {
		want["memory"]["memory.memsw.limit_in_bytes"] = fmt.Sprint(mem)
	} else {
		t.Log("no memory.memsw.limit_in_bytes on this kernel: swap limit not checked")
	}
	for c, files := range want {
		for f, v := range files {
			if got := readTrim(t, filepath.Join(g.dir(c), f)); got != v {
				t.Errorf("%s/%s = %q, want %q", c, f, got, v)
			}
		}
	}
	for _, c := range h.v1Order() {
		if fi, err := os.Stat(g.dir(c)); err != nil || !fi.IsDir() {
			t.Errorf("group missing from %s: %v", c, err)
		}
	}
	if m, ok := h.mounts["cpuset"]; ok {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			got, want := readTrim(t, filepath.Join(g.dir("cpuset"), f)), readTrim(t, filepath.Join(m, f))
			if got != want || got == "" {
				t.Errorf("%s = %q, want the root's %q", f, got, want)
			}
		}
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryLimit != mem || s.Pids != 0 || s.OOMKills != 0 {
		t.Errorf("Stats = %+v, want MemoryLimit %d, no pids, no OOM kills", s, mem)
	}
}

func TestV1ZeroLimitsMeanNoLimit(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{})
	if got := readTrim(t, filepath.Join(g.dir("cpu"), "cpu.cfs_quota_us")); got != "-1" {
		t.Errorf("cpu.cfs_quota_us = %q, want -1", got)
	}
	if got := readTrim(t, filepath.Join(g.dir("pids"), "pids.max")); got != "max" {
		t.Errorf("pids.max = %q, want max", got)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryLimit != 0 {
		t.Errorf("Stats().MemoryLimit = %d, want 0 (no limit)", s.MemoryLimit)
	}
}

func TestV1CreateOpenList(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{Pids: 8})
	if _, err := h.Create(g.Name(), Limits{}); !errors.Is(err, ErrExists) {
		t.Errorf("Create of an existing group: err = %v, want ErrExists", err)
	}
	if _, err := h.Open(g.Name()); err != nil {
		t.Errorf("Open: %v", err)
	}
	if _, err := h.Open(testName()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a missing group: err = %v, want ErrNotFound", err)
	}
	names, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, g.Name()) {
		t.Errorf("List = %v, want it to hold %s", names, g.Name())
	}
}

func TestV1ProcsAndKill(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{Pids: 16})
	c := startInGroup(t, g, exec.Command("sh", "-c", "read _; exec sleep 100"))
	pid := c.cmd.Process.Pid
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(procs, []int{pid}) {
		t.Fatalf("Procs = %v, want [%d]", procs, pid)
	}
	if s, err := g.Stats(); err != nil || s.Pids != 1 {
		t.Errorf("Stats().Pids = %d, %v; want 1", s.Pids, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if sig := signaled(c.wait(t, 10*time.Second)); sig != syscall.SIGKILL {
		t.Errorf("child ended by signal %v, want SIGKILL", sig)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Errorf("Procs after Kill = %v, %v; want none", procs, err)
	}
	if st := readTrim(t, filepath.Join(g.dir("freezer"), "freezer.state")); st != "THAWED" {
		t.Errorf("freezer.state after Kill = %s, want THAWED", st)
	}
}

func TestV1PidsLimitStopsForks(t *testing.T) {
	h := requireV1(t)
	const limit = 5
	g := newGroup(t, h, Limits{Pids: limit})
	// The shell is one task; each background sleep another. It tries 20.
	script := `read _; i=0; while [ $i -lt 20 ]; do sleep 100 >/dev/null 2>&1 & echo spawned; i=$((i+1)); done; wait`
	c := startInGroup(t, g, exec.Command("sh", "-c", script))
	ps := c.wait(t, 20*time.Second)
	spawned := strings.Count(c.output(t, c.stdout), "spawned")
	if ps.Success() || spawned >= 20 {
		t.Fatalf("shell spawned %d of 20 children and exited %v; want fork to fail", spawned, ps)
	}
	if spawned > limit-1 {
		t.Errorf("spawned %d children with pids.max %d, want at most %d", spawned, limit, limit-1)
	}
	if !strings.Contains(c.output(t, c.stderr), "fork") {
		t.Errorf("stderr %q does not report a fork failure", c.output(t, c.stderr))
	}
	if s, err := g.Stats(); err != nil || s.Pids > limit {
		t.Errorf("Stats().Pids = %d, %v; want at most %d", s.Pids, err, limit)
	}
}

func TestV1MemoryLimitOOMKills(t *testing.T) {
	h := requireV1(t)
	const mem = 64 << 20
	g := newGroup(t, h, Limits{MemoryBytes: mem, Pids: 64})
	c := startInGroup(t, g, helper("alloc"))
	ps := c.wait(t, 60*time.Second)
	if sig := signaled(ps); sig != syscall.SIGKILL {
		t.Fatalf("allocating 256 MiB under a 64 MiB limit: exit %v, stdout %q; want killed by the OOM killer", ps, c.output(t, c.stdout))
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d, want at least 1", s.OOMKills)
	}
	if s.MemoryLimit != mem {
		t.Errorf("Stats().MemoryLimit = %d, want %d", s.MemoryLimit, mem)
	}
}

func TestV1KillForkingProcess(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{Pids: 64})
	c := startInGroup(t, g, helper("forker"))
	// Let it fill the group so Kill races real forks.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := backoff.Poll(ctx, pollWaits, func() (bool, error) {
		procs, err := g.Procs()
		return len(procs) >= 20, err
	})
	if err != nil {
		t.Fatalf("forker never reached 20 processes: %v", err)
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Errorf("Procs after Kill = %v, %v; want none", procs, err)
	}
	if sig := signaled(c.wait(t, 10*time.Second)); sig != syscall.SIGKILL {
		t.Errorf("forker ended by signal %v, want SIGKILL", sig)
	}
}

func TestV1DestroyRemovesEverything(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{CPUs: 1, MemoryBytes: 32 << 20, Pids: 8})
	c := startInGroup(t, g, exec.Command("sh", "-c", "read _; sleep 100 & sleep 100"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// dash may or may not exec the last sleep in place of itself.
	if err := backoff.Poll(ctx, pollWaits, func() (bool, error) {
		procs, err := g.Procs()
		return len(procs) >= 2, err
	}); err != nil {
		t.Fatalf("waiting for the sleeps: %v", err)
	}
	if err := g.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there after Destroy (%v)", d, err)
		}
	}
	if err := g.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := h.Open(g.Name()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after Destroy: err = %v, want ErrNotFound", err)
	}
	if sig := signaled(c.wait(t, 10*time.Second)); sig != syscall.SIGKILL {
		t.Errorf("child ended by signal %v, want SIGKILL", sig)
	}
}

// TestV1WorkKeepsTheAgentsShare: a process that starts its children from a
// thread it moved into the work subgroup keeps its own memory when a child
// runs the subgroup out of memory: the OOM killer takes the child. Destroy
// removes the subgroup with the group.
func TestV1WorkKeepsTheAgentsShare(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{MemoryBytes: 128 << 20, Pids: 64})
	tasks, err := g.Work(Limits{MemoryBytes: 64 << 20, Pids: 16})
	if err != nil {
		t.Fatalf("Work: %v", err)
	}
	for c, want := range map[string]map[string]string{
		"memory": {"memory.limit_in_bytes": fmt.Sprint(64 << 20)},
		"pids":   {"pids.max": "16"},
	} {
		for f, v := range want {
			if got := readTrim(t, filepath.Join(g.dir(c), workDir, f)); got != v {
				t.Errorf("work %s/%s = %q, want %q", c, f, got, v)
			}
		}
	}
	cmd := helper("agent")
	cmd.ExtraFiles = tasks
	c := startInGroup(t, g, cmd)
	for _, f := range tasks {
		f.Close()
	}
	ps := c.wait(t, 60*time.Second)
	out := c.output(t, c.stdout)
	if !ps.Success() || !strings.Contains(out, "agent survived") {
		t.Fatalf("agent: %v, stdout %q, stderr %q; want it to survive its child's OOM", ps, out, c.output(t, c.stderr))
	}
	if !strings.Contains(out, "hog: killed true") {
		t.Errorf("the hog was not OOM-killed: %q, stderr %q", out, c.output(t, c.stderr))
	}
	for _, ctl := range workControllers {
		if !strings.Contains(out, ctl+":/"+parentDir+"/"+g.Name()+"/"+workDir+"\n") {
			t.Errorf("the hog did not run in the %s work subgroup: %q", ctl, out)
		}
	}
	if !strings.Contains(out, "freezer:/"+parentDir+"/"+g.Name()+"\n") {
		t.Errorf("the hog is not in the group's freezer: %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, d := range g.dirsWithWork() {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there after Destroy (%v)", d, err)
		}
	}
}

// TestV1RenameKeepsProcesses: a group made and joined ahead of time takes
// its limits and a new name with its process in it; a rename onto a taken
// name fails and changes nothing.
func TestV1RenameKeepsProcesses(t *testing.T) {
	h := requireV1(t)
	g := newGroup(t, h, Limits{})
	c := startInGroup(t, g, exec.Command("sleep", "60"))
	pid := c.cmd.Process.Pid
	if err := g.Limit(Limits{MemoryBytes: 64 << 20, Pids: 32}); err != nil {
		t.Fatalf("Limit: %v", err)
	}
	taken := newGroup(t, h, Limits{})
	if _, err := g.Rename(taken.Name()); !errors.Is(err, ErrExists) {
		t.Fatalf("rename onto a taken name: %v, want ErrExists", err)
	}
	if procs, err := g.Procs(); err != nil || !slices.Equal(procs, []int{pid}) {
		t.Fatalf("after the refused rename the group holds %v (%v), want [%d]", procs, err, pid)
	}
	name := testName()
	renamed, err := g.Rename(name)
	if err != nil {
		t.Fatalf("Rename: %v", err)
	}
	t.Cleanup(func() { renamed.Destroy(context.Background()) })
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after the rename (%v)", d, err)
		}
	}
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range h.v1Order() {
		if !regexp.MustCompile(`(?m)^\d+:([^:]*,)?` + c + `(,[^:]*)?:/` + parentDir + "/" + name + "$").MatchString(string(self)) {
			t.Errorf("the process is not in the renamed group's %s: %q", c, self)
		}
	}
	for f, want := range map[string]string{"memory.limit_in_bytes": fmt.Sprint(64 << 20), "pids.max": "32"} {
		c, _, _ := strings.Cut(f, ".")
		if got := readTrim(t, filepath.Join(renamed.dir(c), f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	if _, err := h.Open(name); err != nil {
		t.Errorf("Open of the new name: %v", err)
	}
}

func TestV1DetectAtMatchesDetect(t *testing.T) {
	h := requireV1(t)
	at, err := DetectAt("/sys/fs/cgroup", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for c, m := range h.mounts {
		if at.mounts[c] != m {
			t.Errorf("DetectAt mount of %s = %q, Detect found %q", c, at.mounts[c], m)
		}
	}
}
