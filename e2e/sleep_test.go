package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// TestSleepWake is the peers' complaints about pausing turned round, on
// each runtime: a sandbox that pauses when idle and is woken by an exec
// has its files and its ID, and with memory (vm, gvisor) a process started
// before goes on with its state; a container says it woke without its
// memory, never silently. The pause and the wake are events that say why;
// a sandbox without auto_resume answers 409 while paused, its workspace
// disk paused and resumed with it, and a delete of one asleep ends it and
// its pause snapshot.
func TestSleepWake(t *testing.T) {
	need(t)
	for _, name := range []string{"container", "gvisor", "vm"} {
		t.Run(name, func(t *testing.T) { sleepWake(t, name) })
	}
}

func sleepWake(t *testing.T, name string) {
	rt := runtimeInfo(t, name)
	memory := name != "container"
	ctx := context.Background()
	cl := shared.client()
	from := eventsNow(ctx, t, cl)
	spec := api.SandboxSpec{Runtime: name, MemoryMB: 256, Lifecycle: api.Lifecycle{
		OnTimeout: api.OnTimeoutPause, IdleTimeoutSeconds: 3, AutoResume: true,
	}}
	if rt.Accel == "tcg" {
		spec.Lifecycle.IdleTimeoutSeconds = 20 // a vm boots in seconds under TCG: its first execs are not idle
	}
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: spec})
	if api.IsCode(err, api.CodeUnavailable) {
		t.Skipf("the daemon refuses runtime %s: %v", name, err)
	}
	if err != nil {
		t.Fatalf("create: %v\ndaemon log:\n%s", err, shared.log.tail(30))
	}
	id := sb.ID
	t.Cleanup(func() { cl.DeleteSandbox(context.Background(), id) })
	if sb.OnTimeout != api.OnTimeoutPause || !sb.AutoResume || sb.PausedTTLSeconds == 0 {
		t.Errorf("created with %+v, want its lifecycle and the default paused TTL", sb.Lifecycle)
	}
	shared.sh(t, id, "echo kept > /root/sleep.txt && sync")
	pid0, n0 := startCounter(t, id)

	wait.For(t, 2*time.Minute, "the idle sandbox to pause", func() bool {
		got, err := cl.GetSandbox(ctx, id)
		return err == nil && got.State == api.StatePaused
	})
	got, err := cl.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Paused; p == nil || !p.Auto || !strings.Contains(p.Reason, "idle") || p.Memory != memory || p.Snapshot == "" {
		t.Fatalf("paused: %+v, want auto, idle, memory %v, with its snapshot", p, memory)
	}
	if sn, err := cl.GetSnapshot(ctx, got.Paused.Snapshot); err != nil || sn.State != api.SnapshotDurable {
		t.Errorf("its pause snapshot: %+v, %v; want durable before the pause is shown", sn, err)
	}

	// The exec wakes it: same ID, same files.
	t0 := time.Now()
	res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "cat /root/sleep.txt"})
	if err != nil || res.ExitCode != 0 || res.Stdout != "kept\n" {
		t.Fatalf("exec that wakes it: %+v, %v\ndaemon log:\n%s", res, err, shared.log.tail(30))
	}
	t.Logf("%s: the exec that woke it took %v", name, time.Since(t0).Round(time.Millisecond))
	if got, err = cl.GetSandbox(ctx, id); err != nil || got.ID != id || got.State != api.StateRunning || got.Paused != nil {
		t.Errorf("after the wake: %+v, %v; want %s running", got, err, id)
	}
	if memory {
		countsOn(t, id, pid0, n0)
	} else if pythonRuns(t, id) {
		t.Errorf("the counter runs on in a container woken without its memory")
	}
	kinds := map[string]api.Event{}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	end := errors.New("seen")
	err = cl.Events(ectx, api.EventsRequest{Sandbox: id, After: &from}, func(e api.Event) error {
		kinds[e.Kind] = e
		if e.Kind == api.EventSandboxAutoResumed {
			return end
		}
		return nil
	})
	if !errors.Is(err, end) {
		t.Errorf("events of %s: %v, got %v", id, err, kinds)
	}
	if e := kinds[api.EventSandboxAutoPaused]; !strings.Contains(e.Reason, "idle") {
		t.Errorf("auto-paused event %+v, want its reason", e)
	}
	if e := kinds[api.EventSandboxAutoResumed]; e.Reason == "" {
		t.Errorf("auto-resumed event %+v, want its reason", e)
	}

	t.Run("without auto_resume", func(t *testing.T) {
		other, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: name, MemoryMB: 256, WorkspaceMB: 64}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.DeleteSandbox(context.Background(), other.ID) })
		shared.sh(t, other.ID, "echo mine > /root/mine.txt && echo ws > /workspace/ws.txt && sync")
		paused, err := cl.PauseSandbox(ctx, other.ID)
		if err != nil {
			t.Fatalf("pause: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		if paused.Paused == nil || paused.Paused.Auto || paused.Paused.Memory != memory || paused.Paused.Workspace == "" {
			t.Errorf("paused: %+v, want requested, memory %v, with its workspace's snapshot", paused.Paused, memory)
		}
		_, err = cl.Exec(ctx, other.ID, api.ExecRequest{Cmd: []string{"true"}})
		if !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "paused") {
			t.Errorf("exec in a paused sandbox without auto_resume: %v, want a conflict naming its state", err)
		}
		if _, err := cl.ResumeSandbox(ctx, other.ID); err != nil {
			t.Fatalf("resume: %v\ndaemon log:\n%s", err, shared.log.tail(30))
		}
		if got := shared.sh(t, other.ID, "cat /root/mine.txt /workspace/ws.txt"); got != "mine\nws\n" {
			t.Errorf("files after the resume: %q", got)
		}
		// A delete of a sandbox asleep ends it, and its pause snapshot.
		paused, err = cl.PauseSandbox(ctx, other.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.DeleteSandbox(ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := cl.GetSandbox(ctx, other.ID); err != nil || got.State != api.StateStopped {
			t.Errorf("deleted while paused: %+v, %v; want stopped", got, err)
		}
		wait.For(t, 30*time.Second, "the pause snapshot of the deleted sandbox to go", func() bool {
			_, err := cl.GetSnapshot(ctx, paused.Paused.Snapshot)
			return api.IsCode(err, api.CodeNotFound)
		})
	})
}

// pythonRuns says whether a python3 process runs in sandbox id (its
// counter, after a restart in a new pid namespace, whose pids the
// counter's pid file may name again).
func pythonRuns(t *testing.T, id string) bool {
	t.Helper()
	return strings.TrimSpace(shared.sh(t, id, "ps -e -o comm= | grep -cx python3 || true")) != "0"
}
