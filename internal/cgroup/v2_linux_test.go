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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/internal/backoff"
)

// The build machine has cgroup v1 only (its cgroup2 mount has no
// controllers), so these tests check the v2 logic against a fake unified
// hierarchy in a temp dir: a directory tree of regular files standing in
// for cgroupfs. They check exactly which control file gets which value;
// what the kernel then does with those values is the v1 tests' job on this
// machine and needs a v2 host to check for v2.

// fakeV2 is a fake unified hierarchy.
type fakeV2 struct {
	root string
	h    *Hierarchy
	// files are the control files the fake kernel puts in every new
	// group, with their initial contents.
	files map[string]string
}

func newFakeV2(t *testing.T) *fakeV2 {
	t.Helper()
	f := &fakeV2{
		root: t.TempDir(),
		files: map[string]string{
			"cgroup.controllers":     "cpu memory pids",
			"cgroup.subtree_control": "",
			"cgroup.procs":           "",
			"cgroup.kill":            "",
			"cgroup.freeze":          "0",
			"cgroup.events":          "populated 0\nfrozen 0\n",
			"cpu.max":                "max 100000",
			"cpu.stat":               "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
			"memory.max":             "max",
			"memory.swap.max":        "max",
			"memory.current":         "0",
			"memory.events":          "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
			"pids.max":               "max",
			"pids.current":           "0",
		},
	}
	f.put(t, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	f.put(t, "cgroup.subtree_control", "")
	h, err := DetectAt(f.root, 2, nil)
	if err != nil {
		t.Fatalf("DetectAt: %v", err)
	}
	// Like cgroupfs: mkdir populates the control files, rmdir removes them.
	h.mkdir = func(path string) error {
		if err := os.Mkdir(path, 0o755); err != nil {
			return err
		}
		for name, v := range f.files {
			if err := os.WriteFile(filepath.Join(path, name), []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	h.rmdir = func(path string) error {
		if _, err := os.Stat(path); err != nil {
			return err
		}
		return os.RemoveAll(path)
	}
	f.h = h
	return f
}

// put writes a control file, path relative to the fake root.
func (f *fakeV2) put(t *testing.T, path, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.root, path), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// get reads a control file, path relative to the fake root.
func (f *fakeV2) get(t *testing.T, path string) string {
	t.Helper()
	return readTrim(t, filepath.Join(f.root, path))
}

func TestV2CreateWritesExactFiles(t *testing.T) {
	f := newFakeV2(t)
	if _, err := f.h.Create("sb1", Limits{CPUs: 1.5, MemoryBytes: 256 << 20, Pids: 100}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for path, want := range map[string]string{
		"cgroup.subtree_control":            "+cpu +memory +pids",
		"warren/cgroup.subtree_control":     "+cpu +memory +pids",
		"warren/sb1/cpu.max":                "15000 10000",
		"warren/sb1/memory.max":             "268435456",
		"warren/sb1/memory.swap.max":        "0",
		"warren/sb1/pids.max":               "100",
		"warren/sb1/cgroup.subtree_control": "",
		"warren/sb1/cgroup.procs":           "",
	} {
		if got := f.get(t, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if f.h.Version() != 2 {
		t.Errorf("Version = %d, want 2", f.h.Version())
	}
}

func TestV2ZeroLimitsWriteNothing(t *testing.T) {
	f := newFakeV2(t)
	if _, err := f.h.Create("sb1", Limits{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, name := range []string{"cpu.max", "memory.max", "memory.swap.max", "pids.max"} {
		if got, want := f.get(t, "warren/sb1/"+name), f.files[name]; got != want {
			t.Errorf("%s = %q, want the untouched %q", name, got, want)
		}
	}
}

func TestV2ControllersAlreadyEnabled(t *testing.T) {
	f := newFakeV2(t)
	// As the kernel shows them: without '+'.
	f.put(t, "cgroup.subtree_control", "cpu pids\n")
	if _, err := f.h.Create("sb1", Limits{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if got := f.get(t, "cgroup.subtree_control"); got != "+memory" {
		t.Errorf("root cgroup.subtree_control = %q, want only the missing +memory written", got)
	}
}

func TestV2NoSwapAccounting(t *testing.T) {
	f := newFakeV2(t)
	delete(f.files, "memory.swap.max")
	if _, err := f.h.Create("sb1", Limits{MemoryBytes: 1 << 30}); err != nil {
		t.Fatalf("Create without memory.swap.max: %v", err)
	}
	if got := f.get(t, "warren/sb1/memory.max"); got != "1073741824" {
		t.Errorf("memory.max = %q, want 1073741824", got)
	}
}

func TestV2DetectAtRejectsMissingControllers(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := DetectAt(root, 2, nil)
	if err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("DetectAt without memory controller: err = %v, want one naming memory", err)
	}
	if _, err := DetectAt(t.TempDir(), 2, nil); err == nil {
		t.Error("DetectAt of a dir without cgroup.controllers succeeded")
	}
	if _, err := DetectAt(root, 3, nil); err == nil {
		t.Error("DetectAt version 3 succeeded")
	}
}

func TestV2CreateExistsOpenList(t *testing.T) {
	f := newFakeV2(t)
	for _, n := range []string{"b", "a"} {
		if _, err := f.h.Create(n, Limits{}); err != nil {
			t.Fatalf("Create %s: %v", n, err)
		}
	}
	if _, err := f.h.Create("a", Limits{}); !errors.Is(err, ErrExists) {
		t.Errorf("second Create: err = %v, want ErrExists", err)
	}
	if _, err := f.h.Open("a"); err != nil {
		t.Errorf("Open: %v", err)
	}
	if _, err := f.h.Open("c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a missing group: err = %v, want ErrNotFound", err)
	}
	if _, err := f.h.Open("../a"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Open of ../a: err = %v, want ErrInvalidName", err)
	}
	// Not a name warren makes: List must skip it.
	if err := os.Mkdir(filepath.Join(f.root, "warren", "x.y"), 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := f.h.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("List = %v, want [a b]", names)
	}
}

func TestV2CreateUndoesOnFailure(t *testing.T) {
	f := newFakeV2(t)
	delete(f.files, "pids.max") // as if the pids controller were not enabled
	if _, err := f.h.Create("sb1", Limits{Pids: 10}); err == nil {
		t.Fatal("Create with pids.max missing succeeded")
	}
	if _, err := os.Stat(filepath.Join(f.root, "warren", "sb1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Create left its group behind (%v)", err)
	}
}

func TestV2AddProcAndStats(t *testing.T) {
	f := newFakeV2(t)
	g, err := f.h.Create("sb1", Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.AddProc(4242); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "warren/sb1/cgroup.procs"); got != "4242" {
		t.Errorf("cgroup.procs = %q, want 4242", got)
	}
	if err := g.AddProc(0); err == nil {
		t.Error("AddProc(0) succeeded")
	}
	if _, err := g.Rename("sb2"); err == nil {
		t.Error("a v2 group was renamed")
	}
	procs, err := g.Procs()
	if err != nil || !slices.Equal(procs, []int{4242}) {
		t.Errorf("Procs = %v, %v; want [4242]", procs, err)
	}
	f.put(t, "warren/sb1/memory.current", "1048576\n")
	f.put(t, "warren/sb1/pids.current", "3\n")
	f.put(t, "warren/sb1/cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
	f.put(t, "warren/sb1/memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{MemoryBytes: 1 << 20, MemoryLimit: 64 << 20, Pids: 3, CPUUsageNanos: 2500000, OOMKills: 2}
	if s != want {
		t.Errorf("Stats = %+v, want %+v", s, want)
	}
	f.put(t, "warren/sb1/memory.max", "max\n")
	if s, err := g.Stats(); err != nil || s.MemoryLimit != 0 {
		t.Errorf("Stats().MemoryLimit with memory.max=max = %d, %v; want 0", s.MemoryLimit, err)
	}
}

func TestV2KillWritesCgroupKill(t *testing.T) {
	f := newFakeV2(t)
	g, err := f.h.Create("sb1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// A PID that no process has: this path must not signal PIDs at all.
	f.put(t, "warren/sb1/cgroup.procs", "2147483647\n")
	// The fake kernel's cgroup.kill: once "1" is written, the group empties.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fakeKernel := make(chan error, 1)
	go func() {
		fakeKernel <- backoff.Poll(ctx, pollWaits, func() (bool, error) {
			if data, _ := os.ReadFile(filepath.Join(f.root, "warren/sb1/cgroup.kill")); strings.TrimSpace(string(data)) == "1" {
				return true, os.WriteFile(filepath.Join(f.root, "warren/sb1/cgroup.procs"), nil, 0o644)
			}
			return false, nil
		})
	}()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := <-fakeKernel; err != nil {
		t.Fatalf("fake kernel: %v", err)
	}
	if got := f.get(t, "warren/sb1/cgroup.freeze"); got != "0" {
		t.Errorf("cgroup.freeze = %q: the cgroup.kill path must not freeze", got)
	}
}

func TestV2KillFreezesWithoutCgroupKill(t *testing.T) {
	f := newFakeV2(t)
	delete(f.files, "cgroup.kill") // kernels before 5.14
	f.files["cgroup.events"] = "populated 1\nfrozen 1\n"
	g, err := f.h.Create("sb1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// A real process of ours stands in for the group's member: Kill must
	// SIGKILL it. The fake kernel drops it from cgroup.procs once it died.
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		os.WriteFile(filepath.Join(f.root, "warren/sb1/cgroup.procs"), nil, 0o644)
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	<-exited
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("process ended with %v, want SIGKILL", cmd.ProcessState)
	}
	if got := f.get(t, "warren/sb1/cgroup.freeze"); got != "0" {
		t.Errorf("cgroup.freeze after Kill = %q, want 0 (thawed)", got)
	}
}

func TestV2Destroy(t *testing.T) {
	f := newFakeV2(t)
	g, err := f.h.Create("sb1", Limits{Pids: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "warren", "sb1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group still there after Destroy (%v)", err)
	}
	if err := g.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

// TestV2LimitAll: the warren/ parent gets the memory and pids limits that
// hold every sandbox of the host together (issue 13, item 4: it had none),
// swap off with them, and no CPU limit.
func TestV2LimitAll(t *testing.T) {
	f := newFakeV2(t)
	if err := f.h.LimitAll(Limits{CPUs: 2, MemoryBytes: 20 << 30, Pids: 30720}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"memory.max": fmt.Sprint(20 << 30), "memory.swap.max": "0", "pids.max": "30720", "cpu.max": "max 100000",
	} {
		if got := f.get(t, filepath.Join(parentDir, file)); got != want {
			t.Errorf("warren/%s = %q, want %q", file, got, want)
		}
	}
	if err := f.h.LimitAll(Limits{Pids: -1}); err == nil {
		t.Error("negative pids accepted")
	}
}
