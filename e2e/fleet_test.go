//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/listing"
	"warren/internal/pgtest"
	"warren/internal/store"
	"warren/internal/wait"
)

// fleet is a fleet on this machine: a real PostgreSQL, nodes and control
// replicas as separate processes with data directories of their own, the
// shared daemon's blob store as theirs, and certificates from a CA the
// test makes with warren fleet.
type fleet struct {
	t        testing.TB
	dsn      string
	st       *store.Store // the fleet's database, as the test reads it
	certs    string
	nodes    map[string]*daemon
	nodeDirs map[string]string
	controls []*daemon
}

// fleetLease is the fleet's lease timing: short, so that a lost node is
// fenced within the test.
var fleetLease = []string{"--heartbeat", "200ms", "--lease", "1s", "--fence-after", "2s"}

func newFleet(t testing.TB) *fleet {
	t.Helper()
	pg := pgtest.Start(t)
	f := &fleet{t: t, dsn: pg.Database(t), certs: t.TempDir(), nodes: map[string]*daemon{}, nodeDirs: map[string]string{}}
	st, err := store.Open(context.Background(), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	ca := filepath.Join(t.TempDir(), "ca")
	f.warren("fleet", "ca", ca)
	for _, m := range []struct{ role, name string }{{"node", "n1"}, {"node", "n2"}, {"control", "c1"}, {"control", "c2"}} {
		f.warren("fleet", "cert", "--ca", ca, "--role", m.role, "--name", m.name, f.certs)
	}
	return f
}

// warren runs a warren command that must succeed.
func (f *fleet) warren(args ...string) string {
	f.t.Helper()
	out, errOut, code := shared.cli(f.t, nil, args...)
	if code != 0 {
		f.t.Fatalf("warren %v: exit %d: %s", args, code, errOut)
	}
	return out
}

// startNode starts fleet node id on its data directory (a new one the
// first time) and stops it when the test ends.
func (f *fleet) startNode(id, region string) *daemon {
	f.t.Helper()
	dir, ok := f.nodeDirs[id]
	if !ok {
		dir = f.t.TempDir()
		f.nodeDirs[id] = dir
		// After the node stops (cleanups run last first): the reflink
		// image it mounted in its data directory.
		f.t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "disks"), unix.MNT_DETACH) })
	}
	args := append([]string{"node", "--node-id", id, "--database", f.dsn, "--fleet-dir", f.certs, "--data-dir", dir,
		"--listen", "127.0.0.1:0", "--template", "", "--no-network", "--region", region, "--cluster", region + "-a",
		"--blob-store", filepath.Join(shared.dataDir, "blobs")}, fleetLease...)
	d, err := startWarren(dir, time.Minute, nil, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(d.stop)
	f.nodes[id] = d
	return d
}

