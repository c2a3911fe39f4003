package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/blob/s3test"
	"warren/internal/wait"
)

// snapshotState is what the check command prints in a sandbox: the files
// of the work tree and their checksums.
const checkState = `cd /root/work && ls && cat *.txt && md5sum rand`

var snapshotIDRe = regexp.MustCompile(`^sn-[a-z0-9]+$`)

// snapshot takes a snapshot of sandbox id through the CLI, waiting until it
// is durable, and returns its ID.
func (d *daemon) snapshot(t testing.TB, id string) string {
	t.Helper()
	out, errOut, code := d.cli(t, nil, "snapshot", "--wait", id)
	if code != 0 {
		t.Fatalf("warren snapshot --wait %s: exit %d: %s\ndaemon log:\n%s", id, code, errOut, d.log.tail(30))
	}
	sn := strings.TrimSuffix(out, "\n")
	if !snapshotIDRe.MatchString(sn) {
		t.Fatalf("warren snapshot printed %q, want the snapshot ID alone", out)
	}
	return sn
}

// restore starts count sandboxes from snapshot sn through the CLI and
// deletes them when the test ends.
func (d *daemon) restore(t testing.TB, sn string, count int) []string {
	t.Helper()
	out, errOut, code := d.cli(t, nil, "restore", "--count", fmt.Sprint(count), sn)
	if code != 0 {
		t.Fatalf("warren restore %s: exit %d: %s\ndaemon log:\n%s", sn, code, errOut, d.log.tail(30))
	}
	ids := strings.Fields(out)
	if len(ids) != count {
		t.Fatalf("warren restore --count %d printed %q", count, out)
	}
	for _, id := range ids {
		t.Cleanup(func() { d.client().DeleteSandbox(context.Background(), id) })
	}
	return ids
}

