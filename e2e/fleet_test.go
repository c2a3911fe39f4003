//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/blob/s3test"
	"warren/internal/blockserver"
	wfleet "warren/internal/fleet"
	"warren/internal/listing"
	"warren/internal/pgtest"
	"warren/internal/store"
	"warren/internal/wait"
)

// fleet is a fleet on this machine: a real PostgreSQL and a real bucket
// (versitygw), nodes and control replicas as separate processes with data
// directories of their own, and certificates from a CA the test makes
// with warren fleet.
type fleet struct {
	t        testing.TB
	dsn      string
	st       *store.Store  // the fleet's database, as the test reads it
	blobs    s3test.Server // the nodes' blob store
	ca       string        // the CA's directory
	certs    string        // the members' --fleet-dir: every certificate
	nodes    map[string]*daemon
	nodeDirs map[string]string
	controls []*daemon
	phased   time.Time // when the last phase ended (logPhase)
}

// fleetLease is the fleet's lease timing: short, so that a lost node is
// fenced within the test.
var fleetLease = []string{"--heartbeat", "200ms", "--lease", "1s", "--fence-after", "2s"}

// fleetRefresh is how long a control replica may take to read the nodes'
// reports again: it reads them every second (fleet.DirectoryConfig), and
// nothing outside it shows when it did.
const fleetRefresh = 1500 * time.Millisecond

// newFleet starts the fleet's database and bucket and makes its CA; the
// members are started by startNode and startControl.
func newFleet(t testing.TB) *fleet {
	t.Helper()
	start := time.Now()
	pg := pgtest.Start(t)
	f := &fleet{t: t, dsn: pg.Database(t), blobs: s3test.Start(t), ca: filepath.Join(t.TempDir(), "ca"), certs: t.TempDir(),
		nodes: map[string]*daemon{}, nodeDirs: map[string]string{}, phased: start}
	st, err := store.Open(context.Background(), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	// After every member stopped: what each said last, when the test
	// failed.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for id, d := range f.nodes {
			t.Logf("node %s's log, its end:\n%s", id, d.log.tail(40))
		}
		for i, d := range f.controls {
			t.Logf("control replica %d's log, its end:\n%s", i+1, d.log.tail(40))
		}
	})
	f.warren("fleet", "ca", f.ca)
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

// cert makes the certificate of member name (role node or control) in
// f.certs, unless it is there.
func (f *fleet) cert(role, name string) {
	f.t.Helper()
	if _, err := os.Stat(filepath.Join(f.certs, name+".pem")); err == nil {
		return
	}
	f.warren("fleet", "cert", "--ca", f.ca, "--role", role, "--name", name, f.certs)
}

// logPhase logs how long the part of the test that just ended took (since
// the fleet was made or the last phase), for the log of a slow machine.
func (f *fleet) logPhase(what string) {
	now := time.Now()
	f.t.Logf("%s: %v", what, now.Sub(f.phased).Round(10*time.Millisecond))
	f.phased = now
}

// snapshots returns, by tenant, durable snapshots in the fleet's bucket for
// it to restore (its nodes have no template): for each tenant of setups,
// one of a new sandbox of the tenant's in which shell command
// setups[tenant] ran ("" for none). The shared daemon takes them, on the
// bucket until the test ends (sharedOnBucket); their sandboxes and the
// snapshots are deleted when it ends.
func (f *fleet) snapshots(setups map[string]string) map[string]string {
	t := f.t
	t.Helper()
	ctx := context.Background()
	a := sharedOnBucket(t, f.blobs)
	out := map[string]string{}
	for tenant, setup := range setups {
		c := a.client()
		if tenant != api.AdminTenant {
			k, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: tenant})
			if err != nil {
				t.Fatal(err)
			}
			c = client.New(a.url, k.Key)
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create a sandbox of %s: %v", tenant, err)
		}
		t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
		if setup != "" {
			if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: setup}); err != nil || res.ExitCode != 0 {
				t.Fatalf("%q in a sandbox of %s: %+v, %v", setup, tenant, res, err)
			}
		}
		sn, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
		if err != nil {
			t.Fatalf("snapshot a sandbox of %s: %v", tenant, err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(context.Background(), sn.ID) })
		out[tenant] = sn.ID
	}
	return out
}

