//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/backoff"
	"warren/internal/mountinfo"
	"warren/internal/wait"
)

// TestConformance is the runtime conformance suite (issue 36, item 4): one
// set of checks that every runtime of the daemon runs, on sandboxes
// created with that runtime by name. A runtime the daemon does not have,
// or says is unavailable, skips whole with the daemon's reason; a runtime
// that cannot do a thing skips that check with the reason.
//
// Each runtime gets one sandbox (256 MiB, 128 pids) that carries the
// checks in order: start and the agent answering, the exec contract,
// files, the egress policy, the memory and pids limits, pause and resume,
// kill -9 of the daemon and adoption, snapshots restored across runtimes
// (to a container, and from a container), and last its delete, after
// which nothing of it may be left on the host. A check that fails leaves
// the sandbox to the next; only a failed start ends the runtime's run.
//
// The vm runtime runs a bounded subset: under TCG a boot takes seconds, so
// it boots two machines (its sandbox, and a container's snapshot restored
// into a vm), and its large file is smaller. Its pids check skips: the vm
// runtime bounds QEMU's host pids, not the guest's.
//
// Not checked: the CPU limit (a share of this 2-core host is not
// measurable within the suite's time; internal/runtime/container
// TestContainerLimits reads the quota). The in-process test runtime
// (internal/runtime/inproc) is not a runtime of the daemon, has no disk,
// network or limits, and runs without root: its unit-level subset (start,
// agent, adoption, pause, teardown) is inproc's TestConformance.
func TestConformance(t *testing.T) {
	need(t)
	s := &conformance{top: t}
	for _, name := range []string{"container", "gvisor", "vm"} {
		t.Run(name, func(t *testing.T) { s.run(t, name) })
	}
}

// conformance is one run of the suite: what its runtimes share.
type conformance struct {
	top *testing.T // TestConformance's
	mu  sync.Mutex // guards the container snapshot
	// fromContainer is a snapshot of a container sandbox with the work
	// tree (conformanceWork), made on first use and deleted when the suite
	// ends; want is what checkState printed in it.
	fromContainer, want string
}

// conformanceWork makes the work tree checkState reads; its own name
// says which runtime wrote it.
func conformanceWork(runtime string) string {
	return fmt.Sprintf(`mkdir -p /root/work && cd /root/work && echo %s > %s.txt && head -c 1000000 /dev/urandom > rand && sync && %s`,
		runtime, runtime, checkState)
}

// containerSnapshot returns the container snapshot (fromContainer), made
// the first time.
func (s *conformance) containerSnapshot(t *testing.T) (string, string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fromContainer != "" {
		return s.fromContainer, s.want
	}
	ctx := context.Background()
	cl := shared.client()
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "container"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.DeleteSandbox(ctx, sb.ID)
	want := shared.sh(t, sb.ID, conformanceWork("container"))
	sn := shared.snapshot(t, sb.ID)
	s.top.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), sn) })
	s.fromContainer, s.want = sn, want
	return sn, want
}

// runtimeInfo is the daemon's word on runtime name; it skips t when the
// daemon has no such runtime or says it is unavailable.
func runtimeInfo(t testing.TB, name string) api.RuntimeInfo {
	t.Helper()
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(info.Runtimes, func(r api.RuntimeInfo) bool { return r.Name == name })
	if i < 0 {
		var names []string
		for _, r := range info.Runtimes {
			names = append(names, r.Name)
		}
		t.Skipf("the daemon has no %s runtime (it has %s)", name, strings.Join(names, ", "))
	}
	if !info.Runtimes[i].Available {
		t.Skipf("the daemon says runtime %s is unavailable: %s", name, info.Runtimes[i].Reason)
	}
	return info.Runtimes[i]
}

