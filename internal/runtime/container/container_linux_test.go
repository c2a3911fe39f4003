//go:build linux

package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/cgroup"
	"warren/internal/disk"
	"warren/internal/runtime"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/runtimetest"
	"warren/internal/wait"
)

// agentPath is the guest agent built once for this test binary.
var agentPath string

func TestMain(m *testing.M) { os.Exit(runtimetest.Main(m, &agentPath)) }

type fixture struct {
	rt   *Runtime
	cg   *cgroup.Hierarchy
	spec runtime.Spec
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the container runtime needs root")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cg, err := cgroup.Detect(log)
	if err != nil {
		t.Skipf("no usable cgroups: %v", err)
	}
	rt, err := New(log, cg, agentPath, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("ctest-%d-%d", os.Getpid(), n)
	dir := filepath.Join(t.TempDir(), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &fixture{rt: rt, cg: cg, spec: runtime.Spec{
		ID: id, Disk: runtimetest.MiniImage(t), Hostname: "box-" + id, Dir: dir,
		Limits: runtime.Limits{CPUs: 1, MemoryBytes: 256 << 20, Pids: 64},
	}}
}

func (f *fixture) start(t *testing.T) (runtime.Instance, *agentconn.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := f.rt.Start(ctx, f.spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	conn := agentconn.DialUnix(inst.AgentSocket())
	t.Cleanup(conn.Close)
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("agent not ready: %v (console: %s)", err, f.console())
	}
	return inst, conn
}

func (f *fixture) console() string {
	b, _ := os.ReadFile(filepath.Join(f.spec.Dir, "console.log"))
	return string(b)
}

// run executes argv in the sandbox and returns stdout; it fails the test on a
// non-zero exit.
func run(t *testing.T, conn *agentconn.Conn, argv ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	end, _, err := conn.Run(context.Background(), &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: argv[0], Args: argv[1:]},
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	if end.GetExitCode() != 0 {
		t.Fatalf("%v: exit %d: %s", argv, end.GetExitCode(), stderr.String())
	}
	return stdout.String()
}

func TestContainerIsolation(t *testing.T) {
	f := newFixture(t, 901)
	inst, conn := f.start(t)

	info, err := conn.Control.Info(context.Background(), connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if info.Msg.GetPid() != 1 {
		t.Errorf("agent pid = %d, want 1", info.Msg.GetPid())
	}
	if got := strings.TrimSpace(run(t, conn, "hostname")); got != f.spec.Hostname {
		t.Errorf("hostname = %q, want %q", got, f.spec.Hostname)
	}
	if got := strings.TrimSpace(run(t, conn, "id", "-u")); got != "0" {
		t.Errorf("uid in sandbox = %q, want 0", got)
	}
	hostUID := uidBase + stateOf(t, inst).Slot*uidsPerSandbox
	if got, want := strings.Fields(run(t, conn, "cat", "/proc/self/uid_map")), []string{"0", fmt.Sprint(hostUID), "65536"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("uid_map = %v, want %v", got, want)
	}
	// Root-owned files of the image are the sandbox root's own (idmapped mount).
	if got := strings.TrimSpace(run(t, conn, "stat", "-c", "%u:%g", "/etc/passwd")); got != "0:0" {
		t.Errorf("owner of /etc/passwd = %s, want 0:0", got)
	}
	run(t, conn, "sh", "-c", "echo hello > /root/new && test -w /etc/passwd")

	status := run(t, conn, "cat", "/proc/self/status")
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", fmt.Sprintf("CapBnd:\t%016x", keptMask()), "CapAmb:\t0000000000000000"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	// The agent itself went through the same lock-down on every thread (it
	// sets up the sandbox and then serves, without an exec in between).
	threads := run(t, conn, "sh", "-c", "for d in /proc/1/task/*; do cat $d/status $d/cgroup; echo ==; done")
	blocks := strings.Split(strings.TrimSuffix(threads, "==\n"), "==\n")
	if len(blocks) < 2 {
		t.Fatalf("agent threads: %q", threads)
	}
	for i, b := range blocks {
		for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", fmt.Sprintf("CapEff:\t%016x", keptMask()), fmt.Sprintf("CapBnd:\t%016x", keptMask()), "CapAmb:\t0000000000000000"} {
			if !strings.Contains(b, want) {
				t.Errorf("agent thread %d lacks %q", i, want)
			}
		}
		if strings.Contains(b, "/warren") {
			t.Errorf("agent thread %d sees a host cgroup path:\n%s", i, b)
		}
	}
	// Only the sandbox's own processes are visible.
	procs := 0
	for _, name := range strings.Fields(run(t, conn, "ls", "/proc")) {
		if name[0] >= '0' && name[0] <= '9' {
			procs++
		}
	}
	if procs > 3 {
		t.Errorf("sandbox sees %d processes, want at most 3 (agent, ls, maybe a reaped child)", procs)
	}
	if dev := run(t, conn, "cat", "/proc/net/dev"); strings.Count(dev, ":") != 1 || !strings.Contains(dev, "lo:") {
		t.Errorf("interfaces in sandbox:\n%s\nwant only lo", dev)
	}
	if mi := run(t, conn, "cat", "/proc/self/mountinfo"); strings.Contains(mi, f.spec.Dir) || strings.Contains(mi, "/work") {
		t.Errorf("host paths visible in the sandbox's mounts:\n%s", mi)
	}
	if cg := run(t, conn, "cat", "/proc/self/cgroup"); strings.Contains(cg, "warren") {
		t.Errorf("sandbox sees host cgroup paths (no cgroup namespace):\n%s", cg)
	}

	// The host's view: the init is an unprivileged host uid in the sandbox's cgroup.
	pid := stateOf(t, inst).PID
	hostStatus, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hostStatus), fmt.Sprintf("Uid:\t%d\t%d", hostUID, hostUID)) {
		t.Errorf("sandbox init does not run as host uid %d:\n%s", hostUID, hostStatus)
	}
	g, err := f.cg.Open(f.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ps, _ := g.Procs(); !contains(ps, pid) {
		t.Errorf("init %d not in cgroup (procs %v)", pid, ps)
	}
}

func keptMask() uint64 {
	var m uint64
	for _, c := range containerinit.KeptCapabilities() {
		m |= 1 << c
	}
	return m
}

func stateOf(t *testing.T, inst runtime.Instance) state {
	t.Helper()
	return inst.(*instance).st
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestContainerStopLeavesNothing(t *testing.T) {
	f := newFixture(t, 902)
	inst, conn := f.start(t)
	run(t, conn, "sh", "-c", "sleep 1000 & sleep 1000 & echo started")
	pid := stateOf(t, inst).PID
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-inst.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("init %d still alive", pid)
	}
	if _, err := f.cg.Open(f.spec.ID); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("cgroup still there after stop: %v", err)
	}
	if _, err := os.Stat(f.spec.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir still there: %v", err)
	}
	// The loop device detaches itself once the mount namespace is gone.
	wait.For(t, 10*time.Second, "the disk's loop device to detach", func() bool {
		loops, err := disk.StaleLoops(filepath.Dir(f.spec.Disk))
		return err == nil && len(loops) == 0
	})
}

