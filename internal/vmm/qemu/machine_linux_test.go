//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warren/internal/cgroup"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
	"warren/internal/wait"
)

// These tests run a real qemu-system-x86_64 under TCG without a kernel: the
// guest is SeaBIOS looking for something to boot, which is enough to
// exercise start, pause, resume, memory save and restore, crashes and the
// jail. Each start takes about 100 ms.

var testSeq atomic.Int64

type env struct {
	v  *VMM
	cg *cgroup.Hierarchy
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: jails, cgroups")
	}
	if _, err := os.Stat(DefaultBinary); err != nil {
		t.Skipf("needs %s: %v", DefaultBinary, err)
	}
	h, err := cgroup.Detect(nil)
	if err != nil {
		t.Skipf("needs cgroups: %v", err)
	}
	mp := t.TempDir()
	os.Chmod(mp, 0o755)
	v, err := New(Options{Cgroups: h, JailMountpoint: mp})
	if err != nil {
		t.Fatal(err)
	}
	return &env{v: v, cg: h}
}

// config returns a valid TCG machine config with a fresh 64 MiB disk.
func config(t *testing.T, memMiB int) vmm.Config {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	return freshPaths(t, vmm.Config{
		Disk: disk, MemoryMiB: memMiB, VCPUs: 1, Accel: accel.TCG, RNG: true,
	})
}

// freshPaths gives cfg a new ID, work dir, agent socket and console log.
func freshPaths(t *testing.T, cfg vmm.Config) vmm.Config {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.ID = fmt.Sprintf("vmmtest-%d-%d", os.Getpid(), testSeq.Add(1))
	cfg.WorkDir = work
	cfg.AgentSocket = filepath.Join(dir, "agent.sock")
	cfg.ConsoleLog = filepath.Join(dir, "console.log")
	return cfg
}

func (e *env) start(t *testing.T, cfg vmm.Config, opts vmm.StartOptions) *Machine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := e.v.Start(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		m.Kill(ctx)
	})
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantState(t *testing.T, m vmm.Machine, want vmm.State) vmm.Status {
	t.Helper()
	st, err := m.Status(ctxT(t))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != want {
		t.Fatalf("Status = %+v, want %s", st, want)
	}
	return st
}

// released checks that nothing of an ended machine is left.
func (e *env) released(t *testing.T, m *Machine) {
	t.Helper()
	if _, err := e.cg.Open(m.cfg.ID); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("cgroup %s still there: %v", m.cfg.ID, err)
	}
	for _, p := range []string{m.cfg.AgentSocket, m.qmpSock} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s still there", p)
		}
	}
	if !processGone(m.pid) {
		t.Errorf("qemu pid %d still runs", m.pid)
	}
	e.v.uidMu.Lock()
	_, held := e.v.uids[m.uid]
	e.v.uidMu.Unlock()
	if held {
		t.Errorf("uid %d still held", m.uid)
	}
}

// TestLifecycle: start paused → paused → resume → running → pause → paused
// → save memory → resume (the source goes on) → kill; then start from the
// saved memory → running → stop.
// processGone reports whether pid has exited: reaped, or a zombie (an
// attached QEMU's parent is init, which reaps it when it gets to it; some
// container inits never do).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}