// run runs every check on runtime name.
func (s *conformance) run(t *testing.T, name string) {
	rt := runtimeInfo(t, name)
	tcg := rt.Accel == "tcg"
	ctx := context.Background()
	t0 := time.Now()
	sb, err := shared.client().CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: name, MemoryMB: 256, Pids: 128}})
	if api.IsCode(err, api.CodeUnavailable) {
		t.Skipf("the daemon refuses runtime %s: %v", name, err)
	}
	if err != nil {
		t.Fatalf("create: %v\ndaemon log:\n%s", err, shared.log.tail(30))
	}
	id := sb.ID
	// Deleted by the teardown check, else here, through whichever daemon
	// serves by then.
	t.Cleanup(func() { shared.client().DeleteSandbox(context.Background(), id) })
	t.Logf("created %s in %v (isolation %q)", id, time.Since(t0).Round(time.Millisecond), sb.Isolation)
	if !t.Run("start and agent", func(t *testing.T) {
		if sb.Runtime != name || sb.Isolation != rt.Isolation || sb.State != api.StateRunning {
			t.Errorf("created sandbox: runtime %q isolation %q state %q; want %s, %q, running", sb.Runtime, sb.Isolation, sb.State, name, rt.Isolation)
		}
		res, err := shared.client().Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true: %+v, %v", res, err)
		}
		uname := strings.Fields(shared.sh(t, id, "uname -s -r"))
		if len(uname) != 2 || uname[0] != "Linux" {
			t.Errorf("uname -s -r: %q, want Linux and a release", uname)
		}
		t.Logf("uname -r in the sandbox: %s", uname[len(uname)-1])
	}) {
		return
	}
	t.Run("exec", func(t *testing.T) { execContract(t, shared, id) })
	t.Run("files", func(t *testing.T) {
		filesContract(t, shared, id)
		list, err := shared.client().ListFiles(ctx, id, "/root", 1)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(list, func(f api.FileInfo) bool { return f.Name == "blob.bin" }); i < 0 || list[i].Size != 3<<20 || list[i].Type != "file" {
			t.Errorf("list of /root: %+v, want blob.bin, a file of 3 MiB", list)
		}
		size := int64(64 << 20)
		if tcg {
			size = 16 << 20 // vm under tcg: bounded subset
		}
		if _, err := shared.client().WriteFile(ctx, id, "/root/large", io.LimitReader(zeroReader{}, size), 0o644, ""); err != nil {
			t.Fatal(err)
		}
		r, err := shared.client().ReadFile(ctx, id, "/root/large")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if n, err := io.Copy(io.Discard, r); err != nil || n != size {
			t.Errorf("read back %d bytes of /root/large (%v), want %d", n, err, size)
		}
		shared.sh(t, id, "rm /root/large")
	})
	t.Run("network policy", func(t *testing.T) {
		cl := shared.client()
		wantReached(t, probe(t, id, "allowed.test:80"), "allowed.test:80")
		if _, err := cl.SetNetwork(ctx, id, api.NetworkPolicy{Deny: []string{inetAllowed.String() + "/32"}}); err != nil {
			t.Fatal(err)
		}
		got := probe(t, id, "allowed.test:80", hostPort(inetMeta, 80), hostPort(inetPrivate, 80))
		for _, target := range []string{"allowed.test:80", hostPort(inetMeta, 80), hostPort(inetPrivate, 80)} {
			wantRefused(t, got, target)
		}
		if _, err := cl.SetNetwork(ctx, id, api.NetworkPolicy{}); err != nil {
			t.Fatal(err)
		}
		wantReached(t, probe(t, id, "allowed.test:80"), "allowed.test:80")
	})
	t.Run("memory limit", func(t *testing.T) {
		res, err := shared.client().Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", memoryHog}})
		if err != nil || res.ExitCode == 0 {
			t.Errorf("2 GiB written in a 256 MiB sandbox: %+v, %v; want the writer killed or refused", res, err)
		} else {
			t.Logf("2 GiB written in a 256 MiB sandbox: exit %d %s", res.ExitCode, trim(res.Stderr))
		}
		agentAnswers(t, id)
	})
	t.Run("pids limit", func(t *testing.T) {
		if name == "vm" {
			t.Skip("the vm runtime bounds QEMU's pids on the host, not the guest's: only guest memory bounds a fork bomb")
		}
		// gVisor's own pids cgroup, which holds a gvisor sandbox's
		// processes, lets tasks past its limit (measured: 126 to 163 under
		// 128, more under load): bounded, not exact (docs/SECURITY.md).
		slack := 0
		if name == "gvisor" {
			slack = 64
		}
		forkBombBounded(t, id, 128, slack)
	})
	t.Run("pause and resume", func(t *testing.T) {
		cl := shared.client()
		pid0, n0 := startCounter(t, id)
		if _, err := cl.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("pause: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		// Every runtime pauses; a container's processes do not outlive
		// it, and its state says so.
		memory := name != "container"
		if sb, err := cl.GetSandbox(ctx, id); err != nil || sb.State != api.StatePaused || sb.Paused == nil || sb.Paused.Memory != memory {
			t.Errorf("paused sandbox: %+v, %v; want paused, memory %v", sb, err, memory)
		}
		if _, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
			t.Errorf("exec in the paused sandbox: %v, want a conflict", err)
		}
		if _, err := cl.ResumeSandbox(ctx, id); err != nil {
			t.Fatalf("resume: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		if !memory {
			if pythonRuns(t, id) {
				t.Errorf("the counter runs on in a container that paused without its memory")
			}
			shared.sh(t, id, "rm /tmp/counter.pid /tmp/count") // the next check starts one of its own
			agentAnswers(t, id)
			return
		}
		countsOn(t, id, pid0, n0)
		if name != "gvisor" {
			return
		}
		// gvisor keeps a paused sandbox frozen, its memory held, for the
		// daemon's --pause-spill-after, its image saved at once; then ends
		// its process. The first resume was from frozen; this one is from
		// the image.
		_, n1, _ := counter(t, id)
		before := processEnded(id)
		if _, err := cl.PauseSandbox(ctx, id); err != nil {
			t.Fatalf("pause: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		wait.For(t, spillAfter+30*time.Second, "the paused sandbox's process to end", func() bool { return processEnded(id) > before })
		if _, err := cl.ResumeSandbox(ctx, id); err != nil {
			t.Fatalf("resume: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		countsOn(t, id, pid0, n1)
	})
	t.Run("daemon kill -9 and adoption", func(t *testing.T) {
		pid0, n0 := startCounter(t, id)
		shared.sh(t, id, "echo adopted > /root/adopted && sync")
		shared.kill()
		var err error
		t0 := time.Now()
		if shared, err = startDaemon(shared.dataDir, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("daemon restarted in %v", time.Since(t0).Round(time.Millisecond))
		sb, err := shared.client().GetSandbox(ctx, id)
		if err != nil || sb.State != api.StateRunning {
			t.Fatalf("sandbox after a restart: %+v, %v; want running\ndaemon log:\n%s", sb, err, shared.log.tail(30))
		}
		if got := shared.sh(t, id, "cat /root/adopted"); got != "adopted\n" {
			t.Errorf("file after a restart: %q", got)
		}
		countsOn(t, id, pid0, n0)
	})
	t.Run("snapshot restores in container", func(t *testing.T) {
		want := shared.sh(t, id, conformanceWork(name))
		sn := shared.snapshot(t, id)
		t.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), sn) })
		restoredHas(t, sn, "container", want)
	})
	t.Run("container snapshot restores here", func(t *testing.T) {
		if name == "container" {
			t.Skip("the same pair as the check before")
		}
		sn, want := s.containerSnapshot(t)
		restoredHas(t, sn, name, want)
	})
	t.Run("teardown leaves nothing", func(t *testing.T) {
		// The scan sees the running sandbox: it would see what it left.
		if held := leftovers(t, id); len(held) == 0 {
			t.Errorf("the scan finds nothing of the running sandbox %s", id)
		} else {
			t.Logf("the running sandbox holds %d things on the host", len(held))
		}
		if err := shared.client().DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		var left []string
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		backoff.Poll(pctx, backoff.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() (bool, error) {
			left = leftovers(t, id)
			return len(left) == 0, nil
		})
		if len(left) > 0 {
			t.Errorf("left on the host 15 s after the delete:\n%s", strings.Join(left, "\n"))
		}
		if sb, err := shared.client().GetSandbox(ctx, id); !api.IsCode(err, api.CodeNotFound) && (err != nil || sb.State != api.StateStopped) {
			t.Errorf("deleted sandbox: %+v, %v; want it stopped or gone", sb, err)
		}
	})
}

// agentAnswers checks that sandbox id still runs and its agent answers.
func agentAnswers(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	if res, err := shared.client().Exec(ctx, id, api.ExecRequest{Cmd: []string{"echo", "here"}}); err != nil || res.Stdout != "here\n" {
		t.Errorf("exec after: %+v, %v; want the agent answering", res, err)
	}
	if sb, err := shared.client().GetSandbox(ctx, id); err != nil || sb.State != api.StateRunning {
		t.Errorf("sandbox after: %+v, %v; want running", sb, err)
	}
}

// memoryHog writes 2 GiB, 16 MiB at a time, and holds it: every page is
// touched, so only a limit stops it (killed, or a MemoryError).
const memoryHog = `
held = []
for _ in range(128):
    held.append(b"x" * (16 << 20))
`

// spawnBomb spawns `sleep` until a spawn fails (at most 1000), writes how
// many it spawned and why it stopped to /tmp/forks, holds them until
// /tmp/forks-release exists (30 s at most), then kills and reaps them.
const spawnBomb = `
import os, time
kids, err = [], ""
for _ in range(1000):
    try:
        kids.append(os.posix_spawn("/bin/sleep", ["sleep", "60"], {}))
    except OSError as e:
        err = e.strerror
        break
open("/tmp/forks.tmp", "w").write("%d %s" % (len(kids), err))
os.replace("/tmp/forks.tmp", "/tmp/forks")
for _ in range(300):
    if os.path.exists("/tmp/forks-release"):
        break
    time.sleep(0.1)
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
`

// forkBombBounded runs spawnBomb in sandbox id, whose pids limit is
// limit: the spawns stop below it (give or take slack), the agent answers
// while they hold every pid (a file read, which forks nothing), and the
// sandbox runs commands again once they are gone.
func forkBombBounded(t *testing.T, id string, limit, slack int) {
	t.Helper()
	ctx := context.Background()
	cl := shared.client()
	p, err := cl.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", spawnBomb}, TimeoutMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	wait.For(t, 30*time.Second, "the spawns to stop", func() bool {
		r, err := cl.ReadFile(ctx, id, "/tmp/forks")
		if err != nil {
			return false
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		got = string(b)
		return true
	})
	// The spawner and its sleeps are the sandbox's processes: the limit
	// holds them all.
	n, _ := strconv.Atoi(strings.Fields(got + " x")[0])
	t.Logf("spawned %d sleeps under a limit of %d pids: %q", n, limit, got)
	if n == 0 || n+1 > limit+slack {
		t.Errorf("spawns: %q; want the spawner and its sleeps stopped at the limit of %d pids", got, limit)
	}
	if _, err := cl.StatFile(ctx, id, "/tmp/forks"); err != nil {
		t.Errorf("the agent while the spawns hold every pid: %v", err)
	}
	if _, err := cl.WriteFile(ctx, id, "/tmp/forks-release", strings.NewReader(""), 0o644, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitProcess(ctx, id, p.PID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	agentAnswers(t, id)
}

// startCounter starts counterProgram in sandbox id unless it runs there,
// waits until it counts, and returns its pid and count.
func startCounter(t *testing.T, id string) (string, int) {
	t.Helper()
	ctx := context.Background()
	if res, err := shared.client().Exec(ctx, id, api.ExecRequest{Shell: "test -e /tmp/counter.pid"}); err != nil || res.ExitCode != 0 {
		if _, err := shared.client().StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", counterProgram}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 20*time.Second, "the counter to count", func() bool {
		res, err := shared.client().Exec(ctx, id, api.ExecRequest{Shell: "test $(cat /tmp/count 2>/dev/null || echo 0) -ge 3"})
		return err == nil && res.ExitCode == 0
	})
	pid, n, alive := counter(t, id)
	if !alive {
		t.Fatalf("the counter (pid %s) is not running", pid)
	}
	return pid, n
}

// processEnded is how many times the shared daemon ended the process of
// gvisor sandbox id after it had paused, from its log.
func processEnded(id string) int {
	n := 0
	for _, line := range strings.Split(shared.log.String(), "\n") {
		if strings.Contains(line, `msg="gvisor paused sandbox's process ended"`) && strings.Contains(line, " sandbox="+id+" ") {
			n++
		}
	}
	return n
}

// countsOn checks that the counter of sandbox id is process pid still and
// counts on from n.
func countsOn(t *testing.T, id, pid string, n int) {
	t.Helper()
	var pid1 string
	var n1 int
	var alive bool
	wait.For(t, 20*time.Second, "the counter to count on", func() bool {
		pid1, n1, alive = counter(t, id)
		return pid1 != pid || !alive || n1 > n
	})
	if pid1 != pid || !alive {
		t.Errorf("counter: pid %s count %d before; pid %s count %d (alive %v) after; want the same process counting on", pid, n, pid1, n1, alive)
	}
}

// restoredHas restores snapshot sn into runtime rt and checks that the
// restored sandbox runs there with the work tree want; it deletes it.
func restoredHas(t *testing.T, sn, rt, want string) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	sbs, err := shared.client().Restore(ctx, sn, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Runtime: rt}})
	if err != nil {
		t.Fatalf("restore %s into %s: %v\ndaemon log:\n%s", sn, rt, err, shared.log.tail(30))
	}
	kid := sbs[0].ID
	defer shared.client().DeleteSandbox(ctx, kid)
	t.Logf("restored %s into %s (%s) in %v", sn, rt, kid, time.Since(t0).Round(time.Millisecond))
	if sbs[0].Runtime != rt {
		t.Errorf("restored sandbox runs in %q, want %s", sbs[0].Runtime, rt)
	}
	if got := shared.sh(t, kid, checkState); got != want {
		t.Errorf("work tree restored into %s: %q, want %q", rt, got, want)
	}
}

