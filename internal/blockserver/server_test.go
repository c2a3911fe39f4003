package blockserver

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"warren/internal/blob/file"
	"warren/internal/blockdev"
	"warren/internal/chunkstore"
)

// serveInProcess runs a block server on a temporary data directory with a
// file store as its object tier, until the test ends.
func serveInProcess(t *testing.T) (*Client, chunkstore.Store) {
	t.Helper()
	data := t.TempDir()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	object := chunkstore.Store{B: fs}
	s := New(Config{DataDir: data, Tiers: blockdev.Tiers{Object: object}, Volume: blockdev.Options{WritebackEvery: -1}})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, func() { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	return NewClient(data), object
}

func qemuIO(t *testing.T, sock string, cmds ...string) string {
	t.Helper()
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io is not installed (Debian's qemu-utils)")
	}
	args := []string{"-f", "raw"}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("qemu-io", append(args, "nbd+unix:///?socket="+sock)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "failed") {
		t.Fatalf("qemu-io %v: %v\n%s", cmds, err, out)
	}
	return string(out)
}

func TestServeOverNBD(t *testing.T) {
	ctx := context.Background()
	c, object := serveInProcess(t)
	in, err := c.Serve(ctx, "vol-a", VolumeRequest{SizeBytes: 8 << 20, Front: FrontNBD})
	if err != nil {
		t.Fatal(err)
	}
	if in.Front != FrontNBD || in.SizeBytes != 8<<20 || in.Layer != "v-vol-a-000000000000" {
		t.Fatalf("served: %+v", in)
	}
	// Serving it again answers the same.
	if again, err := c.Serve(ctx, "vol-a", VolumeRequest{Front: FrontNBD}); err != nil || again.Path != in.Path {
		t.Fatalf("served again: %+v, %v", again, err)
	}
	// QEMU's client writes; its flush makes a layer.
	qemuIO(t, in.Path, "write -P 0x5a 1M 256k", "flush")
	got, err := c.Volume(ctx, "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Layer != "v-vol-a-000000000001" || got.DirtyBytes != 0 {
		t.Fatalf("after QEMU's flush: %+v", got)
	}
	qemuIO(t, in.Path, "read -P 0x5a 1M 256k", "read -P 0 0 1M")
	snap, err := c.Snapshot(ctx, "vol-a", SnapshotRequest{ID: "sn-test"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.ID != "sn-test" || snap.SizeBytes != 8<<20 {
		t.Fatalf("snapshot: %+v", snap)
	}
	if err := c.Forget(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Volume(ctx, "vol-a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a forgotten volume: %v", err)
	}
	if ids, err := object.Manifests(ctx, "v-vol-a-"); err != nil || len(ids) != 0 {
		t.Fatalf("a forgotten volume's layers: %v, %v", ids, err)
	}
	// The snapshot outlives it.
	if _, err := object.Manifest(ctx, "sn-test"); err != nil {
		t.Fatalf("the snapshot of a forgotten volume: %v", err)
	}
}

func TestServeRefusals(t *testing.T) {
	ctx := context.Background()
	c, _ := serveInProcess(t)
	for _, tc := range []struct {
		id  string
		req VolumeRequest
	}{
		{"..", VolumeRequest{Front: FrontNBD, SizeBytes: 1 << 20}},
		{"UPPER", VolumeRequest{Front: FrontNBD, SizeBytes: 1 << 20}},
		{"ok", VolumeRequest{Front: "floppy", SizeBytes: 1 << 20}},
		{"ok", VolumeRequest{Front: FrontNBD, SizeBytes: 1000}},
		{"ok", VolumeRequest{Front: FrontNBD, Base: "no-such-snapshot"}},
		{"gone", VolumeRequest{Front: FrontNBD, Recover: true}},
	} {
		if _, err := c.Serve(ctx, tc.id, tc.req); err == nil {
			t.Errorf("Serve(%q, %+v) succeeded", tc.id, tc.req)
		}
	}
	if _, err := c.Serve(ctx, "ok", VolumeRequest{Front: FrontNBD, SizeBytes: 1 << 20}); err != nil {
		t.Fatalf("a good request after bad ones: %v", err)
	}
	if _, err := c.Serve(ctx, "ok", VolumeRequest{Front: FrontFile}); err == nil {
		t.Error("serving a volume through a second front end succeeded")
	}
}
