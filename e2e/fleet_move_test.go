//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// TestFleetMoves: a sandbox with a checkpoint policy outlives its node. In
// a fleet of two nodes of one region: its node killed -9, it comes back on
// the other from its last checkpoint under the same ID, with what it wrote
// before that checkpoint and not what it wrote after, its record saying
// so; then that node is drained, and it comes back on the first with
// everything it wrote, up to the instant of the drain.
func TestFleetMoves(t *testing.T) {
	need(t)
	ctx := context.Background()
	f := newFleet(t)
	snaps := f.snapshots(map[string]string{api.AdminTenant: "echo base > /root/base"})
	f.startNode("m1", "r1", "r1-a")
	f.startNode("m2", "r1", "r1-b")
	admin := f.startControl("c1").client()
	f.logPhase("fleet up")

	sbs, err := admin.Restore(ctx, snaps[api.AdminTenant], api.RestoreRequest{SandboxSpec: api.SandboxSpec{CheckpointEverySeconds: 5}})
	if err != nil {
		t.Fatal(err)
	}
	id := sbs[0].ID
	t.Cleanup(func() { admin.DeleteSandbox(context.Background(), id) })
	home := f.node(id)
	other := map[string]string{"m1": "m2", "m2": "m1"}[home]
	sh := func(cmd string) api.ExecResult {
		t.Helper()
		res, err := admin.Exec(ctx, id, api.ExecRequest{Shell: cmd})
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return *res
	}
	sh("echo before > /root/work")
	wrote := time.Now()
	var cp api.Checkpoint
	waitSandbox(t, admin, id, 30*time.Second, "a checkpoint after the write", func(sb *api.Sandbox) bool {
		if sb.Checkpoint != nil && sb.Checkpoint.At.After(wrote) {
			cp = *sb.Checkpoint
			return true
		}
		return false
	})
	sh("echo after > /root/late")
	f.logPhase("checkpointed")

	// kill -9 of its node: it comes back on the other.
	killed := time.Now()
	f.nodes[home].kill()
	back := waitSandbox(t, admin, id, time.Minute, "the sandbox to run on "+other, func(sb *api.Sandbox) bool {
		return sb.State == api.StateRunning && f.node(id) == other
	})
	t.Logf("node %s killed -9: sandbox %s running on %s after %v", home, id, other, time.Since(killed).Round(10*time.Millisecond))
	r := back.Restored
	if r == nil || r.Snapshot != cp.Snapshot || r.From != home || !strings.Contains(r.Reason, "stopped answering") || r.LostSeconds <= 0 {
		t.Errorf("how it came back: %+v; want from checkpoint %s of node %s, some work lost", r, cp.Snapshot, home)
	}
	if got := sh("cat /root/base /root/work").Stdout; got != "base\nbefore\n" {
		t.Errorf("its files from before the checkpoint: %q", got)
	}
	if res := sh("cat /root/late"); res.ExitCode == 0 {
		t.Errorf("a file written after its last checkpoint came back: %q", res.Stdout)
	}
	f.startNode(home, "r1", map[string]string{"m1": "r1-a", "m2": "r1-b"}[home])
	f.logPhase("moved after kill -9")

	// Drain its new node: it comes back on the first with what it wrote
	// just before the drain, nothing lost.
	sh("echo drained > /root/drain")
	if out, errOut, code := f.controls[0].cli(t, nil, "node", "drain", other); code != 0 || out != other+" draining\n" {
		t.Fatalf("warren node drain: exit %d %q %s", code, out, errOut)
	}
	back = waitSandbox(t, admin, id, time.Minute, "the sandbox to run on "+home, func(sb *api.Sandbox) bool {
		return sb.State == api.StateRunning && f.node(id) == home
	})
	if r := back.Restored; r == nil || r.From != other || !strings.Contains(r.Reason, "drained") || r.LostSeconds != 0 {
		t.Errorf("how it came back from the drain: %+v", r)
	}
	if got := sh("cat /root/work /root/drain").Stdout; got != "before\ndrained\n" {
		t.Errorf("its files after the drain: %q", got)
	}
	nodes, err := admin.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID == other && (n.State != "draining" || n.Sandboxes != 0) {
			t.Errorf("the drained node: %s with %d sandboxes", n.State, n.Sandboxes)
		}
	}
	f.logPhase("moved by a drain")
	// Now, while its node runs: the cleanups stop the restarted node first.
	if err := admin.DeleteSandbox(ctx, id); err != nil {
		t.Errorf("delete the moved sandbox: %v", err)
	}
}