func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	m := e.start(t, cfg, vmm.StartOptions{Paused: true})
	if st := wantState(t, m, vmm.StatePaused); st.Detail != "prelaunch" {
		t.Errorf("paused start detail = %q, want prelaunch", st.Detail)
	}
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, m, vmm.StateRunning)
	if err := m.Resume(ctxT(t)); err != nil {
		t.Errorf("Resume of a running machine: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // let SeaBIOS touch some memory
	if err := m.Pause(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, m, vmm.StatePaused)
	if err := m.Pause(ctxT(t)); err != nil {
		t.Errorf("Pause of a paused machine: %v", err)
	}

	snap := filepath.Join(t.TempDir(), "mem.snap")
	start := time.Now()
	if err := m.SaveMemory(ctxT(t), snap, true); err != nil {
		t.Fatalf("SaveMemory: %v", err)
	}
	fi, err := os.Stat(snap)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("snapshot: %v, size %d", err, fi.Size())
	}
	t.Logf("saved 128 MiB machine in %v: %d bytes", time.Since(start), fi.Size())
	if st := wantState(t, m, vmm.StatePaused); st.Detail != "postmigrate" {
		t.Errorf("after save detail = %q, want postmigrate", st.Detail)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(snap), ".mem.snap.partial-*")); len(left) > 0 {
		t.Errorf("partial files left: %v", left)
	}
	// The saved machine can go on (its disk is reactivated).
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatalf("Resume after save: %v", err)
	}
	wantState(t, m, vmm.StateRunning)

	if err := m.Kill(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exit, err := m.Wait(ctxT(t))
	if err != nil || !exit.Requested || exit.Signal != syscall.SIGKILL {
		t.Errorf("Wait after Kill = %+v, %v; want a requested SIGKILL, no error", exit, err)
	}
	if _, err := m.Status(ctxT(t)); !errors.Is(err, vmm.ErrExited) || errors.Is(err, vmm.ErrCrashed) {
		t.Errorf("Status after Kill = %v, want ErrExited, not ErrCrashed", err)
	}
	if err := m.Kill(ctxT(t)); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := m.Stop(ctxT(t), time.Second); err != nil {
		t.Errorf("Stop after Kill: %v", err)
	}
	e.released(t, m)

	// Same machine, same disk, new paths.
	cfg2 := freshPaths(t, cfg)
	start = time.Now()
	r := e.start(t, cfg2, vmm.StartOptions{RestoreFrom: snap})
	t.Logf("restored in %v", time.Since(start))
	wantState(t, r, vmm.StateRunning)
	if err := r.Stop(ctxT(t), 200*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	exit, err = r.Wait(ctxT(t))
	// SeaBIOS ignores ACPI powerdown: Stop quits after the grace.
	if err != nil || !exit.Requested || exit.Code != 0 || exit.Reason != "host-qmp-quit" {
		t.Errorf("Wait after Stop = %+v, %v; want a requested exit 0 (host-qmp-quit)", exit, err)
	}
	e.released(t, r)
}

// TestMemorySnapshotTimes measures save and restore against memory size.
func TestMemorySnapshotTimes(t *testing.T) {
	e := newEnv(t)
	for _, mem := range []int{128, 512} {
		t.Run(fmt.Sprintf("%dMiB", mem), func(t *testing.T) {
			cfg := config(t, mem)
			m := e.start(t, cfg, vmm.StartOptions{})
			time.Sleep(100 * time.Millisecond) // the guest runs a little before its memory is saved
			snap := filepath.Join(t.TempDir(), "mem.snap")
			start := time.Now()
			if err := m.SaveMemory(ctxT(t), snap, true); err != nil {
				t.Fatal(err)
			}
			save := time.Since(start)
			fi, _ := os.Stat(snap)
			var charged int64
			if g, err := e.cg.Open(cfg.ID); err == nil {
				if st, err := g.Stats(); err == nil {
					charged = st.MemoryBytes >> 20
				}
			}
			m.Kill(ctxT(t))

			start = time.Now()
			r := e.start(t, freshPaths(t, cfg), vmm.StartOptions{RestoreFrom: snap, Paused: true})
			restore := time.Since(start)
			wantState(t, r, vmm.StatePaused)
			r.Kill(ctxT(t))
			t.Logf("memory %d MiB: save %v, file %d KiB, charged after save %d MiB, restore (start included) %v", mem,
				save.Round(time.Millisecond), fi.Size()>>10, charged, restore.Round(time.Millisecond))
		})
	}
}

// TestEvents: QMP events reach subscribers, in order.
func TestEvents(t *testing.T) {
	e := newEnv(t)
	m := e.start(t, config(t, 128), vmm.StartOptions{Paused: true})
	events, unsub := m.Events(256)
	defer unsub()
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveMemory(ctxT(t), filepath.Join(t.TempDir(), "snap"), true); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-events:
			if !ok {
				done = true
				break
			}
			switch ev.Name {
			case "MIGRATION":
				got = append(got, ev.Name+":"+strings.Trim(strings.TrimPrefix(string(ev.Data), `{"status": `), `"}`))
			case "RESUME", "STOP", "SHUTDOWN":
				got = append(got, ev.Name)
			}
		case <-timeout:
			t.Fatalf("events so far %v; channel not closed", got)
		}
	}
	want := []string{"RESUME", "STOP", "MIGRATION:setup", "MIGRATION:active", "MIGRATION:completed", "SHUTDOWN"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// TestCrash: a QEMU killed behind the machine's back is a crash for Wait,
// and every query fails at once instead of hanging.
func TestCrash(t *testing.T) {
	e := newEnv(t)
	m := e.start(t, config(t, 128), vmm.StartOptions{})
	if err := syscall.Kill(m.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := m.Wait(ctxT(t))
	var xe *vmm.ExitError
	if !errors.Is(err, vmm.ErrCrashed) || !errors.As(err, &xe) {
		t.Fatalf("Wait = %+v, %v; want an ExitError (ErrCrashed)", exit, err)
	}
	if exit.Requested || exit.Signal != syscall.SIGKILL || xe.Exit.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want an unrequested SIGKILL", exit)
	}
	t.Logf("crash: %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := m.Status(ctx); !errors.Is(err, vmm.ErrExited) || !errors.Is(err, vmm.ErrCrashed) {
		t.Errorf("Status after crash = %v, want ErrExited and ErrCrashed", err)
	}
	for name, op := range map[string]func(context.Context) error{
		"Pause": m.Pause, "Resume": m.Resume,
		"SaveMemory": func(ctx context.Context) error { return m.SaveMemory(ctx, filepath.Join(t.TempDir(), "x"), true) },
	} {
		if err := op(ctx); !errors.Is(err, vmm.ErrExited) {
			t.Errorf("%s after crash = %v, want ErrExited", name, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("queries of a crashed machine took %v", d)
	}
	e.released(t, m)
}

// TestCrashDuringStart: a QEMU that dies while starting (here: a memory
// snapshot that is not one) fails Start with its last words, and leaves
// nothing behind.
func TestCrashDuringStart(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	bad := filepath.Join(t.TempDir(), "garbage.snap")
	os.WriteFile(bad, []byte("this is not a migration stream\n"), 0o600)
	m, err := e.v.Start(ctxT(t), cfg, vmm.StartOptions{RestoreFrom: bad})
	if err == nil {
		m.Kill(ctxT(t))
		t.Fatal("Start from a garbage snapshot succeeded")
	}
	var xe *vmm.ExitError
	if !errors.Is(err, vmm.ErrCrashed) || !errors.As(err, &xe) || !strings.Contains(xe.Stderr, "qemu-system-x86_64:") {
		t.Fatalf("Start = %v; want an ExitError carrying QEMU's stderr", err)
	}
	t.Logf("start error: %v", err)
	if _, err := e.cg.Open(cfg.ID); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("cgroup left: %v", err)
	}
	for _, p := range []string{cfg.AgentSocket, filepath.Join(cfg.WorkDir, "qmp.sock")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	e.v.uidMu.Lock()
	n := len(e.v.uids)
	e.v.uidMu.Unlock()
	if n != 0 {
		t.Errorf("%d uids still held", n)
	}
}

// TestJail: QEMU runs in its own namespaces, cgroup (with the limits) and
// root, as its own unprivileged uid, with no_new_privs and seccomp.
func TestJail(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	m := e.start(t, cfg, vmm.StartOptions{})
	pid := m.PID()

	for _, ns := range []string{"mnt", "pid", "net", "uts", "ipc"} {
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || theirs == ours {
			t.Errorf("%s namespace: qemu %s (%v), test %s; want different", ns, theirs, err, ours)
		}
	}

	if m.UID() == 0 || m.UID() < DefaultUIDBase {
		t.Errorf("machine uid %d, want one of the range from %d", m.UID(), DefaultUIDBase)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	u := m.UID()
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", u, u, u, u),
		fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d", u, u, u, u),
		"NoNewPrivs:\t1",
		"Seccomp:\t2",
		"CapEff:\t0000000000000000",
	} {
		if !strings.Contains(string(status), want) {
			t.Errorf("qemu status lacks %q", want)
		}
	}

	// Its root shows /usr and a few files, not the disk's directory.
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range entries {
		names = append(names, de.Name())
	}
	t.Logf("qemu's root: %v", names)
	for _, n := range names {
		if !slices.Contains([]string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev"}, n) {
			t.Errorf("unexpected %q in qemu's root", n)
		}
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, filepath.Dir(cfg.Disk))); err == nil {
		t.Errorf("the disk's directory is visible in qemu's root")
	}

	g, err := e.cg.Open(cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := g.Procs()
	if err != nil || !slices.Contains(procs, pid) {
		t.Errorf("cgroup %s procs = %v (%v), want qemu %d", cfg.ID, procs, err, pid)
	}
	want := limits(&cfg)
	got := readLimits(t, pid)
	t.Logf("cgroup limits: %+v", got)
	if got.MemoryBytes != want.MemoryBytes || got.Pids != want.Pids || got.CPUs != want.CPUs {
		t.Errorf("cgroup limits = %+v, want %+v", got, want)
	}
	time.Sleep(200 * time.Millisecond) // QEMU runs a little before its figures are logged (not checked)
	if st, err := g.Stats(); err == nil {
		t.Logf("qemu (128 MiB guest, SeaBIOS): memory %d MiB charged, %d tasks", st.MemoryBytes>>20, st.Pids)
	}
}

// readLimits reads the limits of pid's cgroups from the files the kernel
// uses, v1 or v2, through /proc/PID/cgroup.
func readLimits(t *testing.T, pid int) cgroup.Limits {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{} // controller -> path; "" for v2
	for line := range strings.Lines(strings.TrimSpace(string(data))) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	read := func(parts ...string) string {
		b, err := os.ReadFile(filepath.Join(parts...))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		return n
	}
	var l cgroup.Limits
	if p, ok := paths["memory"]; ok { // v1
		if !strings.HasPrefix(p, "/warren/") {
			t.Errorf("memory cgroup %s, want under /warren/", p)
		}
		l.MemoryBytes = num(read("/sys/fs/cgroup/memory", p, "memory.limit_in_bytes"))
		l.Pids = num(read("/sys/fs/cgroup/pids", paths["pids"], "pids.max"))
		l.CPUs = float64(num(read("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_quota_us"))) /
			float64(num(read("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_period_us")))
		return l
	}
	p := paths[""]
	l.MemoryBytes = num(read("/sys/fs/cgroup", p, "memory.max"))
	l.Pids = num(read("/sys/fs/cgroup", p, "pids.max"))
	var quota, period int64
	fmt.Sscan(read("/sys/fs/cgroup", p, "cpu.max"), &quota, &period)
	l.CPUs = float64(quota) / float64(period)
	return l
}

// TestBadConfig: bad configs are refused before anything starts.
func TestBadConfig(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		edit func(*vmm.Config, *vmm.StartOptions)
	}{
		{"missing disk", func(c *vmm.Config, _ *vmm.StartOptions) { c.Disk += ".missing" }},
		{"disk is a directory", func(c *vmm.Config, _ *vmm.StartOptions) { c.Disk = filepath.Dir(c.Disk) }},
		{"zero memory", func(c *vmm.Config, _ *vmm.StartOptions) { c.MemoryMiB = 0 }},
		{"zero vcpus", func(c *vmm.Config, _ *vmm.StartOptions) { c.VCPUs = 0 }},
		{"unknown accel", func(c *vmm.Config, _ *vmm.StartOptions) { c.Accel = "hvf" }},
		{"bad id", func(c *vmm.Config, _ *vmm.StartOptions) { c.ID = "../x" }},
		{"cmdline without kernel", func(c *vmm.Config, _ *vmm.StartOptions) { c.Cmdline = "console=ttyS0" }},
		{"missing kernel", func(c *vmm.Config, _ *vmm.StartOptions) { c.Kernel = "/nonexistent/vmlinuz" }},
		{"missing work dir", func(c *vmm.Config, _ *vmm.StartOptions) { c.WorkDir += "/missing" }},
		{"agent socket exists", func(c *vmm.Config, _ *vmm.StartOptions) { os.WriteFile(c.AgentSocket, nil, 0o600) }},
		{"agent socket too long", func(c *vmm.Config, _ *vmm.StartOptions) {
			c.AgentSocket = filepath.Join(filepath.Dir(c.AgentSocket), strings.Repeat("a", 110))
		}},
		{"restore from missing file", func(_ *vmm.Config, o *vmm.StartOptions) { o.RestoreFrom = "/nonexistent.snap" }},
		{"restore from empty file", func(c *vmm.Config, o *vmm.StartOptions) {
			o.RestoreFrom = filepath.Join(c.WorkDir, "..", "empty.snap")
			os.WriteFile(o.RestoreFrom, nil, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, 128)
			var opts vmm.StartOptions
			tc.edit(&cfg, &opts)
			_, sockErr := os.Lstat(cfg.AgentSocket)
			m, err := e.v.Start(ctxT(t), cfg, opts)
			if err == nil {
				m.Kill(ctxT(t))
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, vmm.ErrInvalidConfig) {
				t.Errorf("Start = %v, want ErrInvalidConfig", err)
			}
			t.Logf("%v", err)
			if cfg.ID != "../x" {
				if _, err := e.cg.Open(cfg.ID); !errors.Is(err, cgroup.ErrNotFound) {
					t.Errorf("cgroup made: %v", err)
				}
			}
			if _, err := os.Lstat(cfg.AgentSocket); sockErr != nil && err == nil {
				t.Errorf("agent socket made")
			}
			if _, err := os.Lstat(filepath.Join(cfg.WorkDir, "qmp.sock")); err == nil {
				t.Errorf("qmp socket made")
			}
		})
	}
}

// TestAgentSocket: the agent's socket accepts a connection (QEMU listens on
// it) and the port is there for a guest to open.
func TestAgentSocket(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	m := e.start(t, cfg, vmm.StartOptions{})
	fi, err := os.Lstat(cfg.AgentSocket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("agent socket: %v, mode %v", err, fi.Mode())
	}
	conn, err := net.Dial("unix", cfg.AgentSocket)
	if err != nil {
		t.Fatalf("dial agent socket: %v", err)
	}
	defer conn.Close()
	var chardevs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	if err := m.qmp.Execute(ctxT(t), "query-chardev", nil, &chardevs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range chardevs {
		if c.Label == "agent" {
			found = true
			t.Logf("agent chardev: %s", c.Filename)
		}
	}
	if !found {
		t.Errorf("no agent chardev in %+v", chardevs)
	}
}

// TestHungVMM: a VMM that stops answering (here: SIGSTOPped) makes calls
// fail with their ctx instead of hanging, and Kill still ends it.
func TestHungVMM(t *testing.T) {
	e := newEnv(t)
	m := e.start(t, config(t, 128), vmm.StartOptions{})
	if err := syscall.Kill(m.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := m.Status(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Status of a stopped VMM = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Status took %v", d)
	}
	if err := m.Kill(ctxT(t)); err != nil {
		t.Fatalf("Kill of a stopped VMM: %v", err)
	}
	if exit, err := m.Wait(ctxT(t)); err != nil || !exit.Requested {
		t.Errorf("Wait = %+v, %v", exit, err)
	}
	e.released(t, m)
}

// TestMicrovmCommandLine: the KVM command line (microvm, virtio-mmio
// devices) cannot run here (no usable KVM), but QEMU must accept it: run it
// under TCG, vCPUs stopped, outside any jail, and check QEMU stays up.
func TestMicrovmCommandLine(t *testing.T) {
	if _, err := os.Stat(DefaultBinary); err != nil {
		t.Skipf("needs %s: %v", DefaultBinary, err)
	}
	cfg := config(t, 128)
	cfg.Accel = accel.KVM
	args := commandLine(&cfg, testLayout)
	i := slices.Index(args, "-accel")
	if i < 0 || args[i+1] != "kvm" || args[i+2] != "-cpu" {
		t.Fatalf("unexpected KVM command line %q", args)
	}
	args = slices.Replace(args, i, i+4, "-accel", "tcg")
	if !slices.Contains(args, "microvm,dump-guest-core=off,mem-merge=off") {
		t.Fatalf("not a microvm command line: %q", args)
	}
	qmpLn, err := listen(filepath.Join(cfg.WorkDir, "qmp.sock"))
	if err != nil {
		t.Fatal(err)
	}
	agentLn, err := listen(cfg.AgentSocket)
	if err != nil {
		t.Fatal(err)
	}
	rw, ro, _, err := openDisk(cfg.Disk)
	if err != nil {
		t.Fatal(err)
	}
	console, err := os.OpenFile(cfg.ConsoleLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600) // write-only, as QEMU asks
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(DefaultBinary, args...)
	cmd.ExtraFiles = []*os.File{qmpLn, agentLn, rw, ro, console} // fds 3-7, as testLayout
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("qemu refused the microvm command line: %v: %s", err, stderr.String())
	case <-time.After(time.Second):
	}
	cmd.Process.Kill()
	<-exited
}

// TestConsoleLog: the serial console goes to the log, appended after what
// the file held (QEMU's file chardev would truncate or overwrite it).
func TestConsoleLog(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	const before = "previous boot\n"
	if err := os.WriteFile(cfg.ConsoleLog, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	m := e.start(t, cfg, vmm.StartOptions{})
	defer m.Kill(ctxT(t))
	var got []byte
	wait.For(t, 10*time.Second, "the guest's output in the console log", func() bool {
		got, _ = os.ReadFile(cfg.ConsoleLog)
		return len(got) > len(before)
	})
	t.Logf("console: %q", got)
	if !strings.HasPrefix(string(got), before) {
		t.Errorf("console log = %q, want %q followed by the guest's output", got, before)
	}
}

// TestWorkspaceDisk: a workspace disk is a second drive, writable, after
// the root; a machine with one saves and restores its memory.
func TestWorkspaceDisk(t *testing.T) {
	e := newEnv(t)
	cfg := config(t, 128)
	cfg.Workspace = filepath.Join(filepath.Dir(cfg.Disk), "ws.img")
	if err := os.WriteFile(cfg.Workspace, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cfg.Workspace, 16<<20); err != nil {
		t.Fatal(err)
	}
	m := e.start(t, cfg, vmm.StartOptions{})
	var blocks []struct {
		Device   string `json:"device"`
		Inserted *struct {
			RO bool `json:"ro"`
		} `json:"inserted"`
	}
	if err := m.qmp.Execute(ctxT(t), "query-block", nil, &blocks); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		if b.Inserted == nil || b.Inserted.RO {
			t.Errorf("drive %s: %+v, want a writable image", b.Device, b.Inserted)
		}
		got = append(got, b.Device)
	}
	if !slices.Equal(got, []string{"root", "workspace"}) {
		t.Errorf("drives %q, want root then workspace", got)
	}
	snap := filepath.Join(t.TempDir(), "mem.snap")
	if err := m.SaveMemory(ctxT(t), snap, true); err != nil {
		t.Fatal(err)
	}
	m.Kill(ctxT(t))
	r := e.start(t, freshPaths(t, cfg), vmm.StartOptions{RestoreFrom: snap})
	wantState(t, r, vmm.StateRunning)
}

// TestMachineUIDsUniqueAcrossServers: two VMMs (two warren servers on one
// host) never give their machines the same uid.
func TestMachineUIDsUniqueAcrossServers(t *testing.T) {
	a, b := newEnv(t), newEnv(t)
	ua, ca, err := a.v.allocUID()
	if err != nil {
		t.Fatal(err)
	}
	defer a.v.freeUID(ua)
	ub, _, err := b.v.allocUID()
	if err != nil {
		t.Fatal(err)
	}
	defer b.v.freeUID(ub)
	if ua == ub {
		t.Fatalf("two VMMs handed out uid %d", ua)
	}
	if ca == nil {
		t.Error("no claim for an allocated uid")
	}
}