// sh runs a shell command in sandbox id and returns its stdout; a non-zero
// exit fails the test.
func (d *daemon) sh(t testing.TB, id, cmd string) string {
	t.Helper()
	res, err := d.client().Exec(context.Background(), id, api.ExecRequest{Shell: cmd})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", cmd, id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: exit %d: %s", cmd, id, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// treeSearch builds a snapshot tree on daemon a: S0 of a sandbox; three
// sandboxes restored from S0, each changed its own way and snapshotted (S1,
// S2, S3); one restored from S1, changed and snapshotted again (S1a). It
// returns what checkState printed in each sandbox when it was snapshotted.
func treeSearch(t *testing.T, a *daemon) map[string]string {
	want := map[string]string{}
	root := a.newSandbox(t)
	a.sh(t, root, `mkdir -p /root/work && cd /root/work && echo base > base.txt &&
		head -c 3000000 /dev/urandom > rand`)
	s0 := a.snapshot(t, root)
	want[s0] = a.sh(t, root, checkState)
	// The sandbox goes on after its snapshot; S0 must not see this.
	a.sh(t, root, `echo later > /root/work/base.txt`)

	kids := a.restore(t, s0, 3)
	changes := []string{
		`echo one > branch.txt && printf 'AAAA' | dd of=rand bs=1 seek=100 conv=notrunc 2>/dev/null`,
		`echo two > branch.txt && rm base.txt && head -c 1000000 /dev/urandom >> rand`,
		`echo three > branch.txt && truncate -s 4096 rand`,
	}
	var branches []string
	for i, kid := range kids {
		a.sh(t, kid, "cd /root/work && "+changes[i])
		sn := a.snapshot(t, kid)
		want[sn] = a.sh(t, kid, checkState)
		branches = append(branches, sn)
	}
	grandkid := a.restore(t, branches[0], 1)[0]
	a.sh(t, grandkid, `cd /root/work && echo deeper > deeper.txt && head -c 500000 /dev/urandom > rand`)
	s1a := a.snapshot(t, grandkid)
	want[s1a] = a.sh(t, grandkid, checkState)

	// Lineage: S0 → S1 → S1a.
	c := a.client()
	sn, err := c.GetSnapshot(context.Background(), s1a)
	if err != nil {
		t.Fatal(err)
	}
	lineage, err := c.Lineage(context.Background(), s1a)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Parent != branches[0] || !slices.Equal(lineage, []string{branches[0], s0}) || sn.State != api.SnapshotDurable {
		t.Errorf("S1a = %+v, lineage %v; want parent %s and lineage [%s %s], durable", sn, lineage, branches[0], branches[0], s0)
	}
	return want
}

// checkRestores restores every snapshot in want on daemon d and compares
// the restored sandbox's files with what they were when it was taken.
func checkRestores(t *testing.T, d *daemon, want map[string]string) {
	t.Helper()
	for sn, state := range want {
		id := d.restore(t, sn, 1)[0]
		if got := d.sh(t, id, checkState); got != state {
			t.Errorf("restored %s on %s:\n%s\nwant:\n%s", sn, d.dataDir, got, state)
		}
		sb, err := d.client().GetSandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Origin != sn {
			t.Errorf("sandbox %s restored from %s has origin %q", id, sn, sb.Origin)
		}
		if host := d.sh(t, id, "hostname"); host != id+"\n" {
			t.Errorf("sandbox %s restored from %s has hostname %q, want its own ID", id, sn, host)
		}
		// Checked: it goes now rather than idle (a gvisor sandbox's
		// Sentry takes CPU) until the test ends.
		if err := d.client().DeleteSandbox(context.Background(), id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}

// The tree search: snapshot, branch three ways, change and
// snapshot each branch and one grandchild; every snapshot restores with
// every file right, on this node and on a second node (another data
// directory) that shares only the blob store.
func TestSnapshotTreeSearch(t *testing.T) {
	need(t)
	want := treeSearch(t, shared)
	checkRestores(t, shared, want)

	// The second node has its own admin key, of the same tenant.
	other := startNode(t, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"))
	checkRestores(t, other, want)
}

// The same tree search through an S3-compatible server (versitygw): the
// shared node, restarted to store its snapshots there, builds the tree; a
// second node restores it from S3 alone.
func TestSnapshotTreeSearchS3(t *testing.T) {
	need(t)
	srv := s3test.Start(t)
	// Back on its own store after the sandboxes' own cleanups, which
	// delete them through a.
	a := sharedOnBucket(t, srv)
	want := treeSearch(t, a)
	checkRestores(t, startNode(t, srv.Env, "--blob-store", srv.URL), want)
}

// A snapshot acknowledged as pending becomes durable even when the daemon
// is killed (-9) right after it answered: the next daemon resumes the
// upload. A restore killed half-way leaves nothing behind.
func TestSnapshotSurvivesDaemonKill(t *testing.T) {
	need(t)
	ctx := context.Background()
	id := shared.newSandbox(t)
	shared.sh(t, id, `mkdir -p /root/work && cd /root/work && echo x > a.txt && head -c 40000000 /dev/urandom > rand`)
	want := shared.sh(t, id, checkState)
	sn, err := shared.client().Snapshot(ctx, id, api.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sn.State != api.SnapshotPending {
		t.Logf("snapshot already %s when acknowledged", sn.State)
	}
	shared.kill()
	if shared, err = startDaemon(shared.dataDir, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 2*time.Minute, "the snapshot to become durable after a restart", func() bool {
		got, err := shared.client().GetSnapshot(ctx, sn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.SnapshotFailed {
			t.Fatalf("snapshot failed after a restart: %s", got.Error)
		}
		return got.State == api.SnapshotDurable
	})
	checkRestores(t, shared, map[string]string{sn.ID: want})

	for _, delay := range []time.Duration{10 * time.Millisecond, 60 * time.Millisecond} {
		t.Run(fmt.Sprintf("restore killed after %v", delay), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := shared.client().Restore(ctx, sn.ID, api.RestoreRequest{Count: 4})
				done <- err
			}()
			time.Sleep(delay)
			shared.kill()
			<-done
			var err error
			if shared, err = startDaemon(shared.dataDir, "", time.Minute); err != nil {
				t.Fatal(err)
			}
			checkConsistent(t)
			// Restored sandboxes that made it are adopted: clean them up.
			sbs, _ := shared.client().ListSandboxes(ctx)
			for _, sb := range sbs {
				if sb.Origin == sn.ID {
					shared.client().DeleteSandbox(ctx, sb.ID)
				}
			}
		})
	}
}

// Deleted snapshots cannot be restored; the collector frees what only they
// used and keeps what a remaining snapshot needs.
func TestSnapshotDeleteAndGC(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	id := shared.newSandbox(t)
	shared.sh(t, id, `mkdir -p /root/work && cd /root/work && echo keep > a.txt && head -c 2000000 /dev/urandom > rand`)
	parent := shared.snapshot(t, id)
	shared.sh(t, id, `head -c 5000000 /dev/urandom > /root/work/only-in-child`)
	child := shared.snapshot(t, id)

	// Deleting the parent hides it but keeps its layer: the child needs it.
	if _, errOut, code := shared.cli(t, nil, "snapshot", "rm", parent); code != 0 {
		t.Fatalf("snapshot rm: %s", errOut)
	}
	if _, err := c.Restore(ctx, parent, api.RestoreRequest{}); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("restore of a deleted snapshot: %v, want not_found", err)
	}
	if _, errOut, code := shared.cli(t, nil, "gc", "--grace", "0"); code != 0 {
		t.Fatalf("gc: %s", errOut)
	}
	kid := shared.restore(t, child, 1)[0]
	if got := shared.sh(t, kid, "cd /root/work && cat a.txt && md5sum rand && wc -c < only-in-child"); !strings.HasPrefix(got, "keep\n") || !strings.HasSuffix(got, "5000000\n") {
		t.Errorf("child restored after its parent was deleted and collected: %q", got)
	}

	// Deleting the child too frees at least its own 5 MB of chunks.
	if err := c.DeleteSnapshot(ctx, child); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	res, err := c.GC(ctx, api.GCRequest{GraceSeconds: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if res.ManifestsDeleted < 2 || res.BytesFreed < 5000000 {
		t.Errorf("gc after deleting both: %+v, want at least 2 manifests and 5 MB freed", res)
	}
	if _, err := c.GetSnapshot(ctx, child); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("get of a deleted snapshot: %v, want not_found", err)
	}
	// A tenant key cannot collect.
	if _, err := tenantClient(t, "gc-tenant").GC(ctx, api.GCRequest{}); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("gc with a tenant key: %v, want forbidden", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(shared.dataDir, "disks", "snapshots", "*.tmp-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary cache files left: %v", leftovers)
	}
	if _, err := os.Stat(filepath.Join(shared.dataDir, "disks", "snapshots", child+".img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache image of a deleted snapshot: %v, want it gone", err)
	}
}

// Tenant b can neither see nor touch tenant a's snapshots (404, as for a
// missing one), nor snapshot a's sandbox.
func TestSnapshotTenants(t *testing.T) {
	need(t)
	ctx := context.Background()
	a, b := tenantClient(t, "snap-a"), tenantClient(t, "snap-b")
	sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.DeleteSandbox(ctx, sb.ID)
	sn, err := a.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.DeleteSnapshot(ctx, sn.ID)
	notFound := func(what string, err error) {
		t.Helper()
		if !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("tenant b, %s of tenant a's: %v, want not_found", what, err)
		}
	}
	_, err = b.GetSnapshot(ctx, sn.ID)
	notFound("get snapshot", err)
	_, err = b.Restore(ctx, sn.ID, api.RestoreRequest{})
	notFound("restore", err)
	notFound("delete snapshot", b.DeleteSnapshot(ctx, sn.ID))
	_, err = b.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
	notFound("snapshot", err)
	_, err = b.ListSnapshots(ctx, sb.ID)
	notFound("list snapshots", err)
	list, err := b.ListSnapshots(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("tenant b lists %d snapshots, want none", len(list))
	}
	if got, err := a.GetSnapshot(ctx, sn.ID); err != nil || got.State != api.SnapshotDurable {
		t.Errorf("tenant a's snapshot after b's attempts: %+v %v", got, err)
	}
	// Hostile restore requests are refused with a reason.
	for _, req := range []api.RestoreRequest{{Count: -1}, {Count: 100000}, {SandboxSpec: api.SandboxSpec{MemoryMB: 1}}, {SandboxSpec: api.SandboxSpec{Runtime: "qemu"}}} {
		if _, err := a.Restore(ctx, sn.ID, req); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("restore %+v: %v, want bad_request", req, err)
		}
	}
	for _, bad := range []string{"sn-", "sn-../../etc", "tb-0000", "../sn-x"} {
		if _, err := a.GetSnapshot(ctx, bad); !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("get snapshot %q: %v, want not_found", bad, err)
		}
	}
}

// TestSnapshotDedupeTenants is the regression test of the hardening issue,
// item 6: deduplication told one tenant what another stored. Tenant B
// snapshotted a 16 MiB secret file; tenant A snapshotted the same bytes and
// its snapshot reported stored_bytes 4,054, where a random control of the
// same size reported 16,781,616. Now chunks are deduplicated only within a
// tenant: A's copy costs what the control costs, and only A's own second
// copy of the bytes is deduplicated.
func TestSnapshotDedupeTenants(t *testing.T) {
	need(t)
	ctx := context.Background()
	owner, prober := tenantClient(t, "dedupe-owner"), tenantClient(t, "dedupe-prober")
	const size = 16 << 20
	random := func() []byte {
		b := make([]byte, size)
		rand.Read(b)
		return b
	}
	secret, control := random(), random()
	stored := func(c *client.Client, data []byte) int64 {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSandbox(ctx, sb.ID) })
		if _, err := c.WriteFile(ctx, sb.ID, "/root/secret", bytes.NewReader(data), 0, ""); err != nil {
			t.Fatal(err)
		}
		sn, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(ctx, sn.ID) })
		if sn.State != api.SnapshotDurable {
			t.Fatalf("snapshot %s is %s: %s", sn.ID, sn.State, sn.Error)
		}
		return sn.StoredBytes
	}
	t.Cleanup(func() {
		zero := int64(0)
		shared.client().GC(ctx, api.GCRequest{GraceSeconds: &zero})
	})
	theirs := stored(owner, secret)
	mine := stored(prober, secret)
	ctl := stored(prober, control)
	again := stored(prober, secret)
	t.Logf("stored_bytes: owner's secret %d, prober's copy %d, prober's control %d, prober's second copy %d", theirs, mine, ctl, again)
	if mine < size || mine < ctl*95/100 || mine > ctl*105/100 {
		t.Errorf("the prober's copy of another tenant's 16 MiB stored %d bytes, its random control %d: "+
			"want within 5%% of each other (no cross-tenant deduplication)", mine, ctl)
	}
	if again > 1<<20 {
		t.Errorf("the prober's second copy of its own 16 MiB stored %d bytes, want under 1 MiB (deduplicated)", again)
	}
}

