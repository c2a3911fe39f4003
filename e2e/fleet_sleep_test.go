package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// TestFleetSleepWake: CubeSandbox's auto-paused sandboxes that cannot come
// back once their node died, turned round. On the container, gvisor and vm
// runtimes, a sandbox auto-pauses when idle (a gvisor or vm one, held with
// its memory, gets the other node as its standby), its node is killed -9,
// and an exec through a control replica wakes it on the other node under
// its ID with its files; a gvisor or vm
// sandbox wakes from its durable memory image, a process it ran counting
// on where it stopped, and a container's record said it would start
// again. Then a sandbox its node holds paused with its memory is let go
// of by a drain, and a call wakes it on the other node too, its memory
// with it.
func TestFleetSleepWake(t *testing.T) {
	need(t)
	ctx := context.Background()
	f := newFleet(t)
	snaps := f.snapshots(map[string]string{api.AdminTenant: "echo base > /root/base"})
	clusters := map[string]string{"s1": "r1-a", "s2": "r1-b"}
	for id, cluster := range clusters {
		f.startNode(id, "r1", cluster)
	}
	admin := f.startControl("c1").client()
	f.logPhase("fleet up")

	for _, rt := range []string{"container", "gvisor", "vm"} {
		t.Run(rt, func(t *testing.T) { wakeAfterKill(t, f, admin, snaps[api.AdminTenant], rt, clusters) })
	}

	// A pause that keeps its memory on its node; a drain lets go of it,
	// and it wakes from its disk on the other node.
	sbs, err := admin.Restore(ctx, snaps[api.AdminTenant], api.RestoreRequest{SandboxSpec: api.SandboxSpec{
		Runtime: "gvisor", Lifecycle: api.Lifecycle{AutoResume: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	held := sbs[0].ID
	t.Cleanup(func() { admin.DeleteSandbox(context.Background(), held) })
	from := f.node(held)
	to := map[string]string{"s1": "s2", "s2": "s1"}[from]
	if res, err := admin.Exec(ctx, held, api.ExecRequest{Shell: "echo held > /root/held && sync"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	p, err := admin.PauseSandbox(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := f.controls[0].cli(t, nil, "node", "drain", from); code != 0 {
		t.Fatalf("warren node drain: exit %d %q %s", code, out, errOut)
	}
	waitSandbox(t, admin, held, time.Minute, "the drained node to let go of it", func(sb *api.Sandbox) bool {
		return sb.State == api.StatePaused && f.node(held) != from
	})
	res, err := admin.Exec(ctx, held, api.ExecRequest{Shell: "cat /root/held"})
	if err != nil || res.Stdout != "held\n" {
		t.Fatalf("the exec that wakes the drained one: %+v %v", res, err)
	}
	if got := f.node(held); got != to {
		t.Errorf("the drained one woke on %q, want %s", got, to)
	}
	sb, err := admin.GetSandbox(ctx, held)
	if err != nil || sb.Checkpoint == nil || sb.Checkpoint.Snapshot != p.Paused.Snapshot {
		t.Errorf("after the wake: %+v %v; want its pause snapshot its checkpoint", sb, err)
	}
	if !p.Paused.Memory || !p.Paused.Held || p.Paused.Image == "" {
		t.Errorf("paused: %+v, want its memory held on %s before the drain, and stored", p.Paused, from)
	}
	f.logPhase("woken on another node after a drain")
}

// wakeAfterKill is TestFleetSleepWake's first part on runtime rt: a
// sandbox auto-pauses when idle, its node is killed -9, and an exec
// through the control replica wakes it on the other node with its files;
// the killed node is started again.
func wakeAfterKill(t *testing.T, f *fleet, admin *client.Client, snap, rt string, clusters map[string]string) {
	ctx := context.Background()
	sleepy := api.SandboxSpec{Runtime: rt, Lifecycle: api.Lifecycle{OnTimeout: api.OnTimeoutPause, IdleTimeoutSeconds: 2, AutoResume: true}}
	sbs, err := admin.Restore(ctx, snap, api.RestoreRequest{SandboxSpec: sleepy})
	if err != nil {
		t.Fatal(err)
	}
	id := sbs[0].ID
	t.Cleanup(func() { admin.DeleteSandbox(context.Background(), id) })
	home := f.node(id)
	other := map[string]string{"s1": "s2", "s2": "s1"}[home]
	if res, err := admin.Exec(ctx, id, api.ExecRequest{Shell: "echo slept > /root/slept && sync"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	pid0, n0 := fleetCounter(t, admin, id)
	var paused *api.Paused
	waitSandbox(t, admin, id, time.Minute, "the idle sandbox to pause", func(sb *api.Sandbox) bool {
		paused = sb.Paused
		return sb.State == api.StatePaused && sb.Paused != nil && sb.Paused.Auto
	})
	withMemory := rt != "container"
	if paused.Memory != withMemory || (paused.Image != "") != withMemory {
		t.Errorf("%s paused: %+v, want memory and its image %v", rt, paused, withMemory)
	}
	// A sandbox its node holds with its memory gets a standby from a
	// control replica, the other node, which fetches what it wakes from;
	// a container is let go of at once: it sleeps in the blob store.
	if withMemory {
		waitSandbox(t, admin, id, 30*time.Second, "its standby", func(sb *api.Sandbox) bool {
			return sb.Paused != nil && sb.Paused.Held && sb.Paused.Standby == other
		})
	} else if paused.Held {
		t.Errorf("a paused container is held by its node: %+v", paused)
	}
	f.logPhase(rt + ": auto-paused")

	killed := time.Now()
	f.nodes[home].kill()
	// Once the fleet knows the node lost, the sandbox sleeps on, held by
	// none, its memory (if it had any) gone with the node; a request for
	// it, this GET included, places its wake on a live node.
	waitSandbox(t, admin, id, time.Minute, "the lost node's sandbox to be let go of", func(sb *api.Sandbox) bool {
		return sb.State == api.StatePaused && !sb.Paused.Held && sb.Paused.Memory == withMemory && f.node(id) != home
	})
	t0 := time.Now()
	res, err := admin.Exec(ctx, id, api.ExecRequest{Shell: "cat /root/base /root/slept"})
	if err != nil || res.Stdout != "base\nslept\n" {
		t.Fatalf("the exec that wakes it elsewhere: %+v %v", res, err)
	}
	t.Logf("%s: node %s killed -9: the exec that woke %s on %s took %v (%v after the kill)", rt, home, id, other,
		time.Since(t0).Round(time.Millisecond), time.Since(killed).Round(10*time.Millisecond))
	if got := f.node(id); got != other {
		t.Errorf("woken on %q, want %s", got, other)
	}
	if sb, err := admin.GetSandbox(ctx, id); err != nil || sb.State != api.StateRunning || sb.ID != id || sb.Runtime != rt {
		t.Errorf("after the wake: %+v %v", sb, err)
	}
	count := func() int {
		n, _ := strconv.Atoi(strings.TrimSpace(fleetSh(t, admin, id, `cat /root/count`)))
		return n
	}
	n1 := count()
	time.Sleep(500 * time.Millisecond)
	n2 := count()
	switch {
	case withMemory && (n1 < n0 || n2 <= n1):
		t.Errorf("the counter (pid %s) stood at %d before the pause, and at %d then %d after the wake: want it counting on", pid0, n0, n1, n2)
	case !withMemory && n2 != n1:
		t.Errorf("a container woke from its disk with its counter counting: %d then %d", n1, n2)
	}
	f.startNode(home, "r1", clusters[home])
	f.logPhase(rt + ": woken on another node after kill -9")
}

// fleetCounter starts a shell in sandbox id that counts in a variable and
// writes each count to /root/count (its pid to /root/counter.pid), waits
// until it has counted, and returns its pid and count.
func fleetCounter(t *testing.T, admin *client.Client, id string) (pid string, n int) {
	t.Helper()
	script := `echo $$ > /root/counter.pid; i=0; while :; do i=$((i+1)); echo $i > /root/count.new; mv /root/count.new /root/count; sleep 0.1; done`
	if _, err := admin.StartProcess(context.Background(), id, api.ExecRequest{Cmd: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the counter to count", func() bool {
		n, _ = strconv.Atoi(strings.TrimSpace(fleetSh(t, admin, id, "cat /root/count 2>/dev/null; true")))
		return n >= 3
	})
	return strings.TrimSpace(fleetSh(t, admin, id, "cat /root/counter.pid")), n
}

// fleetSh runs script in sandbox id and returns its stdout.
func fleetSh(t *testing.T, admin *client.Client, id, script string) string {
	t.Helper()
	res, err := admin.Exec(context.Background(), id, api.ExecRequest{Shell: script})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v %v", script, res, err)
	}
	return res.Stdout
}
