package e2e

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"testing"

	"warren/api"
	"warren/client"
)

// TestSnapshotNames: a snapshot taken with a name is listed, found,
// restored and deleted by it, through the CLI and the API; the name is its
// tenant's alone (another tenant neither sees it nor is kept from taking
// it), refused to a second snapshot of the tenant while the first lives,
// and free again once that one is deleted.
func TestSnapshotNames(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	// The suite's data directory outlives a run: a name of this run's own.
	name := "e2e-named-" + rand.Text()[:10]
	forget := func(cl *client.Client, id string) {
		t.Cleanup(func() { cl.DeleteSnapshot(context.Background(), id) })
	}
	id := shared.newSandbox(t)
	shared.sh(t, id, `mkdir -p /root/work && echo named > /root/work/a.txt`)
	out, errOut, code := shared.cli(t, nil, "snapshot", "--wait", "--name", name, id)
	sn := strings.TrimSuffix(out, "\n")
	if code != 0 || !snapshotIDRe.MatchString(sn) {
		t.Fatalf("warren snapshot --name %s: exit %d, stdout %q, stderr %q; want the snapshot's ID", name, code, out, errOut)
	}
	forget(c, sn)
	if got, err := c.GetSnapshot(ctx, name); err != nil || got.ID != sn || got.Name != name || got.State != api.SnapshotDurable {
		t.Fatalf("get %s: %+v, %v; want durable %s of that name", name, got, err, sn)
	}
	out, _, code = shared.cli(t, nil, "snapshot", "ls", id)
	if code != 0 || !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) > 1 && f[0] == sn && f[1] == name
	}) {
		t.Errorf("snapshot ls: exit %d\n%s\nwant %s listed with its name", code, out, sn)
	}

	t.Log("a second snapshot of the tenant cannot take the name; a malformed one is refused")
	if _, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{Name: name}); !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), sn) {
		t.Errorf("a second snapshot named %s: %v, want a conflict naming %s", name, err, sn)
	}
	if _, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{Name: "sn-" + name}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("a snapshot named like an ID: %v, want bad_request", err)
	}

	t.Log("restored by name, through the CLI and the API")
	kid := shared.restore(t, name, 1)[0]
	if got := shared.sh(t, kid, "cat /root/work/a.txt"); got != "named\n" {
		t.Errorf("the file in the sandbox restored by name: %q", got)
	}
	sbs, err := c.Restore(ctx, name, api.RestoreRequest{})
	if err != nil || len(sbs) != 1 || sbs[0].Origin != sn {
		t.Fatalf("restore %s: %+v, %v; want one sandbox from %s", name, sbs, err, sn)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sbs[0].ID) })
	child, err := c.Snapshot(ctx, kid, api.CreateSnapshotRequest{Name: name + "-child", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	forget(c, child.ID)
	if ancestors, err := c.Lineage(ctx, name+"-child"); err != nil || len(ancestors) != 1 || ancestors[0] != sn {
		t.Errorf("lineage of %s-child: %v, %v; want [%s]", name, ancestors, err, sn)
	}

	t.Log("another tenant neither sees the name nor is kept from taking it")
	other := tenantClient(t, "snapshot-names")
	if _, err := other.GetSnapshot(ctx, name); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("another tenant's get of %s: %v, want not_found", name, err)
	}
	if _, err := other.Restore(ctx, name, api.RestoreRequest{}); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("another tenant's restore of %s: %v, want not_found", name, err)
	}
	osb, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.DeleteSandbox(context.Background(), osb.ID) })
	theirs, err := other.Snapshot(ctx, osb.ID, api.CreateSnapshotRequest{Name: name})
	if err != nil || theirs.ID == sn || theirs.Name != name {
		t.Fatalf("another tenant's snapshot named %s: %+v, %v", name, theirs, err)
	}
	forget(other, theirs.ID)

	t.Log("deleted by name, the name is free again")
	if _, errOut, code := shared.cli(t, nil, "snapshot", "rm", name); code != 0 {
		t.Fatalf("snapshot rm %s: exit %d: %s", name, code, errOut)
	}
	for _, ref := range []string{name, sn} {
		if _, err := c.GetSnapshot(ctx, ref); !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("get %s after the delete: %v, want not_found", ref, err)
		}
	}
	if got, err := other.GetSnapshot(ctx, name); err != nil || got.ID != theirs.ID {
		t.Errorf("the other tenant's %s after the delete: %+v, %v; want %s", name, got, err, theirs.ID)
	}
	again, err := c.Snapshot(ctx, id, api.CreateSnapshotRequest{Name: name})
	if err != nil || again.ID == sn {
		t.Fatalf("the name taken again: %+v, %v", again, err)
	}
	forget(c, again.ID)
}