// waitSandbox polls sandbox id through c until ok holds of it, for up to
// d, and returns it; it fails the test, showing the sandbox, if ok never
// held.
func waitSandbox(t testing.TB, c *client.Client, id string, d time.Duration, what string, ok func(*api.Sandbox) bool) *api.Sandbox {
	t.Helper()
	var sb *api.Sandbox
	var err error
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if sb, err = c.GetSandbox(context.Background(), id); err == nil && ok(sb) {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %+v, %v", d, what, sb, err)
		}
	}
}

// TestFleetAlwaysOnMoves: an always-on sandbox outlives its node with every
// write it flushed. Its node killed -9 (the lease watchdog then kills the
// node's block server and sandboxes), a node of the same region takes the
// sandbox over under the same ID with its volume, recovered from the
// fleet's blob store (S3) as its last flush left it; nothing flushed is
// lost. The restarted node lets go of what it left of the volume. Then a
// drain moves it back, with what it wrote up to the drain.
func TestFleetAlwaysOnMoves(t *testing.T) {
	need(t)
	ctx := context.Background()
	f := newFleet(t)
	snaps := f.snapshots(map[string]string{api.AdminTenant: "echo base > /root/base"})
	f.startNode("a1", "r1", "r1-a")
	f.startNode("a2", "r1", "r1-b")
	admin := f.startControl("c1").client()
	sbs, err := admin.Restore(ctx, snaps[api.AdminTenant], api.RestoreRequest{SandboxSpec: api.SandboxSpec{Persistence: api.PersistenceAlways}})
	if err != nil {
		t.Fatal(err)
	}
	id := sbs[0].ID
	t.Cleanup(func() { admin.DeleteSandbox(context.Background(), id) })
	home := f.node(id)
	other := map[string]string{"a1": "a2", "a2": "a1"}[home]
	sh := func(cmd string) api.ExecResult {
		t.Helper()
		res, err := admin.Exec(ctx, id, api.ExecRequest{Shell: cmd})
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return *res
	}
	sh("echo flushed > /root/work && sync")
	f.logPhase("written and flushed")

	killed := time.Now()
	f.nodes[home].kill()
	back := waitSandbox(t, admin, id, time.Minute, "the sandbox to run on "+other, func(sb *api.Sandbox) bool {
		return sb.State == api.StateRunning && f.node(id) == other
	})
	t.Logf("node %s killed -9: always-on sandbox %s running on %s after %v", home, id, other, time.Since(killed).Round(10*time.Millisecond))
	if r := back.Restored; r == nil || r.Snapshot != id || r.From != home || r.LostSeconds != 0 {
		t.Errorf("how it came back: %+v; want with its own volume (%s) from node %s, nothing lost", r, id, home)
	}
	if got := sh("cat /root/base /root/work").Stdout; got != "base\nflushed\n" {
		t.Errorf("its files: %q, want every flushed write", got)
	}
	sh("echo more >> /root/work && sync")
	f.logPhase("moved with its volume")

	// The node comes back: what it left of the volume goes, and the disk
	// is the other node's alone.
	restarted := f.startNode(home, "r1", map[string]string{"a1": "r1-a", "a2": "r1-b"}[home])
	wait.For(t, 30*time.Second, "the restarted node to let go of the volume", func() bool {
		_, err := os.Stat(filepath.Join(restarted.dataDir, "volumes", id))
		return os.IsNotExist(err)
	})
	if got := sh("cat /root/work").Stdout; got != "flushed\nmore\n" {
		t.Errorf("its files after the old node came back: %q", got)
	}
	f.logPhase("the old node let go")

	// Drain its new node: it comes back on the first with its volume,
	// flushed at the drain, with what it wrote just before, unsynced.
	sh("echo drained >> /root/work")
	if out, errOut, code := f.controls[0].cli(t, nil, "node", "drain", other); code != 0 || out != other+" draining\n" {
		t.Fatalf("warren node drain: exit %d %q %s", code, out, errOut)
	}
	back = waitSandbox(t, admin, id, time.Minute, "the sandbox to run on "+home, func(sb *api.Sandbox) bool {
		return sb.State == api.StateRunning && f.node(id) == home
	})
	if r := back.Restored; r == nil || r.Snapshot != id || r.From != other || !strings.Contains(r.Reason, "drained") || r.LostSeconds != 0 {
		t.Errorf("how it came back from the drain: %+v", r)
	}
	if got := sh("cat /root/work").Stdout; got != "flushed\nmore\ndrained\n" {
		t.Errorf("its files after the drain: %q", got)
	}
	f.logPhase("moved by a drain")
	// Now, while its node runs: the cleanups stop the restarted node first.
	if err := admin.DeleteSandbox(ctx, id); err != nil {
		t.Errorf("delete the moved sandbox: %v", err)
	}
}