func TestContainerAdoptAfterRestart(t *testing.T) {
	f := newFixture(t, 903)
	inst, conn := f.start(t)
	run(t, conn, "sh", "-c", "echo kept > /root/state")
	raw := inst.State()

	// A new Runtime is what a restarted daemon has.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt2, err := New(log, f.cg, agentPath, Options{})
	if err != nil {
		t.Fatal(err)
	}
	inst2, err := rt2.Adopt(context.Background(), f.spec, raw)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	conn2 := agentconn.DialUnix(inst2.AgentSocket())
	defer conn2.Close()
	if got := run(t, conn2, "cat", "/root/state"); got != "kept\n" {
		t.Errorf("state after adopt = %q", got)
	}
	if err := inst2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-inst2.Done()
	if _, err := rt2.Adopt(context.Background(), f.spec, raw); !errors.Is(err, runtime.ErrGone) {
		t.Errorf("adopt of a stopped sandbox: err = %v, want ErrGone", err)
	}
}

func TestContainerLimits(t *testing.T) {
	f := newFixture(t, 904)
	f.spec.Limits.Pids = 20
	_, conn := f.start(t)
	// A fork bomb in miniature: more sleeps than pids.max allows.
	var stdout, stderr bytes.Buffer
	end, _, err := conn.Run(context.Background(), &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "sh", Args: []string{"-c", "i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done; wait"},
		TimeoutMs: 20000,
	}}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "fork") && !strings.Contains(stderr.String(), "Resource temporarily unavailable") {
		t.Errorf("forking past pids.max did not fail: exit %d, stderr %q", end.GetExitCode(), stderr.String())
	}
	// The agent is still there and works.
	if got := strings.TrimSpace(run(t, conn, "id", "-u")); got != "0" {
		t.Errorf("after the fork storm: id -u = %q", got)
	}
}

