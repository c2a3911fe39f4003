//go:build linux

package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	controlpb "warren/internal/agent/pb/control"
)

func TestFreezeThaw(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs)")
	}
	const freezeTimeout = 2 * time.Second
	conn, _ := startAgent(t, agent.Options{FreezeTimeout: freezeTimeout})
	ctx := context.Background()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	// The agent runs the setup itself: nothing else in this process may wait
	// for children while it reaps them.
	r := run(t, conn, sh("cd "+dir+" && truncate -s 64M fs.img && mkfs.ext4 -q -F fs.img && mkdir mnt && mount -o loop fs.img mnt"))
	if r.end.GetExitCode() != 0 {
		t.Skipf("cannot loop-mount an ext4 image here: %s", r.stderr)
	}
	t.Cleanup(func() {
		_, _ = conn.Control.Thaw(ctx, connect.NewRequest(&controlpb.ThawRequest{Path: mnt}))
		run(t, conn, cmd("umount", mnt))
	})
	freeze := func(p string) error {
		_, err := conn.Control.Freeze(ctx, connect.NewRequest(&controlpb.FreezeRequest{Path: p}))
		return err
	}
	thaw := func(p string) error {
		_, err := conn.Control.Thaw(ctx, connect.NewRequest(&controlpb.ThawRequest{Path: p}))
		return err
	}
	// startWrite creates a file on the mount in the background; the channel
	// gets the result when the write went through.
	startWrite := func(name string) <-chan result {
		done := make(chan result, 1)
		go func() {
			var out result
			end, _, err := conn.Run(ctx, sh("echo hi > "+filepath.Join(mnt, name)), nil, nil)
			if err == nil {
				out.end = end
			}
			done <- out
		}()
		return done
	}

	if err := freeze(mnt); err != nil {
		t.Fatal(err)
	}
	wantCode(t, freeze(mnt), connect.CodeFailedPrecondition)
	wantCode(t, freeze(mnt+"/."), connect.CodeFailedPrecondition)
	written := startWrite("f1")
	select {
	case <-written:
		t.Fatal("a write went through while frozen")
	case <-time.After(500 * time.Millisecond):
	}
	if err := thaw(mnt); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-written:
		if r.end.GetExitCode() != 0 {
			t.Fatalf("write after thaw: %v", r.end)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not go through after thaw")
	}
	if data, err := os.ReadFile(filepath.Join(mnt, "f1")); err != nil || string(data) != "hi\n" {
		t.Errorf("f1: %q %v", data, err)
	}
	wantCode(t, thaw(mnt), connect.CodeFailedPrecondition)

	// Left frozen, it thaws by itself after FreezeTimeout.
	start := time.Now()
	if err := freeze(mnt); err != nil {
		t.Fatal(err)
	}
	written = startWrite("f2")
	select {
	case r := <-written:
		if r.end.GetExitCode() != 0 {
			t.Fatalf("write after the automatic thaw: %v", r.end)
		}
		if waited := time.Since(start); waited < freezeTimeout-200*time.Millisecond {
			t.Errorf("write went through after %v, before the freeze timeout", waited)
		}
	case <-time.After(freezeTimeout + 10*time.Second):
		t.Fatal("not thawed by itself")
	}
	wantCode(t, thaw(mnt), connect.CodeFailedPrecondition)

	wantCode(t, freeze("/proc"), connect.CodeFailedPrecondition)
	wantCode(t, freeze("/../x"), connect.CodeInvalidArgument)
	wantCode(t, freeze(filepath.Join(dir, "missing")), connect.CodeNotFound)
}
