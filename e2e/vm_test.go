//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/wait"
)

// The vm runtime's part of the suite: few tests, each bounded, because a
// vm boots in seconds under TCG (DESIGN.md §5: no hardware virtualization
// here). One sandbox carries most checks.

// needVM skips the test when the shared daemon cannot run vm sandboxes, and
// returns the vm runtime's info.
func needVM(t testing.TB) api.RuntimeInfo {
	t.Helper()
	return needRuntime(t, "vm")
}

// needRuntime skips the test when the shared daemon cannot run sandboxes
// of runtime name, and returns the runtime's info.
func needRuntime(t testing.TB, name string) api.RuntimeInfo {
	t.Helper()
	need(t)
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Runtimes {
		if r.Name == name {
			if !r.Available {
				t.Skipf("the %s runtime is unavailable on this node: %s", name, r.Reason)
			}
			return r
		}
	}
	t.Skipf("this daemon has no %s runtime", name)
	return api.RuntimeInfo{}
}

// qemuOf returns the pids of QEMU processes of sandbox id (QEMU's -name
// guest=ID).
func qemuOf(id string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("guest="+id+",")) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestVMSandbox(t *testing.T) {
	rt := needVM(t)
	start := time.Now()
	id := shared.newSandbox(t, "--runtime", "vm", "--workspace", "128")
	t.Logf("warren create --runtime vm --workspace 128: %v (accel %s)", time.Since(start).Round(time.Millisecond), rt.Accel)
	sb, err := shared.client().GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Runtime != "vm" || sb.Accel != rt.Accel || !strings.HasPrefix(sb.Isolation, "vm") {
		t.Errorf("sandbox: runtime %q accel %q isolation %q, want vm under %s", sb.Runtime, sb.Accel, sb.Isolation, rt.Accel)
	}
	if len(qemuOf(id)) != 1 {
		t.Errorf("QEMU processes of %s: %v, want one", id, qemuOf(id))
	}

	t.Run("guest kernel", func(t *testing.T) {
		var host unix.Utsname
		unix.Uname(&host)
		hostRelease := unix.ByteSliceToString(host.Release[:])
		if got := strings.TrimSpace(shared.sh(t, id, "uname -r")); !strings.HasPrefix(got, "6.1") || got == hostRelease {
			t.Errorf("uname -r: %q, want the guest's 6.1 kernel (the host runs %s)", got, hostRelease)
		}
		if got := shared.sh(t, id, "cat /proc/1/cmdline"); got != "/init\x00" {
			t.Errorf("/proc/1/cmdline: %q, want the initramfs's /init (the guest agent)", got)
		}
		if got := strings.TrimSpace(shared.sh(t, id, "cat /proc/1/comm")); got != "warren-agent" {
			t.Errorf("/proc/1/comm: %q, want warren-agent", got)
		}
		cpu := shared.sh(t, id, "cat /proc/cpuinfo")
		if !strings.Contains(cpu, "processor") || (rt.Accel == "tcg" && !strings.Contains(cpu, "QEMU")) {
			t.Errorf("/proc/cpuinfo is not the guest's:\n%.400s", cpu)
		}
		if got := shared.sh(t, id, "dmesg | head -n 3"); !strings.Contains(got, "Linux version 6.1") {
			t.Errorf("dmesg does not start with the guest kernel's banner: %q", got)
		}
		// The guest's process list: the agent, kernel threads and ps itself.
		ps := shared.sh(t, id, "ps -e -o comm=")
		for _, comm := range strings.Fields(ps) {
			if comm == "warren" || strings.HasPrefix(comm, "qemu") || comm == "systemd" {
				t.Errorf("the guest's process list shows a host process %q:\n%s", comm, ps)
			}
		}
	})

	// The workspace is a disk of its own, the guest's second one, and a
	// workspace snapshot freezes it through the guest agent.
	t.Run("workspace disk", func(t *testing.T) {
		mnt := strings.Fields(shared.sh(t, id, "findmnt -n -o SOURCE,FSTYPE /workspace; findmnt -n -o SOURCE /"))
		if len(mnt) != 3 || mnt[0] != "/dev/vdb" || mnt[1] != "ext4" || mnt[2] != "/dev/vda" {
			t.Errorf("mounts: %q, want /workspace on /dev/vdb (ext4), / on /dev/vda", mnt)
		}
		df := shared.sh(t, id, "df -k /workspace | tail -1")
		if f := strings.Fields(df); len(f) < 2 || f[0] != "/dev/vdb" || !between(f[1], 100_000, 131_072) {
			t.Errorf("df /workspace: %q, want /dev/vdb of about 128 MB", df)
		}
		want := shared.sh(t, id, `echo work > /workspace/w.txt && head -c 3000000 /dev/urandom > /workspace/rand && cat /workspace/w.txt && md5sum /workspace/rand`)
		ws := snapshotScope(t, id, "workspace")
		kid := shared.restore(t, ws, 1)[0]
		if got := shared.sh(t, kid, "cat /workspace/w.txt && md5sum /workspace/rand"); got != want {
			t.Errorf("workspace restored from the vm's snapshot: %q, want %q", got, want)
		}
		// The guest's filesystem was thawed: it takes writes again.
		shared.sh(t, id, "echo more >> /workspace/w.txt && sync")
	})
}