// startControl starts control replica name.
func (f *fleet) startControl(name string) *daemon {
	f.t.Helper()
	dir := f.t.TempDir()
	args := append([]string{"control", "--name", name, "--database", f.dsn, "--fleet-dir", f.certs, "--data-dir", dir,
		"--listen", "127.0.0.1:0"}, fleetLease...)
	d, err := startWarren(dir, time.Minute, nil, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(d.stop)
	f.controls = append(f.controls, d)
	return d
}

// node is the node the fleet's database says runs sandbox id.
func (f *fleet) node(id string) string {
	f.t.Helper()
	rec, err := f.st.GetSandbox(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec.Node
}

// marked are the fleet's sandbox records whose metadata includes m.
func (f *fleet) marked(m map[string]string) []store.Sandbox {
	f.t.Helper()
	recs, err := f.st.ListSandboxes(context.Background(), "", nil, listing.Page{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []store.Sandbox
	for _, rec := range recs {
		match := true
		for k, v := range m {
			match = match && rec.Metadata[k] == v
		}
		if match {
			out = append(out, rec)
		}
	}
	return out
}

// TestFleet runs a fleet of two nodes and two control replicas on one
// machine: restores through either replica land on a node and are reached
// through either; a second restore of a snapshot goes where its lineage
// is; a tenant's key cannot reach a node; a node killed -9 is fenced, its
// sandboxes recorded failed, and the fleet places on the other; the node
// restarted removes its stale copy and joins again.
func TestFleet(t *testing.T) {
	need(t)
	ctx := context.Background()
	// A snapshot of the shared daemon, in the blob store the fleet shares.
	src := shared.newSandbox(t)
	if _, errOut, code := shared.cli(t, strings.NewReader("from the snapshot\n"), "files", "write", src, "/root/mark"); code != 0 {
		t.Fatalf("write the mark: %s", errOut)
	}
	snap, err := shared.client().Snapshot(ctx, src, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), snap.ID) })

	f := newFleet(t)
	f.startNode("n1", "r1")
	f.startNode("n2", "r2")
	c1, c2 := f.startControl("c1"), f.startControl("c2")
	admin1 := c1.client()
	// Both replicas' admin keys are the fleet's: either answers for all.
	admin2 := client.New(c2.url, c1.key)

	restore := func(c *client.Client) api.Sandbox {
		t.Helper()
		sbs, err := c.Restore(ctx, snap.ID, api.RestoreRequest{})
		if err != nil {
			t.Fatalf("restore through the fleet: %v", err)
		}
		t.Cleanup(func() { admin1.DeleteSandbox(context.Background(), sbs[0].ID) })
		return sbs[0]
	}
	first := restore(admin1)
	home := f.node(first.ID)
	if home != "n1" && home != "n2" {
		t.Fatalf("the restore's record names node %q", home)
	}
	for _, c := range []*client.Client{admin1, admin2} {
		res, err := c.Exec(ctx, first.ID, api.ExecRequest{Cmd: []string{"cat", "/root/mark"}})
		if err != nil || res.ExitCode != 0 || res.Stdout != "from the snapshot\n" {
			t.Fatalf("exec through a replica: %+v, %v", res, err)
		}
	}

	// The node that materialized the snapshot reports it; the next restore
	// of the same snapshot goes there, fetching nothing.
	wait.For(t, 10*time.Second, "the node to report the snapshot it holds", func() bool {
		n, err := f.st.GetNode(ctx, home)
		return err == nil && strings.Contains(string(n.Report), snap.ID)
	})
	// The replicas read the nodes' reports every second: the placement
	// under test is the one after their next read.
	time.Sleep(1500 * time.Millisecond)
	if second := restore(admin2); f.node(second.ID) != home {
		t.Errorf("the second restore went to %s, not %s which holds the snapshot", f.node(second.ID), home)
	}

	// A region or a label chooses the node; one no node has is refused.
	inR2, err := admin1.Restore(ctx, snap.ID, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Region: "r2"}})
	if err != nil {
		t.Fatalf("restore in r2: %v", err)
	}
	if n := f.node(inR2[0].ID); n != "n2" {
		t.Errorf("a restore in region r2 went to %s", n)
	}
	admin1.DeleteSandbox(ctx, inR2[0].ID)
	_, err = admin1.Restore(ctx, snap.ID, api.RestoreRequest{SandboxSpec: api.SandboxSpec{NodeLabels: map[string]string{"gpu": "yes"}}})
	if !api.IsCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "gpu") {
		t.Errorf("a restore on a label no node has: %v, want unavailable naming it", err)
	}

	// A cordoned node takes no new sandboxes and keeps its own.
	out, errOut, code := c1.cli(t, nil, "node", "ls")
	if code != 0 || !strings.Contains(out, "n1") || !strings.Contains(out, "n2") || strings.Count(out, "active") != 2 {
		t.Errorf("warren node ls: exit %d %q %s", code, out, errOut)
	}
	out, errOut, code = c1.cli(t, nil, "region", "ls")
	if code != 0 || !strings.Contains(out, "r1") || !strings.Contains(out, "r2-a") || strings.Count(out, "1 of 1 active") != 2 {
		t.Errorf("warren region ls: exit %d %q %s", code, out, errOut)
	}
	away := map[string]string{"n1": "n2", "n2": "n1"}[home]
	if out, errOut, code := c1.cli(t, nil, "node", "cordon", home); code != 0 || out != home+" cordoned\n" {
		t.Fatalf("warren node cordon: exit %d %q %s", code, out, errOut)
	}
	if sb := restore(admin1); f.node(sb.ID) != away {
		t.Errorf("a restore with %s cordoned went to %s", home, f.node(sb.ID))
	}
	if _, err := admin1.Exec(ctx, first.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Errorf("exec in a sandbox of the cordoned node: %v", err)
	}
	if out, errOut, code := c1.cli(t, nil, "node", "uncordon", home); code != 0 || out != home+" active\n" {
		t.Fatalf("warren node uncordon: exit %d %q %s", code, out, errOut)
	}

	// kill -9 of a control replica mid-restore: the retry with the same
	// idempotency key, through the other replica, gets the first restore's
	// answer.
	mark := map[string]string{"retried": "yes"}
	body, _ := json.Marshal(api.RestoreRequest{SandboxSpec: api.SandboxSpec{Metadata: mark}})
	req, _ := http.NewRequest("POST", c2.url+"/v1/snapshots/"+snap.ID+"/restore", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c1.key)
	req.Header.Set("Idempotency-Key", "restore-once")
	go http.DefaultClient.Do(req)
	wait.For(t, 30*time.Second, "the restore to be under way on a node", func() bool {
		return len(f.marked(mark)) > 0
	})
	c2.kill()
	again, err := admin1.Restore(client.WithIdempotencyKey(ctx, "restore-once"), snap.ID, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Metadata: mark}})
	if err != nil {
		t.Fatalf("the retry through the other replica: %v", err)
	}
	t.Cleanup(func() { admin1.DeleteSandbox(context.Background(), again[0].ID) })
	// The restore under way when its replica died ran to its end, and the
	// retry got its answer: one sandbox, never a second.
	if recs := f.marked(mark); len(recs) != 1 || recs[0].ID != again[0].ID || recs[0].State != api.StateRunning {
		for _, rec := range recs {
			t.Logf("a sandbox of the retried restore: %s %s %s", rec.ID, rec.State, rec.Error)
		}
		t.Errorf("%d sandboxes of the retried restore; want one, running, the retry's answer %s", len(recs), again[0].ID)
	}

	// A tenant's key reaches no node: without the fleet's certificate the
	// TLS handshake fails before any request is read.
	k, err := admin1.CreateKey(ctx, "fleet-tenant")
	if err != nil {
		t.Fatal(err)
	}
	tenant := k.Key
	for id, nd := range f.nodes {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
		req, _ := http.NewRequest("GET", nd.url+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+tenant)
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("node %s answered a tenant's key with %d; want the handshake refused", id, resp.StatusCode)
		}
	}

	// kill -9 of the node: it is fenced, what it ran is recorded failed,
	// and new restores go to the other node.
	other := map[string]string{"n1": "n2", "n2": "n1"}[home]
	cg := filepath.Join("/sys/fs/cgroup/memory/warren", first.ID)
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("the sandbox's cgroup: %v", err)
	}
	killed := time.Now()
	f.nodes[home].kill()
	wait.For(t, 30*time.Second, "the dead node to be fenced", func() bool {
		n, err := f.st.GetNode(ctx, home)
		return err == nil && n.State == store.NodeFenced
	})
	t.Logf("node %s fenced %v after kill -9", home, time.Since(killed).Round(10*time.Millisecond))
	wait.For(t, 10*time.Second, "its sandbox to be recorded failed", func() bool {
		sb, err := admin1.GetSandbox(ctx, first.ID)
		return err == nil && sb.State == api.StateFailed && strings.Contains(sb.Error, "stopped answering")
	})
	if third := restore(admin1); f.node(third.ID) != other {
		t.Errorf("a restore after the fence went to %s, want %s", f.node(third.ID), other)
	}

	// The node comes back on its data directory: a new lease, and the copy
	// of the sandbox it still ran is gone.
	f.startNode(home, map[string]string{"n1": "r1", "n2": "r2"}[home])
	n, err := f.st.GetNode(ctx, home)
	if err != nil || n.State != store.NodeActive {
		t.Fatalf("the node after its restart: %+v, %v", n, err)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Errorf("the fenced sandbox's cgroup %s is still there after its node restarted", cg)
	}
	if sb, err := admin1.GetSandbox(ctx, first.ID); err != nil || sb.State != api.StateFailed {
		t.Errorf("the fenced sandbox after its node restarted: %+v, %v; want it still failed", sb, err)
	}
}
