//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/internal/mountinfo"
	"warren/internal/wait"
)

// foreign are the sandbox cgroups, routers and loop-device backing files
// that existed when the suite started: another warren's on the host (a user
// may run one beside the suite), which the leak checks leave out.
var foreign = map[string]bool{}

// noteForeign records what exists before the suite starts.
func noteForeign() {
	for _, p := range hostSandboxThings() {
		foreign[p] = true
	}
}

// hostSandboxThings lists the cgroups (by sandbox ID), router namespaces
// and sandbox-disk loop backing files on the host.
func hostSandboxThings() []string {
	var out []string
	for _, dir := range []string{"/sys/fs/cgroup/pids/warren", "/sys/fs/cgroup/warren"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, e.Name())
			}
		}
	}
	routers, _ := filepath.Glob("/run/warren/net/*/sb-*")
	out = append(out, routers...)
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if f, err := os.ReadFile(b); err == nil && strings.Contains(string(f), "/disks/sandboxes/") {
			out = append(out, strings.TrimSpace(string(f)))
		}
	}
	return out
}

// waitingInit reports whether cgroup name in dir is a warm init's, with
// the init in it: on cgroup v1 the container runtime spawns each init into
// a cgroup of its own, init-TAG-SLOT, renamed after its sandbox at a
// create. Waiting inits are left out of the leak checks, as warm routers
// are. One stays empty while its init is moved in (the move waits for an
// RCU grace period) or killed: one empty for 2 s is a leak.
func waitingInit(dir, name string) bool {
	if !strings.HasPrefix(name, "init-") {
		return false
	}
	for range 40 {
		b, err := os.ReadFile(filepath.Join(dir, name, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(bytes.TrimSpace(b)) > 0) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// resources counts what sandboxes hold on the host, to find leaks.
type resources struct {
	cgroups int // warren cgroups (pids controller, present on v1 and v2)
	loops   int // loop devices backed by a sandbox disk
	mounts  int // host mounts under any warren data dir
	routers int // sandbox router namespaces, bound under /run/warren/net (warm ones aside)
}

func leaks(t testing.TB) resources {
	t.Helper()
	var r resources
	for _, dir := range []string{"/sys/fs/cgroup/pids/warren", "/sys/fs/cgroup/warren"} {
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				if e.IsDir() && !foreign[e.Name()] && !waitingInit(dir, e.Name()) {
					r.cgroups++
				}
			}
			break
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if f, err := os.ReadFile(b); err == nil && strings.Contains(string(f), "/disks/sandboxes/") && !foreign[strings.TrimSpace(string(f))] {
			r.loops++
		}
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.Contains(m.Point, "/sandboxes/") {
			r.mounts++
		}
	}
	routers, _ := filepath.Glob("/run/warren/net/*/sb-*")
	for _, p := range routers {
		if !foreign[p] {
			r.routers++
		}
	}
	return r
}

// After kill -9 of the daemon, a restarted daemon adopts the sandboxes that
// still run (they keep working, files intact) and cleans up the ones that
// died meanwhile, leaving nothing behind.
func TestRestartReconciles(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	keep, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, keep.ID, api.ExecRequest{Shell: "echo survived > /root/note; sleep 1000 &"}); err != nil {
		t.Fatal(err)
	}
	pid := initPid(t, doomed.ID)
	shared.kill()

	// While the daemon is down, one sandbox's init dies.
	syscall.Kill(pid, syscall.SIGKILL)

	shared, err = startDaemon(shared.dataDir, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c = shared.client()
	res, err := c.Exec(ctx, keep.ID, api.ExecRequest{Cmd: []string{"cat", "/root/note"}})
	if err != nil || res.Stdout != "survived\n" {
		t.Fatalf("adopted sandbox: %+v %v\n%s", res, err, shared.log.tail(20))
	}
	// Its network came through too: the router, its rules, the resolver.
	wantReached(t, probe(t, keep.ID, "allowed.test:80"), "allowed.test:80")
	wantRefused(t, probe(t, keep.ID, hostPort(inetMeta, 80)), hostPort(inetMeta, 80))
	sb, err := c.GetSandbox(ctx, doomed.ID)
	if err != nil || sb.State != api.StateFailed || sb.Error == "" || !sb.DiskKept {
		t.Errorf("sandbox that died meanwhile: %+v %v, want failed with a reason, its disk kept", sb, err)
	}
	if err := c.DeleteSandbox(ctx, doomed.ID); err != nil {
		t.Errorf("delete the failed sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared.dataDir, "sandboxes", doomed.ID)); !os.IsNotExist(err) {
		t.Errorf("dead sandbox's dir left behind: %v", err)
	}
	if routers, _ := filepath.Glob("/run/warren/net/*/" + doomed.ID); len(routers) != 0 {
		t.Errorf("dead sandbox's router left behind: %v", routers)
	}
	if err := c.DeleteSandbox(ctx, keep.ID); err != nil {
		t.Fatal(err)
	}
	if n := countInCgroup(keep.ID) + countInCgroup(doomed.ID); n != 0 {
		t.Errorf("%d processes of deleted sandboxes still alive", n)
	}
}

// countInCgroup counts host processes in the sandbox's cgroup.
func countInCgroup(id string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if cg, err := os.ReadFile(p); err == nil && strings.Contains(string(cg), "/warren/"+id+"\n") {
			n++
		}
	}
	return n
}

// initPid finds the host pid of a sandbox's init: the process in the
// sandbox's cgroup that is PID 1 of its own pid namespace.
func initPid(t testing.TB, id string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		cg, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cg), "/warren/"+id+"\n") {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "NSpid:" && f[2] == "1" {
				if pid, err := strconv.Atoi(f[1]); err == nil {
					return pid
				}
			}
		}
	}
	t.Fatalf("no init process found for %s", id)
	return 0
}