// Write amplification of layers: incompressible data written in a sandbox
// costs about its own size in the blob store, and changing one byte of a
// 1 GiB file costs a few KiB, not the file. The figures go to
// docs/BENCHMARKS.md.
func TestSnapshotWriteAmplification(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	id := shared.newSandbox(t)
	t.Cleanup(func() {
		list, _ := c.ListSnapshots(ctx, id)
		for _, sn := range list {
			c.DeleteSnapshot(ctx, sn.ID)
		}
		zero := int64(0)
		c.GC(ctx, api.GCRequest{GraceSeconds: &zero})
	})
	stored := func(sn string) int64 {
		got, err := c.GetSnapshot(ctx, sn)
		if err != nil {
			t.Fatal(err)
		}
		return got.StoredBytes
	}
	shared.snapshot(t, id)
	const x = 64 << 20
	shared.sh(t, id, fmt.Sprintf(`head -c %d /dev/urandom > /root/x && sync`, x))
	s1 := stored(shared.snapshot(t, id))
	t.Logf("64 MiB of random data: %d bytes stored (%.4f x)", s1, float64(s1)/x)
	if s1 > x*105/100 {
		t.Errorf("64 MiB of random data stored %d bytes, more than 1.05 x", s1)
	}
	shared.sh(t, id, `head -c 1073741824 /dev/urandom > /root/big && sync`)
	shared.snapshot(t, id)
	shared.sh(t, id, `printf x | dd of=/root/big bs=1 seek=536870912 conv=notrunc 2>/dev/null && sync`)
	s3 := stored(shared.snapshot(t, id))
	t.Logf("one byte changed in a 1 GiB file: %d bytes stored", s3)
	if s3 > 16<<10 {
		t.Errorf("one byte changed in a 1 GiB file stored %d bytes, more than 16 KiB", s3)
	}
}

