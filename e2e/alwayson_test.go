package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// An always-on sandbox's disk is served by the node's block server: a
// snapshot of it is durable when it answers, a restore of that snapshot
// starts at once on a disk read as it is wanted, the disk outlives kill -9
// of the daemon, and a delete removes the volume from the node and from the
// blob store.
func TestAlwaysOn(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	always := api.SandboxSpec{Persistence: api.PersistenceAlways}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: always})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, shared.log.tail(30))
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if sb.Persistence != api.PersistenceAlways {
		t.Fatalf("persistence %q, want %q", sb.Persistence, api.PersistenceAlways)
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	if mnt := filepath.Join(shared.dataDir, "volumes", sb.ID, "mnt"); !strings.Contains(string(mounts), mnt+" fuse") {
		t.Errorf("no FUSE mount at %s", mnt)
	}
	run := func(id, shell string) string {
		t.Helper()
		res, err := c.Exec(ctx, id, api.ExecRequest{Shell: shell})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q in %s: %+v %v\n%s", shell, id, res, err, shared.log.tail(20))
		}
		return res.Stdout
	}
	run(sb.ID, "echo kept > /root/note && head -c 8M /dev/urandom > /root/blob && sha256sum /root/blob > /root/blob.sum && sync")

	sn, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sn.State != api.SnapshotDurable {
		t.Fatalf("snapshot of an always-on disk is %s, want durable at once", sn.State)
	}
	defer c.DeleteSnapshot(ctx, sn.ID)
	// A restore of it, always-on too, reads the snapshot's blocks as it
	// wants them; one in snapshot mode materializes it as any other.
	for _, spec := range []api.SandboxSpec{always, {}} {
		kids, err := c.Restore(ctx, sn.ID, api.RestoreRequest{SandboxSpec: spec})
		if err != nil {
			t.Fatalf("restore (%q): %v\n%s", spec.Persistence, err, shared.log.tail(30))
		}
		kid := kids[0].ID
		if got := run(kid, "cat /root/note && sha256sum -c /root/blob.sum"); got != "kept\n/root/blob: OK\n" {
			t.Errorf("restored (%q): %q", spec.Persistence, got)
		}
		if err := c.DeleteSandbox(ctx, kid); err != nil {
			t.Fatal(err)
		}
	}

	// kill -9 of the daemon: the block server, apart from it, keeps the
	// disk attached, and the next daemon adopts the sandbox.
	shared.kill()
	shared, err = startDaemon(shared.dataDir, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c = shared.client()
	if got := run(sb.ID, "echo more >> /root/note && sync && cat /root/note"); got != "kept\nmore\n" {
		t.Errorf("after the daemon's restart: %q", got)
	}

	// Refusals: what an always-on disk cannot be (yet).
	for _, req := range []api.CreateSandboxRequest{
		{SandboxSpec: api.SandboxSpec{Persistence: "sometimes"}},
		{SandboxSpec: api.SandboxSpec{Persistence: api.PersistenceAlways, CheckpointEverySeconds: 60}},
	} {
		if _, err := c.CreateSandbox(ctx, req); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("create %+v: %v, want bad_request", req.SandboxSpec, err)
		}
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(shared.dataDir, "volumes", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the deleted sandbox's volume is left on the node: %v", err)
	}
	if layers, _ := filepath.Glob(filepath.Join(shared.dataDir, "blobs", "manifests", "v-"+sb.ID+"-*")); len(layers) != 0 {
		t.Errorf("the deleted sandbox's layers are left in the blob store: %v", layers)
	}
}