// A second server on the same data directory is refused: two would
// reconcile each other's sandboxes away.
func TestSecondServerRefused(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	_, err := startDaemon(shared.dataDir, "", 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "in use by another warren server") {
		t.Fatalf("second server on %s: %v, want a refusal", shared.dataDir, err)
	}
	res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("first server after the refusal: %+v %v", res, err)
	}
}

// Killing a sandbox's init (the agent) from the host gives a clear state,
// not a hang: the sandbox is failed with a reason and its processes go.
// Its disk stays (issue 13, item 7: a crash deleted the user's work): a
// snapshot of the failed sandbox saves it, and a delete removes it.
func TestInitKilled(t *testing.T) {
	need(t)
	ctx := context.Background()
	id := shared.newSandbox(t)
	c := shared.client()
	if _, err := c.Exec(ctx, id, api.ExecRequest{Shell: "echo work > /root/work && sync"}); err != nil {
		t.Fatal(err)
	}
	before := countInCgroup(id)
	if before == 0 {
		t.Fatal("no process of the sandbox found")
	}
	syscall.Kill(initPid(t, id), syscall.SIGKILL)
	var failed *api.Sandbox
	wait.For(t, 15*time.Second, "the sandbox to be failed", func() bool {
		sb, err := c.GetSandbox(ctx, id)
		failed = sb
		return err == nil && sb.State == api.StateFailed && strings.Contains(sb.Error, "exited")
	})
	if !failed.DiskKept || !strings.Contains(failed.Error, "disk is kept") {
		t.Errorf("failed sandbox: %+v; want its disk kept, and the error saying so", failed)
	}
	if _, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("exec in a sandbox whose init died: %v, want conflict", err)
	}
	disk := filepath.Join(shared.dataDir, "disks", "sandboxes", id+".img")
	wait.For(t, 10*time.Second, "its processes to go", func() bool { return countInCgroup(id) == 0 })
	if _, err := os.Stat(disk); err != nil {
		t.Fatalf("the failed sandbox's disk: %v; want it kept", err)
	}

	sn, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatalf("snapshot of the failed sandbox: %v", err)
	}
	t.Cleanup(func() { c.DeleteSnapshot(context.Background(), sn.ID) })
	restored, err := c.Restore(ctx, sn.ID, api.RestoreRequest{})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), restored[0].ID) })
	if res, err := c.Exec(ctx, restored[0].ID, api.ExecRequest{Cmd: []string{"cat", "/root/work"}}); err != nil || res.Stdout != "work\n" {
		t.Errorf("the work in the restored sandbox: %+v %v", res, err)
	}

	if err := c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(disk); !os.IsNotExist(err) {
		t.Errorf("the failed sandbox's disk after its delete: %v; want it gone", err)
	}
	if _, err := c.GetSandbox(ctx, id); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("the failed sandbox after its delete: %v; want not found", err)
	}
}

