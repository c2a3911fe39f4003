package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/blockserver"
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
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.Volume == nil || !strings.HasPrefix(got.Volume.Layer, "v-"+sb.ID+"-") ||
		got.Volume.CachedBytes == 0 || got.Volume.RecoveryPoint != nil {
		t.Errorf("GET of the always-on sandbox: %+v %v, want its volume's state (no cluster tier: nothing behind)", got, err)
	}

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

// A vm sandbox's always-on disk is attached by QEMU's own NBD client to the
// block server: an fsync in the guest reaches the volume's flush, a
// snapshot of it is durable at once, and a restore of that snapshot, also
// always-on, reads it lazily.
func TestAlwaysOnVM(t *testing.T) {
	needVM(t)
	ctx := context.Background()
	c := shared.client()
	always := api.SandboxSpec{Runtime: "vm", Persistence: api.PersistenceAlways}
	// A disk bigger than its template's: the block server grows its
	// filesystem before QEMU attaches it.
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{DiskMB: 5 << 10, SandboxSpec: always})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, shared.log.tail(30))
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if sock := filepath.Join(shared.dataDir, "volumes", sb.ID, "nbd.sock"); !fileIsSocket(sock) {
		t.Errorf("no NBD socket at %s", sock)
	}
	out := strings.TrimSpace(shared.sh(t, sb.ID, "df --output=size -B1M / | tail -1"))
	if mib, err := strconv.Atoi(out); err != nil || mib < 4900 || mib > 5120 {
		t.Errorf("the root filesystem has %q MiB, want about 5120", out)
	}
	before := readVolume(t, sb.ID).Layer
	shared.sh(t, sb.ID, "echo kept > /root/note && sync")
	if after := readVolume(t, sb.ID).Layer; after == before {
		t.Errorf("a sync in the guest wrote no layer (still %s): its FLUSH did not reach the volume", after)
	}
	sn, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
	if err != nil || sn.State != api.SnapshotDurable {
		t.Fatalf("snapshot: %+v %v, want durable at once", sn, err)
	}
	defer c.DeleteSnapshot(ctx, sn.ID)
	kids, err := c.Restore(ctx, sn.ID, api.RestoreRequest{SandboxSpec: always})
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, shared.log.tail(30))
	}
	defer c.DeleteSandbox(ctx, kids[0].ID)
	if got := shared.sh(t, kids[0].ID, "cat /root/note"); got != "kept\n" {
		t.Errorf("restored: %q", got)
	}
	if _, err := c.Fork(ctx, sb.ID, api.ForkRequest{}); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("live fork of an always-on vm: %v, want conflict", err)
	}
}

func fileIsSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// readVolume asks the shared daemon's block server about volume id.
func readVolume(t *testing.T, id string) blockserver.VolumeInfo {
	t.Helper()
	in, err := blockserver.NewClient(shared.dataDir).Volume(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}