// between reports whether the decimal number s is within [lo, hi].
func between(s string, lo, hi int) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= lo && n <= hi
}

// TestVMSurvivesRestart: after kill -9 of the daemon, a restarted daemon
// reattaches to a vm sandbox's QEMU (the same process) and the guest's
// processes run on, same pid, same memory; a paused vm sandbox stays paused
// across a restart and resumes from its memory file.
func TestVMSurvivesRestart(t *testing.T) {
	needVM(t)
	ctx := context.Background()
	out, errOut, code := shared.cli(t, nil, "create", "--runtime", "vm", "--memory", "256", "--workspace", "64")
	if code != 0 {
		t.Fatalf("warren create: exit %d: %s\ndaemon log:\n%s", code, errOut, shared.log.tail(30))
	}
	id := strings.TrimSpace(out)
	// Deleted through whichever daemon serves by then.
	t.Cleanup(func() { shared.client().DeleteSandbox(ctx, id) })
	if _, err := shared.client().StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", counterProgram}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the counter to count", func() bool {
		res, err := shared.client().Exec(ctx, id, api.ExecRequest{Shell: "test $(cat /tmp/count 2>/dev/null || echo 0) -ge 3"})
		return err == nil && res.ExitCode == 0
	})
	shared.sh(t, id, "echo kept > /workspace/w.txt")
	qemu := qemuOf(id)
	pid0, n0, _ := counter(t, id)

	restart := func(t *testing.T) {
		t.Helper()
		shared.kill()
		var err error
		t0 := time.Now()
		if shared, err = startDaemon(shared.dataDir, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("daemon restarted in %v", time.Since(t0).Round(time.Millisecond))
	}

	var nPaused int // the count when the sandbox paused
	ok := t.Run("running", func(t *testing.T) {
		restart(t)
		sb, err := shared.client().GetSandbox(ctx, id)
		if err != nil || sb.State != api.StateRunning {
			t.Fatalf("vm sandbox after a restart: %+v, %v; want running\ndaemon log:\n%s", sb, err, shared.log.tail(30))
		}
		if got := qemuOf(id); len(got) != 1 || got[0] != qemu[0] {
			t.Errorf("QEMU of the sandbox: %v, want the same process %v", got, qemu)
		}
		pid1, n1, alive := counter(t, id)
		if pid1 != pid0 || !alive || n1 <= n0 {
			t.Errorf("counter before the restart: pid %s count %d; after: pid %s count %d (alive %v); want the same pid counting on", pid0, n0, pid1, n1, alive)
		}
		if got := shared.sh(t, id, "cat /workspace/w.txt"); got != "kept\n" {
			t.Errorf("workspace after a restart: %q", got)
		}
		// The attached machine is driven like a started one.
		_, nPaused, _ = counter(t, id)
		if _, err := shared.client().PauseSandbox(ctx, id); err != nil {
			t.Fatalf("pause after a restart: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		if pids := qemuOf(id); len(pids) != 0 {
			t.Errorf("QEMU processes of the paused sandbox: %v, want none", pids)
		}
	})

	ok = ok && t.Run("paused", func(t *testing.T) {
		restart(t)
		sb, err := shared.client().GetSandbox(ctx, id)
		if err != nil || sb.State != api.StatePaused {
			t.Fatalf("paused vm sandbox after a restart: %+v, %v; want paused\ndaemon log:\n%s", sb, err, shared.log.tail(30))
		}
		if _, err := shared.client().Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
			t.Errorf("exec in the paused sandbox after a restart: %v, want a conflict", err)
		}
		if _, err := os.Stat(filepath.Join(shared.dataDir, "sandboxes", id, "memory.snap")); err != nil {
			t.Errorf("memory file after a restart: %v", err)
		}
		if _, err := shared.client().ResumeSandbox(ctx, id); err != nil {
			t.Fatalf("resume after a restart: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		pid2, n2, alive := counter(t, id)
		if pid2 != pid0 || !alive || n2 < nPaused {
			t.Errorf("counter after resume: pid %s count %d (alive %v); want pid %s counting on from %d", pid2, n2, alive, pid0, nPaused)
		}
		if got := shared.sh(t, id, "cat /workspace/w.txt"); got != "kept\n" {
			t.Errorf("workspace after resume: %q", got)
		}
	})

	if !ok {
		return
	}
	if err := shared.client().DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 15*time.Second, "QEMU of the deleted sandbox to be gone", func() bool { return len(qemuOf(id)) == 0 })
}

// TestVMInfoAndSelection: warren info shows the vm runtime and its accel;
// auto does not pick a tcg vm; --require-isolation vm refuses containers.
func TestVMInfoAndSelection(t *testing.T) {
	rt := needVM(t)
	out, errOut, code := shared.cli(t, nil, "info")
	if code != 0 {
		t.Fatalf("warren info: exit %d: %s", code, errOut)
	}
	found := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "vm" {
			found = strings.Contains(l, "accel: "+rt.Accel) && strings.Contains(l, "available")
		}
	}
	if !found {
		t.Errorf("warren info does not show the vm runtime with accel %s:\n%s", rt.Accel, out)
	}
	if rt.Accel == "tcg" {
		id := shared.newSandbox(t)
		// Not a vm: gvisor where runsc runs, else container.
		if sb, err := shared.client().GetSandbox(context.Background(), id); err != nil || (sb.Runtime != "gvisor" && sb.Runtime != "container") {
			t.Errorf("auto under tcg picked %+v (%v), want the gvisor or container runtime", sb, err)
		}
	}

	strict := startNode(t, nil, "--require-isolation", "vm")
	_, errOut, code = strict.cli(t, nil, "create", "--runtime", "container")
	if code == 0 || !strings.Contains(errOut, "requires vm isolation") {
		t.Errorf("create --runtime container on a node requiring vm: exit %d, stderr %q; want a refusal naming the requirement", code, errOut)
	}
}