// kill -9 of the daemon in the middle of a create, an exec or a file upload,
// then a restart: every sandbox the store calls running answers, and nothing
// is left on the host that no running sandbox owns.
func TestDaemonKilledMidOperation(t *testing.T) {
	need(t)
	ctx := context.Background()
	ops := []struct {
		name string
		run  func(id string) error
	}{
		{"create", func(string) error {
			_, err := shared.client().CreateSandbox(ctx, api.CreateSandboxRequest{})
			return err
		}},
		{"exec", func(id string) error {
			_, err := shared.client().Exec(ctx, id, api.ExecRequest{Shell: "sleep 0.2; echo done"})
			return err
		}},
		{"upload", func(id string) error {
			_, err := shared.client().WriteFile(ctx, id, "/root/big", io.LimitReader(zeroReader{}, 64<<20), 0o644, "")
			return err
		}},
	}
	for _, op := range ops {
		for _, delay := range []time.Duration{5 * time.Millisecond, 40 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s after %v", op.name, delay), func(t *testing.T) {
				sb, err := shared.client().CreateSandbox(ctx, api.CreateSandboxRequest{})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- op.run(sb.ID) }()
				time.Sleep(delay)
				shared.kill()
				<-done // fails or finishes; either is fine
				shared, err = startDaemon(shared.dataDir, "", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				checkConsistent(t)
			})
		}
	}
}

// checkConsistent asserts that every running sandbox answers and that no
// cgroup, loop device, disk or private directory exists without one.
func checkConsistent(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := shared.client()
	sbs, err := c.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	running, disks := map[string]bool{}, map[string]bool{}
	for _, sb := range sbs {
		if sb.DiskKept {
			disks[sb.ID] = true
		}
		switch sb.State {
		case api.StateRunning:
			disks[sb.ID] = true
			running[sb.ID] = true
			if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
				t.Errorf("running sandbox %s does not answer: %v", sb.ID, err)
			}
		case api.StateStarting:
			t.Errorf("sandbox %s left starting after a restart", sb.ID)
		}
	}
	cgroups, _ := os.ReadDir("/sys/fs/cgroup/pids/warren")
	for _, e := range cgroups {
		if e.IsDir() && !running[e.Name()] && !foreign[e.Name()] && !waitingInit("/sys/fs/cgroup/pids/warren", e.Name()) {
			t.Errorf("cgroup of %s left without a running sandbox", e.Name())
		}
	}
	routers, _ := filepath.Glob("/run/warren/net/*/sb-*")
	for _, r := range routers {
		if !running[filepath.Base(r)] && !foreign[r] {
			t.Errorf("router %s left without a running sandbox", r)
		}
	}
	for dir, owners := range map[string]map[string]bool{
		filepath.Join(shared.dataDir, "sandboxes"):          running,
		filepath.Join(shared.dataDir, "disks", "sandboxes"): disks,
	} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if id := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".img"), ".ws"); !owners[id] {
				t.Errorf("%s left in %s without a running sandbox or a failed one that keeps its disk", e.Name(), dir)
			}
		}
	}
	if r := leaks(t); r.loops > len(running) {
		t.Errorf("%d sandbox loop devices for %d running sandboxes", r.loops, len(running))
	}
	for id := range running {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}
