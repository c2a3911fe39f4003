package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// snapshotOf snapshots id through the CLI with args and returns the ID it
// printed.
func snapshotOf(t *testing.T, id string, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, nil, append(append([]string{"snapshot"}, args...), id)...)
	snap := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(snap, "sn-") || stdout != snap+"\n" {
		t.Fatalf("snapshot %s: exit %d stdout %q stderr %q, want the ID alone", id, code, stdout, stderr)
	}
	return snap
}

func TestSnapshotCommands(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	state := func(snap string) string {
		sn, err := w.Manager.GetSnapshot(ctx, tenant, snap)
		if err != nil {
			t.Fatal(err)
		}
		return sn.State
	}

	// Without --wait it answers once the disk is cloned; the upload goes on.
	first := snapshotOf(t, id)
	wait.For(t, 30*time.Second, "the first snapshot to be durable", func() bool { return state(first) == api.SnapshotDurable })
	second := snapshotOf(t, id, "--wait")
	if st := state(second); st != api.SnapshotDurable {
		t.Errorf("after snapshot --wait: %s, want durable", st)
	}
	var sn api.Snapshot
	if code, stdout, _ := runCLI(t, nil, "snapshot", "get", second); code != 0 || json.Unmarshal([]byte(stdout), &sn) != nil ||
		sn.ID != second || sn.SandboxID != id || sn.Parent != first || sn.Scope != "root" {
		t.Errorf("snapshot get: exit %d stdout %q, want the second snapshot, child of the first", code, stdout)
	}
	want, _ := w.Manager.GetSnapshot(ctx, tenant, second)
	if !reflect.DeepEqual(sn, viaJSON(t, want)) {
		t.Errorf("snapshot get: %+v, want the manager's %+v", sn, want)
	}

	// ls is a tree: the second under the first.
	code, stdout, _ := runCLI(t, nil, "snapshot", "ls", id)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], first+" ") ||
		!strings.HasPrefix(lines[2], "  "+second+" ") || !strings.Contains(lines[2], " durable ") {
		t.Errorf("snapshot ls: exit %d stdout %q, want the second indented under the first", code, stdout)
	}
	if code, stdout, _ := runCLI(t, nil, "snapshot", "lineage", second); code != 0 || !strings.HasPrefix(stdout, first+"\n") {
		t.Errorf("snapshot lineage: exit %d stdout %q, want its parent first", code, stdout)
	}

	if code, _, stderr := runCLI(t, nil, "snapshot", "rm", second); code != 0 {
		t.Errorf("snapshot rm: exit %d stderr %q", code, stderr)
	}
	if _, err := w.Manager.GetSnapshot(ctx, tenant, second); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("the snapshot after rm: %v, want not found", err)
	}
	if code, _, stderr := runCLI(t, nil, "snapshot", "get", second); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("snapshot get after rm: exit %d stderr %q", code, stderr)
	}
}