// leftovers lists what the host still holds of sandbox id: cgroups, mounts,
// loop devices, processes (by their cgroup or command line), its router,
// runtime state under /run, and whatever the data directory keeps under its
// name (its directory, its disks, a runtime's state).
func leftovers(t *testing.T, id string) []string {
	t.Helper()
	var left []string
	for _, pat := range []string{"/sys/fs/cgroup/*" + id + "*", "/sys/fs/cgroup/*/*" + id + "*", "/sys/fs/cgroup/*/*/*" + id + "*",
		"/run/*/*" + id + "*", "/run/*/*/*" + id + "*",
		filepath.Join(shared.dataDir, "*", id+"*"), filepath.Join(shared.dataDir, "*", "*", id+"*")} {
		m, _ := filepath.Glob(pat)
		left = append(left, m...)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.Contains(m.Point, id) || strings.Contains(m.Source, id) {
			left = append(left, "mount "+m.Point)
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if f, err := os.ReadFile(b); err == nil && strings.Contains(string(f), id) {
			left = append(left, b+": "+strings.TrimSpace(string(f)))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		if strings.Contains(string(cmd), id) || strings.Contains(string(cg), "/"+id) {
			left = append(left, fmt.Sprintf("process %s %q", filepath.Base(p), strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return left
}