// startNode starts fleet node id in region and cluster on its data
// directory (a new one the first time), with extra flags of warren node,
// and stops it when the test ends. Its sandboxes have networking, on a
// pool of the node's own (startSandboxDaemon).
func (f *fleet) startNode(id, region, cluster string, extra ...string) *daemon {
	f.t.Helper()
	dir, ok := f.nodeDirs[id]
	if !ok {
		dir = f.t.TempDir()
		f.nodeDirs[id] = dir
		f.cert("node", id)
		// After the node stops (cleanups run last first): its block
		// server, and the reflink image it mounted in its data directory.
		f.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := blockserver.Stop(ctx, dir); err != nil {
				f.t.Errorf("stop node %s's block server: %v", id, err)
			}
			unix.Unmount(filepath.Join(dir, "disks"), unix.MNT_DETACH)
		})
	}
	args := slices.Concat([]string{"node", "--node-id", id, "--database", f.dsn, "--fleet-dir", f.certs, "--data-dir", dir,
		"--listen", "127.0.0.1:0", "--template", "", "--region", region, "--cluster", cluster, "--blob-store", f.blobs.URL},
		fleetLease, extra)
	d, err := startSandboxDaemon(dir, time.Minute, f.blobs.Env, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(d.stop)
	f.nodes[id] = d
	return d
}

