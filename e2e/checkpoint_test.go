//go:build linux

package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// TestCheckpointRestart: a sandbox with a checkpoint policy is checkpointed
// on time, each checkpoint replacing the one before; when it does not
// survive a daemon restart (its processes died with the host, here killed
// while the daemon was down), the restarted daemon starts it again from
// its last checkpoint under the same ID, saying so in its record; deleting
// it deletes its checkpoint.
func TestCheckpointRestart(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{CheckpointEverySeconds: 5}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.client().DeleteSandbox(context.Background(), sb.ID) })
	if sb.CheckpointEverySeconds != 5 {
		t.Errorf("the created sandbox's policy: %d s", sb.CheckpointEverySeconds)
	}
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo checkpointed > /root/mark && sync"}); err != nil {
		t.Fatal(err)
	}
	checkpoint := func(not string) api.Checkpoint {
		t.Helper()
		return *waitSandbox(t, c, sb.ID, 30*time.Second, "a checkpoint other than "+not, func(sb *api.Sandbox) bool {
			return sb.Checkpoint != nil && sb.Checkpoint.Snapshot != not
		}).Checkpoint
	}
	first := checkpoint("")
	second := checkpoint(first.Snapshot)
	if !second.At.After(first.At) {
		t.Errorf("checkpoints %s at %v, then %s at %v", first.Snapshot, first.At, second.Snapshot, second.At)
	}
	wait.For(t, 10*time.Second, "the first checkpoint to be deleted", func() bool {
		_, err := c.GetSnapshot(ctx, first.Snapshot)
		return api.IsCode(err, api.CodeNotFound)
	})
	if sn, err := c.GetSnapshot(ctx, second.Snapshot); err != nil || sn.State != api.SnapshotDurable || sn.SandboxID != sb.ID {
		t.Errorf("the last checkpoint: %+v, %v; want a durable snapshot of the sandbox", sn, err)
	}

	// The host "reboots": the daemon and the sandbox die together.
	pid := initPid(t, sb.ID)
	shared.kill()
	syscall.Kill(pid, syscall.SIGKILL)
	wait.For(t, 10*time.Second, "the sandbox's processes to go", func() bool { return countInCgroup(sb.ID) == 0 })
	lost := time.Now()
	shared, err = startDaemon(shared.dataDir, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c = shared.client()
	back := waitSandbox(t, c, sb.ID, 30*time.Second, "the sandbox to run again from its checkpoint", func(sb *api.Sandbox) bool {
		return sb.State == api.StateRunning
	})
	t.Logf("back %v after the restart began", time.Since(lost).Round(time.Millisecond))
	r := back.Restored
	if r == nil || r.Snapshot == "" || r.At.Before(lost) || !strings.Contains(r.Reason, "daemon was down") || r.LostSeconds <= 0 {
		t.Fatalf("the sandbox's record after it came back: restored %+v", r)
	}
	if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/root/mark"}}); err != nil || res.Stdout != "checkpointed\n" {
		t.Errorf("the work from before the checkpoint: %+v, %v", res, err)
	}

	last := r.Snapshot
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "its checkpoint to go with it", func() bool {
		got, err := c.GetSandbox(ctx, sb.ID)
		cur := last
		if err == nil && got.Checkpoint != nil {
			cur = got.Checkpoint.Snapshot
		}
		_, err = c.GetSnapshot(ctx, cur)
		return api.IsCode(err, api.CodeNotFound)
	})
}