// A workspace disk is snapshotted on its own: a restore of it brings back
// /workspace on a fresh root from the template, and its lineage is its own.
func TestSnapshotWorkspace(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	id := shared.newSandbox(t, "--workspace", "256")
	got := shared.sh(t, id, `df -k /workspace | tail -1 | awk '{print ($2 > 200000)}'; echo work > /workspace/w.txt; echo sys > /root/r.txt; head -c 5000000 /dev/urandom > /workspace/rand; md5sum /workspace/rand`)
	if !strings.HasPrefix(got, "1\n") {
		t.Fatalf("/workspace is not a 256 MB disk of its own: %q", got)
	}
	sum := strings.TrimPrefix(got, "1\n")
	ws := snapshotScope(t, id, "workspace")
	root := shared.snapshot(t, id)
	for _, sn := range []struct{ id, scope string }{{ws, api.ScopeWorkspace}, {root, api.ScopeRoot}} {
		got, err := c.GetSnapshot(ctx, sn.id)
		if err != nil || got.Scope != sn.scope {
			t.Fatalf("snapshot %s: %+v %v, want scope %s", sn.id, got, err, sn.scope)
		}
	}
	// The workspace comes back; the root's change does not (fresh root).
	kid := shared.restore(t, ws, 1)[0]
	if got := shared.sh(t, kid, `cat /workspace/w.txt; md5sum /workspace/rand; test -e /root/r.txt && echo root-leaked || echo fresh-root`); got != "work\n"+sum+"fresh-root\n" {
		t.Errorf("restored workspace: %q", got)
	}
	sb, err := c.GetSandbox(ctx, kid)
	if err != nil || sb.WorkspaceOrigin != ws || sb.WorkspaceMB != 256 || sb.Origin != "" {
		t.Errorf("sandbox restored from a workspace snapshot: %+v %v", sb, err)
	}
	// The restored workspace snapshots again, as a child of ws.
	shared.sh(t, kid, `echo more >> /workspace/w.txt`)
	ws2 := snapshotScope(t, kid, "workspace")
	if got, err := c.GetSnapshot(ctx, ws2); err != nil || got.Parent != ws || got.ChangedBytes > 1<<20 {
		t.Errorf("second workspace snapshot: %+v %v, want parent %s and a small layer", got, err, ws)
	}
	// A root snapshot of a sandbox with a workspace restores the root only;
	// a workspace can be asked for, empty.
	kid2 := shared.restore(t, root, 1)[0]
	if got := shared.sh(t, kid2, `cat /root/r.txt; test -e /workspace/w.txt && echo ws || echo no-ws`); got != "sys\nno-ws\n" {
		t.Errorf("restored root: %q", got)
	}
	// Refused: a workspace snapshot of a sandbox without one, a bad scope,
	// and a workspace too small or too large.
	plain := shared.newSandbox(t)
	for _, scope := range []string{"workspace", "home"} {
		if _, err := c.Snapshot(ctx, plain, api.CreateSnapshotRequest{Scope: scope}); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("snapshot scope %q of a sandbox without a workspace: %v, want bad_request", scope, err)
		}
	}
	for _, mb := range []int64{-1, 1, 1 << 40} {
		if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{WorkspaceMB: mb}}); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("create with workspace_mb %d: %v, want bad_request", mb, err)
		}
	}
}

// snapshotScope takes a snapshot of one scope through the CLI, waiting
// until it is durable.
func snapshotScope(t *testing.T, id, scope string) string {
	t.Helper()
	out, errOut, code := shared.cli(t, nil, "snapshot", "--wait", "--scope", scope, id)
	if code != 0 {
		t.Fatalf("warren snapshot --scope %s: exit %d: %s\n%s", scope, code, errOut, shared.log.tail(20))
	}
	return strings.TrimSpace(out)
}