// startControl starts control replica name, with extra flags of warren
// control.
func (f *fleet) startControl(name string, extra ...string) *daemon {
	f.t.Helper()
	f.cert("control", name)
	dir := f.t.TempDir()
	args := slices.Concat([]string{"control", "--name", name, "--database", f.dsn, "--fleet-dir", f.certs, "--data-dir", dir,
		"--listen", "127.0.0.1:0"}, fleetLease, extra)
	d, err := startWarren(dir, time.Minute, nil, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(d.stop)
	f.controls = append(f.controls, d)
	return d
}

// settle waits until the last report of every node not fenced counts the
// sandboxes the fleet's records give it, and then for the replicas to read
// the reports again: a placement after it weighs what the nodes run, not
// what a replica placed since its last read.
func (f *fleet) settle() {
	f.t.Helper()
	ctx := context.Background()
	wait.For(f.t, 10*time.Second, "the nodes' reports to count their sandboxes", func() bool {
		nodes, err := f.st.ListNodes(ctx)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, n := range nodes {
			if n.State == store.NodeFenced {
				continue
			}
			var r wfleet.Report
			if err := json.Unmarshal(n.Report, &r); err != nil {
				f.t.Fatalf("node %s's report: %v", n.ID, err)
			}
			live, err := f.st.NodeSandboxes(ctx, n.ID, store.OnNode)
			if err != nil {
				f.t.Fatal(err)
			}
			if r.Sandboxes != len(live) {
				return false
			}
		}
		return true
	})
	time.Sleep(fleetRefresh)
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

// fleetNodeCPUs is what each of TestFleet's nodes may promise, in vCPUs,
// whatever the machine (--cpu-overcommit): two sandboxes of the default
// size (1 vCPU) and not three, so that a node fills within the test. Not a
// whole number, so that the overcommit's rounding cannot move the bound
// across a sandbox.
const fleetNodeCPUs = 2.5

// TestFleet runs a fleet on one machine: PostgreSQL, a bucket, two control
// replicas, and three nodes with data directories and network pools of
// their own, in two regions (r1 with the clusters r1-a and r1-b, r2 with
// r2-a). Each section below says what it checks and, when it leaves the
// nodes running more or less than it found, what it leaves.
func TestFleet(t *testing.T) {
	need(t)
	// A call that hangs fails the test with the members' logs, well
	// before go test's timeout would end it without them.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFleet(t)
	// quotaTenant is held to one sandbox in the fleet; otherTenant has no
	// quota.
	const quotaTenant, otherTenant = "fleet-quota", "fleet-other"
	snaps := f.snapshots(map[string]string{
		api.AdminTenant: "echo from the snapshot > /root/mark",
		quotaTenant:     "",
		otherTenant:     "",
	})
	snap := snaps[api.AdminTenant]
	f.logPhase("the database, the bucket and the snapshots")

	nodes := []struct{ id, region, cluster string }{{"n1", "r1", "r1-a"}, {"n2", "r1", "r1-b"}, {"n3", "r2", "r2-a"}}
	overcommit := fmt.Sprint(fleetNodeCPUs / float64(runtime.NumCPU()))
	start := func(id string) {
		t.Helper()
		for _, n := range nodes {
			if n.id == id {
				f.startNode(n.id, n.region, n.cluster, "--cpu-overcommit", overcommit)
			}
		}
	}
	for _, n := range nodes {
		start(n.id)
	}
	c1, c2 := f.startControl("c1"), f.startControl("c2")
	admin1 := c1.client()
	// Both replicas' admin keys are the fleet's: either answers for all.
	admin2 := client.New(c2.url, c1.key)
	f.logPhase("the fleet started")

	restore := func(c *client.Client, sn string, spec api.SandboxSpec) api.Sandbox {
		t.Helper()
		sbs, err := c.Restore(ctx, sn, api.RestoreRequest{SandboxSpec: spec})
		if err != nil {
			t.Fatalf("restore %s through the fleet: %v", sn, err)
		}
		t.Cleanup(func() { admin1.DeleteAnyTenantsSandbox(context.Background(), sbs[0].ID) })
		return sbs[0]
	}
	remove := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := admin1.DeleteAnyTenantsSandbox(ctx, id); err != nil {
				t.Fatalf("delete %s: %v", id, err)
			}
		}
	}

	// Locality, and a full node. The first restore in r1, on n1 or n2
	// (home), fetches the snapshot from the bucket; home then reports it,
	// and the next restore in r1 goes there too, fetching nothing, rather
	// than to the other node of r1 (away), which would fetch its whole
	// lineage: in the scheduler's cost (package scheduler), home's load
	// once placed, 2 of 2.5 vCPUs, costs 0.8/(1-0.8) = 4, and away's fetch
	// 4 (the template's 4 GiB image, 1 a GiB) plus its load, 0.4/(1-0.4).
	// Home is then full: the next restore in r1 goes to away, not to r2.
	// Leaves: two sandboxes on home, one on away.
	t0 := time.Now()
	first := restore(admin1, snap, api.SandboxSpec{Region: "r1"})
	fetched := time.Since(t0)
	home := f.node(first.ID)
	away := map[string]string{"n1": "n2", "n2": "n1"}[home]
	if away == "" {
		t.Fatalf("a restore in r1 went to node %q", home)
	}
	for _, c := range []*client.Client{admin1, admin2} {
		res, err := c.Exec(ctx, first.ID, api.ExecRequest{Cmd: []string{"cat", "/root/mark"}})
		if err != nil || res.ExitCode != 0 || res.Stdout != "from the snapshot\n" {
			t.Fatalf("exec through a replica: %+v, %v", res, err)
		}
	}
	// One request ID end to end: an answer through a replica carries one
	// X-Request-Id, the one the node that answered logged the request
	// under (the replica passes its ID on to the node).
	{
		req, _ := http.NewRequestWithContext(ctx, "GET", c1.url+"/v1/sandboxes/"+first.ID, nil)
		req.Header.Set("Authorization", "Bearer "+c1.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ids := resp.Header.Values("X-Request-Id")
		if resp.StatusCode != http.StatusOK || len(ids) != 1 {
			t.Fatalf("a sandbox through a replica: %d with X-Request-Id %q; want 200 with one", resp.StatusCode, ids)
		}
		line := "request_id=" + ids[0] + " method=GET path=/v1/sandboxes/" + first.ID + " status=200 "
		wait.For(t, 10*time.Second, "node "+home+" to log request "+ids[0], func() bool {
			return strings.Contains(f.nodes[home].log.String(), line)
		})
	}
	wait.For(t, 10*time.Second, "the node to report the snapshot it holds", func() bool {
		n, err := f.st.GetNode(ctx, home)
		return err == nil && strings.Contains(string(n.Report), snap)
	})
	f.settle()
	t0 = time.Now()
	second := restore(admin2, snap, api.SandboxSpec{Region: "r1"})
	cloned := time.Since(t0)
	if n := f.node(second.ID); n != home {
		t.Errorf("the second restore went to %s, not %s which holds the snapshot", n, home)
	}
	t.Logf("a restore from the bucket took %v, one from the node's cache %v", fetched.Round(time.Millisecond), cloned.Round(time.Millisecond))
	f.settle()
	third := restore(admin1, snap, api.SandboxSpec{Region: "r1"})
	if n := f.node(third.ID); n != away {
		t.Errorf("a restore in r1 with %s full went to %s, want %s", home, n, away)
	}
	f.logPhase("locality")

	// A region or a label chooses the node; one no node has is refused.
	// Leaves: one sandbox on n3 too.
	inR2 := restore(admin1, snap, api.SandboxSpec{Region: "r2"})
	if n := f.node(inR2.ID); n != "n3" {
		t.Errorf("a restore in region r2 went to %s", n)
	}
	_, err := admin1.Restore(ctx, snap, api.RestoreRequest{SandboxSpec: api.SandboxSpec{NodeLabels: map[string]string{"gpu": "yes"}}})
	if !api.IsCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "gpu") {
		t.Errorf("a restore on a label no node has: %v, want unavailable naming it", err)
	}

	// warren node ls and warren region ls, through either replica.
	fields := func(out string) []string {
		var rows []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			rows = append(rows, strings.Join(strings.Fields(line), " "))
		}
		return rows
	}
	out, errOut, code := c2.cli(t, nil, "node", "ls")
	rows := fields(out)
	if code != 0 || len(rows) != 1+len(nodes) {
		t.Errorf("warren node ls: exit %d %q %s", code, out, errOut)
	} else {
		for i, n := range nodes {
			if want := fmt.Sprintf("%s %s %s active", n.id, n.region, n.cluster); !strings.HasPrefix(rows[1+i], want) {
				t.Errorf("warren node ls: row %q, want it to start %q", rows[1+i], want)
			}
		}
	}
	t.Logf("warren node ls:\n%s", out)
	out, errOut, code = c1.cli(t, nil, "region", "ls")
	if want := []string{"REGION CLUSTERS NODES", "r1 r1-a,r1-b 2 of 2 active", "r2 r2-a 1 of 1 active"}; code != 0 || !slices.Equal(fields(out), want) {
		t.Errorf("warren region ls: exit %d %q %s; want the rows %q", code, out, errOut, want)
	}
	f.logPhase("regions, labels and listings")

	// Metrics: each replica's own, and each node's through either replica
	// (home runs first and second).
	if code, text := scrapeAt(t, c1.url+"/metrics", c1.key); code != http.StatusOK ||
		value(t, text, `warren_fleet_nodes{state="active"}`) != 3 ||
		value(t, text, `warren_api_requests_total{code="201",route="POST /v1/snapshots/{id}/restore"}`) < 3 {
		t.Errorf("c1's metrics: %d, want 3 active nodes and its restores counted:\n%.2000s", code, text)
	}
	code, text := scrapeAt(t, c2.url+"/v1/nodes/"+home+"/metrics", c1.key)
	if got := value(t, text, `warren_sandboxes{runtime="`+inR2.Runtime+`",state="running"}`); code != http.StatusOK || got != 2 {
		t.Errorf("%s's metrics through c2: %d, %v running sandboxes, want 2", home, code, got)
	}
	if code, _ := scrapeAt(t, c2.url+"/v1/nodes/n9/metrics", c1.key); code != http.StatusNotFound {
		t.Errorf("an unknown node's metrics: %d, want 404", code)
	}
	f.logPhase("metrics")

	// Events: one stream, through c2, carries every node's: the nodes
	// joining and the restores on r1 and r2, each naming its node.
	restored := map[string]string{first.ID: f.node(first.ID), inR2.ID: f.node(inR2.ID)}
	joined := map[string]bool{}
	seen := errors.New("seen")
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	zero := int64(0)
	err = admin2.Events(ectx, api.EventsRequest{AllTenants: true, After: &zero}, func(e api.Event) error {
		switch {
		case e.Kind == api.EventNodeJoined:
			joined[e.Node] = true
		case e.Kind == api.EventSandboxRestored && restored[e.Sandbox] != "":
			if e.Node != restored[e.Sandbox] || e.Snapshot != snap {
				t.Errorf("event %+v, want %s restored from %s on %s", e, e.Sandbox, snap, restored[e.Sandbox])
			}
			delete(restored, e.Sandbox)
		}
		if len(joined) == len(nodes) && len(restored) == 0 {
			return seen
		}
		return nil
	})
	ecancel()
	if !errors.Is(err, seen) {
		t.Errorf("events through c2: %v; nodes joined %v, restores not seen %v", err, joined, restored)
	}
	f.logPhase("events")

	// Spread by load. Every node holds the snapshot now: with nothing
	// running, restores one after another find no node nearer than another
	// and go one to each, to the least loaded. The sections below use the
	// sandbox each node runs.
	// Leaves: one sandbox on each node.
	remove(first.ID, second.ID, third.ID, inR2.ID)
	spread := map[string]api.Sandbox{} // by node
	for i := range nodes {
		f.settle()
		sb := restore([]*client.Client{admin1, admin2}[i%2], snap, api.SandboxSpec{})
		spread[f.node(sb.ID)] = sb
	}
	if len(spread) != len(nodes) {
		t.Fatalf("%d restores went to the nodes %v; want one on each", len(nodes), slices.Sorted(maps.Keys(spread)))
	}
	f.logPhase("spread by load")

	// A cordoned node takes no new sandboxes and keeps its own.
	if out, errOut, code := c1.cli(t, nil, "node", "cordon", home); code != 0 || out != home+" cordoned\n" {
		t.Fatalf("warren node cordon: exit %d %q %s", code, out, errOut)
	}
	sb := restore(admin1, snap, api.SandboxSpec{})
	if n := f.node(sb.ID); n == home {
		t.Errorf("a restore with %s cordoned went to it", home)
	}
	if _, err := admin1.Exec(ctx, spread[home].ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Errorf("exec in a sandbox of the cordoned node: %v", err)
	}
	if out, errOut, code := c1.cli(t, nil, "node", "uncordon", home); code != 0 || out != home+" active\n" {
		t.Fatalf("warren node uncordon: exit %d %q %s", code, out, errOut)
	}
	remove(sb.ID)
	f.logPhase("cordon")

	// A tenant's quota holds in the whole fleet, through either replica,
	// and holds no other tenant. A tenant's key reaches no node: without
	// the fleet's certificate the TLS handshake fails before any request
	// is read.
	keys := map[string]string{}
	for _, tenant := range []string{quotaTenant, otherTenant} {
		k, err := admin1.CreateKey(ctx, api.CreateKeyRequest{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		keys[tenant] = k.Key
	}
	if err := admin2.SetQuota(ctx, quotaTenant, api.Quota{Sandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	held := restore(client.New(c1.url, keys[quotaTenant]), snaps[quotaTenant], api.SandboxSpec{})
	for _, c := range []*daemon{c1, c2} {
		_, err := client.New(c.url, keys[quotaTenant]).Restore(ctx, snaps[quotaTenant], api.RestoreRequest{})
		if !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "1 sandboxes in the fleet") {
			t.Errorf("a restore past the tenant's quota through %s: %v; want too_many_requests naming the quota", c.url, err)
		}
	}
	other := restore(client.New(c2.url, keys[otherTenant]), snaps[otherTenant], api.SandboxSpec{})
	remove(held.ID, other.ID)
	// E2B's API through the fleet: a create through one replica (a
	// snapshot is a template to E2B), the sandbox's envd through the
	// other, which sends it to the sandbox's node, and a kill.
	e2bFleet(t, c1.url, c2.url, keys[otherTenant], snaps[otherTenant])
	for id, nd := range f.nodes {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
		req, _ := http.NewRequest("GET", nd.url+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+keys[quotaTenant])
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("node %s answered a tenant's key with %d; want the handshake refused", id, resp.StatusCode)
		}
	}
	f.logPhase("tenants")

	// A template through the fleet: made through one replica on some
	// node (its config written into a snapshot there), its sandboxes made
	// through the other on every node, each fetching the version's layer
	// from the bucket where it lacks it.
	tpl, err := admin1.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "fleet-tpl", FromSnapshot: snap,
		Config: &api.TemplateConfig{Env: map[string]string{"FROM": "template"}}}, nil)
	if err != nil {
		t.Fatalf("a template through the fleet: %v", err)
	}
	tplNodes := map[string]bool{}
	var kids []string
	for range nodes {
		f.settle()
		kid, err := admin2.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl.Ref})
		if err != nil {
			t.Fatalf("create from %s through the other replica: %v", tpl.Ref, err)
		}
		kids = append(kids, kid.ID)
		tplNodes[f.node(kid.ID)] = true
		res, err := admin2.Exec(ctx, kid.ID, api.ExecRequest{Shell: "cat /root/mark; echo $FROM"})
		if err != nil || res.Stdout != "from the snapshot\ntemplate\n" {
			t.Errorf("a sandbox of %s on %s: %+v, %v", tpl.Ref, f.node(kid.ID), res, err)
		}
	}
	// Placed by load, they spread: most nodes fetched the version.
	if len(tplNodes) < 2 {
		t.Errorf("the sandboxes of %s ran on %v only", tpl.Ref, slices.Sorted(maps.Keys(tplNodes)))
	}
	remove(kids...)
	f.settle()
	f.logPhase("templates")

	// kill -9 of a control replica mid-restore: the retry with the same
	// idempotency key, through the other replica, gets the first restore's
	// answer. c2 stays dead.
	mark := map[string]string{"retried": "yes"}
	body, _ := json.Marshal(api.RestoreRequest{SandboxSpec: api.SandboxSpec{Metadata: mark}})
	req, _ := http.NewRequest("POST", c2.url+"/v1/snapshots/"+snap+"/restore", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c1.key)
	req.Header.Set("Idempotency-Key", "restore-once")
	go http.DefaultClient.Do(req)
	wait.For(t, 30*time.Second, "the restore to be under way on a node", func() bool {
		return len(f.marked(mark)) > 0
	})
	c2.kill()
	again, err := admin1.Restore(client.WithIdempotencyKey(ctx, "restore-once"), snap, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Metadata: mark}})
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
	remove(again[0].ID)
	f.logPhase("a replica killed mid-restore")

	// kill -9 of a node: it is fenced, what it ran is recorded failed, and
	// new restores go to the other nodes. It comes back on its data
	// directory: a new lease, and the copy of the sandbox it still ran is
	// gone.
	victim := spread[home]
	cg := filepath.Join("/sys/fs/cgroup/memory/warren", victim.ID)
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
		sb, err := admin1.GetSandbox(ctx, victim.ID)
		return err == nil && sb.State == api.StateFailed && strings.Contains(sb.Error, "stopped answering")
	})
	if n := f.node(restore(admin1, snap, api.SandboxSpec{}).ID); n == home {
		t.Errorf("a restore after the fence went to the fenced node %s", n)
	}
	start(home)
	n, err := f.st.GetNode(ctx, home)
	if err != nil || n.State != store.NodeActive {
		t.Fatalf("the node after its restart: %+v, %v", n, err)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Errorf("the fenced sandbox's cgroup %s is still there after its node restarted", cg)
	}
	if sb, err := admin1.GetSandbox(ctx, victim.ID); err != nil || sb.State != api.StateFailed {
		t.Errorf("the fenced sandbox after its node restarted: %+v, %v; want it still failed", sb, err)
	}
	f.logPhase("a node killed")
}