// Sweep removes the cgroup (and processes) of a sandbox this node knows but
// does not keep, and leaves alone one it does not know: another server's
// (a regression test: every server used to sweep every warren cgroup).
func TestSweepRemovesOrphanCgroups(t *testing.T) {
	f := newFixture(t, 905)
	orphan := f.spec.ID + "-orphan"
	g, err := f.cg.Create(orphan, cgroup.Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	foreign := f.spec.ID + "-foreign"
	fg, err := f.cg.Create(foreign, cgroup.Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer fg.Destroy(context.Background())
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{orphan: true, f.spec.ID: true}
	if err := f.rt.Sweep(context.Background(), known, map[string]bool{f.spec.ID: true}); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if _, err := f.cg.Open(foreign); err != nil {
		t.Errorf("sweep removed a cgroup it does not know: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process in orphan cgroup survived the sweep")
	}
	if _, err := f.cg.Open(orphan); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("orphan cgroup still there: %v", err)
	}
}

// TestSweepRemovesLeftoverInitCgroups: the cgroup of an init that is not
// the runtime's goes when an earlier daemon of the same data directory
// left it (even while its init, on its way out, still holds its slot) or
// when nobody holds its slot; another server's, whose slot is held, stays.
func TestSweepRemovesLeftoverInitCgroups(t *testing.T) {
	f := newFixture(t, 907)
	earlier := &Runtime{initTag: "earlier"}
	var held, free []int
	for range 2 {
		slot, claim, err := f.rt.allocSlot()
		if err != nil {
			t.Fatal(err)
		}
		defer claim.Close()
		held = append(held, slot)
	}
	slot, _, err := f.rt.allocSlot()
	if err != nil {
		t.Fatal(err)
	}
	f.rt.freeSlot(slot)
	free = append(free, slot)
	// The fixture's runtime holds the claims of held, as the other server
	// (or the earlier daemon's dying init) would; its slots map forgets them.
	f.rt.slotsMu.Lock()
	for _, s := range held {
		delete(f.rt.slots, s)
	}
	f.rt.slotsMu.Unlock()
	gone := []string{f.rt.initCgroupName(held[0]), earlier.initCgroupName(free[0])}
	kept := earlier.initCgroupName(held[1])
	for _, name := range append(gone, kept) {
		g, err := f.cg.Create(name, cgroup.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Destroy(context.Background())
	}
	if err := f.rt.Sweep(context.Background(), nil, nil); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, name := range gone {
		if _, err := f.cg.Open(name); !errors.Is(err, cgroup.ErrNotFound) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
	if _, err := f.cg.Open(kept); err != nil {
		t.Errorf("%s, another server's with its slot held, was removed: %v", kept, err)
	}
}

// Warm inits are spawned ahead of time and handed out by Start; every
// sandbox, warm or cold, gets a uid range of its own, and Close kills the
// inits still waiting.
func TestWarmInits(t *testing.T) {
	f := newFixture(t, 906)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := New(log, f.cg, agentPath, Options{Warm: 2, WarmDir: filepath.Join(t.TempDir(), "warm")})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	f.rt = rt
	rt.StartWarm()
	warmCount := func() int { return len(rt.pool.Ready()) }
	wait.For(t, 20*time.Second, "two warm inits", func() bool { return warmCount() == 2 })

	slots := map[int]bool{}
	var pids []int
	for i := range 3 { // the third may find the pool empty and start cold
		spec := f.spec
		spec.ID = fmt.Sprintf("%s-%d", f.spec.ID, i)
		spec.Dir = filepath.Join(t.TempDir(), spec.ID)
		os.Mkdir(spec.Dir, 0o700)
		f.spec = spec
		inst, conn := f.start(t)
		if got := strings.TrimSpace(run(t, conn, "hostname")); got != spec.Hostname {
			t.Errorf("sandbox %d: hostname %q, want %q", i, got, spec.Hostname)
		}
		st := stateOf(t, inst)
		if slots[st.Slot] {
			t.Errorf("sandbox %d shares uid slot %d", i, st.Slot)
		}
		slots[st.Slot] = true
		pids = append(pids, st.PID)
	}
	wait.For(t, 20*time.Second, "the pool to refill", func() bool { return warmCount() == 2 })
	// A sweep leaves the waiting inits and their cgroups alone.
	if err := rt.Sweep(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	var waiting []*initProc
	for _, p := range rt.pool.Ready() {
		waiting = append(waiting, p)
		if slots[p.slot] {
			t.Errorf("warm init holds slot %d of a running sandbox", p.slot)
		}
		cgs, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
		if f.cg.Version() == 1 && (err != nil || !strings.Contains(string(cgs), ":/warren/"+rt.initCgroupName(p.slot)+"\n")) {
			t.Errorf("warm init %d is not in its own cgroup: %q (%v)", p.pid, cgs, err)
		}
	}
	rt.Close()
	for _, p := range waiting {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid)); err == nil {
			t.Errorf("warm init %d alive after Close", p.pid)
		}
		if _, err := f.cg.Open(rt.initCgroupName(p.slot)); !errors.Is(err, cgroup.ErrNotFound) {
			t.Errorf("warm init %d's cgroup outlived Close: %v", p.pid, err)
		}
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			t.Errorf("sandbox init %d died with Close: sandboxes must outlive the runtime", pid)
		}
	}
}

// TestUIDRangesUniqueAcrossServers: two runtimes (two warren servers on
// one host) never give their sandboxes the same host uids, and a range
// stays claimed by its init when the daemon that claimed it is gone, until
// a restarted daemon takes the claim back (Adopt).
func TestUIDRangesUniqueAcrossServers(t *testing.T) {
	a, b := newFixture(t, 904), newFixture(t, 905)
	instA, _ := a.start(t)
	instB, _ := b.start(t)
	slotA, slotB := stateOf(t, instA).Slot, stateOf(t, instB).Slot
	if slotA == slotB {
		t.Fatalf("two servers' sandboxes share uid range %d", slotA)
	}
	// Server a's daemon dies: its own hold of the claim goes, its init's
	// stays.
	a.rt.freeSlot(slotA)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	other, err := New(log, a.cg, agentPath, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := other.allocSlot()
	if err != nil {
		t.Fatal(err)
	}
	other.freeSlot(n)
	if n == slotA || n == slotB {
		t.Errorf("a third server took uid range %d, held by a running sandbox (%d, %d)", n, slotA, slotB)
	}
	restarted, err := New(log, a.cg, agentPath, Options{})
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := restarted.Adopt(context.Background(), a.spec, instA.State())
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	t.Cleanup(func() { adopted.Stop(context.Background()) })
	restarted.slotsMu.Lock()
	held := restarted.slots[slotA]
	restarted.slotsMu.Unlock()
	if held == nil {
		t.Error("the restarted daemon did not take the adopted sandbox's claim back")
	}
}