// counterProgram keeps a counter in a variable only and writes it, with its
// pid, to /tmp every 0.2 s: after a memory pause and resume the same pid
// must be counting on from where it was.
const counterProgram = `
import os, time
open('/tmp/counter.pid', 'w').write(str(os.getpid()))
i = 0
while True:
    i += 1
    with open('/tmp/count.tmp', 'w') as f:
        f.write(str(i))
    os.replace('/tmp/count.tmp', '/tmp/count')
    time.sleep(0.2)
`

// counter reads the counter program's pid and count in sandbox id, and
// whether that pid still runs python3.
func counter(t *testing.T, id string) (pid string, count int, alive bool) {
	t.Helper()
	out := strings.Fields(shared.sh(t, id, `p=$(cat /tmp/counter.pid); echo $p $(cat /tmp/count); tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q python3 && echo alive || echo dead`))
	if len(out) != 3 {
		t.Fatalf("counter state: %q", out)
	}
	n, err := strconv.Atoi(out[1])
	if err != nil {
		t.Fatalf("count %q: %v", out[1], err)
	}
	return out[0], n, out[2] == "alive"
}

// TestVMPauseResume: a process started before a memory pause runs on, same
// pid and same in-memory state, after resume, and the clock is the host's
// again; while paused no QEMU runs and exec is refused. It also logs save and restore times for two memory
// sizes (docs/BENCHMARKS.md).
func TestVMPauseResume(t *testing.T) {
	needVM(t)
	c := shared.client()
	ctx := context.Background()
	id := shared.newSandbox(t, "--runtime", "vm", "--memory", "256")
	if _, err := c.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", counterProgram}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the counter to count", func() bool {
		res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "test $(cat /tmp/count 2>/dev/null || echo 0) -ge 3"})
		return err == nil && res.ExitCode == 0
	})

	t0 := time.Now()
	out, errOut, code := shared.cli(t, nil, "pause", id)
	if code != 0 || strings.TrimSpace(out) != api.StatePaused {
		t.Fatalf("warren pause: exit %d, stdout %q, stderr %s\ndaemon log:\n%s", code, out, errOut, shared.log.tail(30))
	}
	t.Logf("pause (256 MiB): %v", time.Since(t0).Round(time.Millisecond))
	if sb, err := c.GetSandbox(ctx, id); err != nil || sb.State != api.StatePaused {
		t.Errorf("paused sandbox: %+v, %v; want state paused", sb, err)
	}
	if pids := qemuOf(id); len(pids) != 0 {
		t.Errorf("QEMU processes of the paused sandbox: %v, want none", pids)
	}
	mem := filepath.Join(shared.dataDir, "sandboxes", id, "memory.snap")
	if _, err := os.Stat(mem); err != nil {
		t.Errorf("memory file of the paused sandbox: %v", err)
	}
	_, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
	if !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "paused") {
		t.Errorf("exec in a paused sandbox: %v, want a conflict saying paused", err)
	}
	if _, err := c.PauseSandbox(ctx, id); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("pause of a paused sandbox: %v, want a conflict", err)
	}
	time.Sleep(2 * time.Second) // the counter must not count, nor the clock run, while paused

	t0 = time.Now()
	out, errOut, code = shared.cli(t, nil, "resume", id)
	if code != 0 || strings.TrimSpace(out) != api.StateRunning {
		t.Fatalf("warren resume: exit %d, stdout %q, stderr %s\ndaemon log:\n%s", code, out, errOut, shared.log.tail(30))
	}
	t.Logf("resume (256 MiB): %v", time.Since(t0).Round(time.Millisecond))
	if _, err := os.Stat(mem); !os.IsNotExist(err) {
		t.Errorf("memory file after resume: %v, want it removed", err)
	}
	if pids := qemuOf(id); len(pids) != 1 {
		t.Errorf("QEMU processes of the resumed sandbox: %v, want one", pids)
	}
	pid1, n1, alive := counter(t, id)
	if !alive {
		t.Fatalf("the counter (pid %s) is not running after resume", pid1)
	}
	var pid2 string
	var n2 int
	wait.For(t, 20*time.Second, "the counter to count on after resume", func() bool {
		pid2, n2, alive = counter(t, id)
		return pid2 != pid1 || !alive || n2 > n1
	})
	if pid2 != pid1 || !alive || n2 <= n1 {
		t.Errorf("counter after resume: pid %s count %d, then pid %s count %d (alive %v); want the same pid counting on", pid1, n1, pid2, n2, alive)
	}
	if n1 < 3 {
		t.Errorf("counter restarted from 0 after resume: count %d", n1)
	}
	t.Logf("counter pid %s: %d right after resume, %d two seconds later", pid1, n1, n2)
	if g := identityOf(t, id); g.clockSkew > time.Second {
		t.Errorf("clock %v from the host's after a pause of 2 s, want within 1 s", g.clockSkew)
	}
	if _, err := c.ResumeSandbox(ctx, id); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("resume of a running sandbox: %v, want a conflict", err)
	}

	// Delete of a paused sandbox removes its memory file.
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(shared.dataDir, "sandboxes", id)); !os.IsNotExist(err) {
		t.Errorf("state dir of the deleted paused sandbox: %v, want it gone", err)
	}

	// Save and restore times against memory size (docs/BENCHMARKS.md):
	// an idle guest, then one with 512 MiB of its memory written.
	t.Run("times", func(t *testing.T) {
		for _, tc := range []struct {
			mib   int
			touch int // MiB a process holds, non-zero bytes
		}{{256, 0}, {1024, 0}, {1024, 512}} {
			sid := shared.newSandbox(t, "--runtime", "vm", "--memory", strconv.Itoa(tc.mib))
			if tc.touch > 0 {
				if _, err := c.StartProcess(ctx, sid, api.ExecRequest{Cmd: []string{"python3", "-c",
					"import time\nb = bytearray(b'\\x01') * (" + strconv.Itoa(tc.touch) + " << 20)\nopen('/tmp/held', 'w').write('1')\ntime.sleep(3600)"}}); err != nil {
					t.Fatal(err)
				}
				wait.For(t, 60*time.Second, "the memory to be written", func() bool {
					res, err := c.Exec(ctx, sid, api.ExecRequest{Shell: "test -e /tmp/held"})
					return err == nil && res.ExitCode == 0
				})
			}
			t0 := time.Now()
			if _, err := c.PauseSandbox(ctx, sid); err != nil {
				t.Fatal(err)
			}
			save := time.Since(t0)
			var size int64
			if fi, err := os.Stat(filepath.Join(shared.dataDir, "sandboxes", sid, "memory.snap")); err == nil {
				size = fi.Size()
			}
			t0 = time.Now()
			if _, err := c.ResumeSandbox(ctx, sid); err != nil {
				t.Fatal(err)
			}
			restore := time.Since(t0)
			if res, err := c.Exec(ctx, sid, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				t.Errorf("exec after resume: %+v, %v", res, err)
			}
			t.Logf("memory %d MiB, %d MiB written: pause (save) %v, resume (restore + agent) %v, file %.1f MiB",
				tc.mib, tc.touch, save.Round(time.Millisecond), restore.Round(time.Millisecond), float64(size)/(1<<20))
			c.DeleteSandbox(ctx, sid)
		}
	})
}