// TestSnapshotNames: --name names a snapshot, which ls shows and get,
// restore and rm take for its ID; a name that is taken or malformed is
// refused, saying why; rm frees it.
func TestSnapshotNames(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	first := snapshotOf(t, id)
	named := snapshotOf(t, id, "--wait", "--name", "nightly")
	code, stdout, _ := runCLI(t, nil, "snapshot", "ls", id)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(lines) != 3 || strings.Fields(lines[0])[1] != "NAME" ||
		!strings.HasPrefix(lines[1], first+" ") || strings.Fields(lines[1])[1] != "-" ||
		strings.Fields(lines[2])[0] != named || strings.Fields(lines[2])[1] != "nightly" {
		t.Errorf("snapshot ls: exit %d stdout %q, want a NAME column with nightly", code, stdout)
	}
	var sn api.Snapshot
	if code, stdout, _ := runCLI(t, nil, "snapshot", "get", "nightly"); code != 0 || json.Unmarshal([]byte(stdout), &sn) != nil ||
		sn.ID != named || sn.Name != "nightly" {
		t.Errorf("snapshot get nightly: exit %d stdout %q, want %s", code, stdout, named)
	}
	for _, tc := range []struct{ name, why string }{
		{"nightly", "taken by snapshot " + named},
		{"sn-nightly", `cannot start with "sn-"`},
		{"night/ly", "only letters"},
	} {
		if code, _, stderr := runCLI(t, nil, "snapshot", "--name", tc.name, id); code != 1 || !strings.Contains(stderr, tc.why) {
			t.Errorf("snapshot --name %s: exit %d stderr %q, want it to say %q", tc.name, code, stderr, tc.why)
		}
	}

	code, stdout, stderr := runCLI(t, nil, "restore", "nightly")
	if rid := strings.TrimSpace(stdout); code != 0 || !strings.HasPrefix(rid, "sb-") || w.get(rid).Origin != named {
		t.Errorf("restore nightly: exit %d stdout %q stderr %q, want a sandbox from %s", code, stdout, stderr, named)
	}
	if code, _, stderr := runCLI(t, nil, "restore", "weekly"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("restore of an unknown name: exit %d stderr %q", code, stderr)
	}

	if code, _, stderr := runCLI(t, nil, "snapshot", "rm", "nightly"); code != 0 {
		t.Fatalf("snapshot rm nightly: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "snapshot", "get", "nightly"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("snapshot get nightly after rm: exit %d stderr %q", code, stderr)
	}
	if again := snapshotOf(t, id, "--name", "nightly"); again == named {
		t.Errorf("nightly again is %s, the deleted snapshot", again)
	}
}

func TestRestore(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	snap := snapshotOf(t, id, "--wait")
	code, stdout, stderr := runCLI(t, nil, "restore", "--count", "2", "--env", "X=1", snap)
	ids := strings.Fields(stdout)
	if code != 0 || len(ids) != 2 || ids[0] == ids[1] || stdout != ids[0]+"\n"+ids[1]+"\n" {
		t.Fatalf("restore --count 2: exit %d stdout %q stderr %q, want two IDs, one a line", code, stdout, stderr)
	}
	for _, rid := range ids {
		if sb := w.get(rid); sb.State != api.StateRunning || sb.Origin != snap || sb.Env["X"] != "1" {
			t.Errorf("restored %+v, want it running from %s with X=1", sb, snap)
		}
	}
	if code, stdout, _ := runCLI(t, nil, "exec", ids[1], "--", "sh", "-c", "echo $X"); code != 0 || stdout != "1\n" {
		t.Errorf("exec in a restored sandbox: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "restore", "--count", "0", snap); code != 2 || !strings.Contains(stderr, "usage: warren restore") {
		t.Errorf("restore --count 0: exit %d stderr %q, want the usage", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "restore", "sn-nope"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("restore of an unknown snapshot: exit %d stderr %q", code, stderr)
	}
}

// TestGC: only an admin collects; what a deleted snapshot held is spared
// while it is younger than the grace period, and collected with --grace 0.
func TestGC(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	snap := snapshotOf(t, id, "--wait")
	if code, _, stderr := runCLI(t, nil, "snapshot", "rm", snap); code != 0 {
		t.Fatalf("snapshot rm: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "gc"); code != 1 || stderr != "warren: gc: this route needs an admin key\n" {
		t.Errorf("gc with a tenant's key: exit %d stderr %q", code, stderr)
	}
	w.asAdmin()
	gc := func(args ...string) api.GCResult {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, append([]string{"gc"}, args...)...)
		var res api.GCResult
		if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil {
			t.Fatalf("gc %q: exit %d stdout %q stderr %q", args, code, stdout, stderr)
		}
		return res
	}
	if res := gc(); res.ManifestsDeleted != 0 {
		t.Errorf("gc within the default grace: %+v, want nothing deleted", res)
	}
	// A base layer lives only through the snapshots above it: the
	// template's goes with the one snapshot made from it.
	if res := gc("--grace", "0"); res.ManifestsDeleted != 2 {
		t.Errorf("gc --grace 0: %+v, want the manifests of the deleted snapshot and of its template's base layer collected", res)
	}
	if res := gc("--grace", "0"); res.ManifestsDeleted != 0 {
		t.Errorf("a second gc: %+v, want nothing left to collect", res)
	}
}
