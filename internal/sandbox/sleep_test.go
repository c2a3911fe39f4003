package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/runtime/inproc"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/wait"
)

// createWith makes a sandbox of tenant with lifecycle lc, in a runtime
// without memory pauses when memoryless.
func (h harness) createWith(lc api.Lifecycle, memoryless bool) api.Sandbox {
	h.t.Helper()
	h.Runtime.Memoryless = memoryless
	sb, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Lifecycle: lc}})
	if err != nil {
		h.t.Fatal(err)
	}
	return sb
}

// events are the kinds of sandbox id's own events (not its snapshots'),
// in order, and their reasons.
func (h harness) events(id string) (kinds, reasons []string) {
	h.t.Helper()
	evs, err := h.Deps.Store.Events(context.Background(), store.EventQuery{Tenant: tenant, Sandbox: id, Limit: 100})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range evs {
		if strings.HasPrefix(e.Kind, "sandbox.") {
			kinds, reasons = append(kinds, e.Kind), append(reasons, e.Reason)
		}
	}
	return kinds, reasons
}

// TestPauseWithoutMemory: a runtime without memory pauses by a durable
// snapshot and a stop: the node holds nothing of it, and its record says
// it has no memory; a resume starts it again from that snapshot under its
// ID, and its delete takes the snapshot with it.
func TestPauseWithoutMemory(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.createWith(api.Lifecycle{}, true)
	started := h.Runtime.Started()
	p, err := h.Manager.Pause(ctx, tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != api.StatePaused || p.Paused == nil || p.Paused.Memory || p.Paused.Auto || p.Paused.Snapshot == "" {
		t.Fatalf("paused: %+v %+v, want paused without memory, with its snapshot", p.State, p.Paused)
	}
	rec := h.record(sb.ID)
	if rec.Held() || h.Runtime.Live(sb.ID) != nil || h.diskExists(sb.ID) || h.Manager.Running(tenant) != 0 {
		t.Errorf("the node holds the paused sandbox: held %v, live %v, disk %v", rec.Held(), h.Runtime.Live(sb.ID) != nil, h.diskExists(sb.ID))
	}
	if sn, err := h.Manager.GetSnapshot(ctx, tenant, p.Paused.Snapshot); err != nil || sn.State != api.SnapshotDurable {
		t.Errorf("its pause snapshot: %+v %v, want durable", sn, err)
	}
	if _, err := h.Manager.Agent(ctx, tenant, sb.ID); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("a call without auto_resume: %v, want a conflict", err)
	}
	r, err := h.Manager.Resume(ctx, tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != sb.ID || r.State != api.StateRunning || r.Paused != nil || h.Runtime.Started() != started+1 {
		t.Errorf("woken: %+v, started %d more; want %s running, started once", r, h.Runtime.Started()-started, sb.ID)
	}
	kinds, _ := h.events(sb.ID)
	want := []string{api.EventSandboxCreated, api.EventSandboxRunning, api.EventSandboxPaused, api.EventSandboxResumed}
	if len(kinds) != len(want) || kinds[2] != want[2] || kinds[3] != want[3] {
		t.Errorf("events %q, want %q", kinds, want)
	}
	if _, err := h.Manager.Pause(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	snap := h.record(sb.ID).Paused.Snapshot
	if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(sb.ID); rec.State != api.StateStopped {
		t.Errorf("deleted while asleep: %s", rec.State)
	}
	if _, err := h.Manager.GetSnapshot(ctx, tenant, snap); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("its pause snapshot after the delete: %v, want not found", err)
	}
}

// TestPauseKeepsTheWorkspace: a sandbox with a workspace disk pauses with
// a durable snapshot of each disk, with memory or without; it wakes with
// both, and the workspace's pause snapshot goes once it runs on its own
// disk again.
func TestPauseKeepsTheWorkspace(t *testing.T) {
	for _, memoryless := range []bool{false, true} {
		h := newHarness(t)
		ctx := context.Background()
		h.Runtime.Memoryless = memoryless
		sb, err := h.Manager.Create(ctx, tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{WorkspaceMB: 64}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := h.Manager.Pause(ctx, tenant, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		ws := p.Paused.Workspace
		if sn, err := h.Manager.GetSnapshot(ctx, tenant, ws); err != nil || sn.State != api.SnapshotDurable || sn.Scope != api.ScopeWorkspace {
			t.Fatalf("memoryless %v: its workspace's pause snapshot %q: %+v %v", memoryless, ws, sn, err)
		}
		if _, err := h.Manager.Resume(ctx, tenant, sb.ID); err != nil {
			t.Fatal(err)
		}
		if h.Runtime.Live(sb.ID) == nil || !h.diskExists(sb.ID) {
			t.Errorf("memoryless %v: woken without its instance or disk", memoryless)
		}
		wait.For(t, 10*time.Second, "the workspace's pause snapshot to go", func() bool {
			_, err := h.Manager.GetSnapshot(ctx, tenant, ws)
			return api.IsCode(err, api.CodeNotFound)
		})
	}
}

// TestAutoResumeWakesOnce: calls at once on a sandbox asleep with
// auto_resume all get it running, from one wake; the wake is an
// auto_resumed event with its reason. Both with memory and without.
func TestAutoResumeWakesOnce(t *testing.T) {
	for _, memoryless := range []bool{false, true} {
		h := newHarness(t)
		ctx := context.Background()
		sb := h.createWith(api.Lifecycle{AutoResume: true}, memoryless)
		if _, err := h.Manager.Pause(ctx, tenant, sb.ID); err != nil {
			t.Fatal(err)
		}
		started := h.Runtime.Started()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := h.Manager.Agent(ctx, tenant, sb.ID); err != nil {
					t.Errorf("memoryless %v: a call that wakes it: %v", memoryless, err)
				}
			})
		}
		wg.Wait()
		if rec := h.record(sb.ID); rec.State != api.StateRunning {
			t.Errorf("memoryless %v: after the calls: %s", memoryless, rec.State)
		}
		if n := h.Runtime.Started() - started; memoryless && n != 1 || !memoryless && n != 0 {
			t.Errorf("memoryless %v: %d starts for the wake", memoryless, n)
		}
		kinds, reasons := h.events(sb.ID)
		resumed := 0
		for i, k := range kinds {
			if k == api.EventSandboxResumed {
				t.Errorf("memoryless %v: a resumed event for an auto-resume", memoryless)
			}
			if k == api.EventSandboxAutoResumed {
				resumed++
				if reasons[i] == "" {
					t.Errorf("memoryless %v: auto_resumed without a reason", memoryless)
				}
			}
		}
		if resumed != 1 {
			t.Errorf("memoryless %v: %d auto_resumed events (%q), want 1", memoryless, resumed, kinds)
		}
	}
}

// TestDeleteDuringWake: a delete while a sandbox wakes from its pause
// snapshot wins: the wake answers a conflict, and nothing runs.
func TestDeleteDuringWake(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.createWith(api.Lifecycle{}, true)
	if _, err := h.Manager.Pause(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.Runtime.Gate = make(chan struct{})
	woke := make(chan error, 1)
	go func() {
		_, err := h.Manager.Resume(ctx, tenant, sb.ID)
		woke <- err
	}()
	wait.For(t, 10*time.Second, "the wake to claim it", func() bool { return h.record(sb.ID).State == api.StateStarting })
	if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.Runtime.Gate <- struct{}{}
	if err := <-woke; !api.IsCode(err, api.CodeConflict) {
		t.Errorf("the wake a delete overtook: %v, want a conflict", err)
	}
	if rec := h.record(sb.ID); rec.State != api.StateStopped || h.Runtime.Live(sb.ID) != nil {
		t.Errorf("after: %s, live %v", rec.State, h.Runtime.Live(sb.ID) != nil)
	}
}

// TestPauseRacesWakeAndDelete: pauses, calls that wake, resumes and a
// delete at once, without memory, leave the sandbox stopped with nothing
// running, however they interleave.
func TestPauseRacesWakeAndDelete(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ok := func(err error) bool {
		return err == nil || api.IsCode(err, api.CodeConflict) || api.IsCode(err, api.CodeNotFound)
	}
	for range 3 {
		sb := h.createWith(api.Lifecycle{AutoResume: true}, true)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for range 4 {
					if _, err := h.Manager.Pause(ctx, tenant, sb.ID); !ok(err) {
						t.Errorf("pause: %v", err)
					}
					if _, err := h.Manager.Agent(ctx, tenant, sb.ID); !ok(err) {
						t.Errorf("a call that wakes it: %v", err)
					}
					if _, err := h.Manager.Resume(ctx, tenant, sb.ID); !ok(err) {
						t.Errorf("resume: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			time.Sleep(5 * time.Millisecond)
			if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
		wg.Wait()
		if rec := h.record(sb.ID); rec.State != api.StateStopped || h.Runtime.Live(sb.ID) != nil {
			t.Errorf("after the race: %s, live %v", rec.State, h.Runtime.Live(sb.ID) != nil)
		}
	}
}

// TestLifecyclePauses: a sandbox idle for its idle timeout pauses, but
// not while a call uses it; one whose timeout passes pauses too; each
// pause is an auto_paused event saying why; a sandbox paused past its
// paused TTL is deleted.
func TestLifecyclePauses(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	idle := h.createWith(api.Lifecycle{OnTimeout: api.OnTimeoutPause, IdleTimeoutSeconds: 1, PausedTTLSeconds: 2}, true)
	cctx, cancel := context.WithCancel(ctx)
	if _, err := h.Manager.Agent(cctx, tenant, idle.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if rec := h.record(idle.ID); rec.State != api.StateRunning {
		t.Errorf("paused while a call used it: %s", rec.State)
	}
	cancel()
	wait.For(t, 10*time.Second, "the idle sandbox to pause", func() bool { return h.record(idle.ID).State == api.StatePaused })
	if p := h.record(idle.ID).Paused; !p.Auto || p.Reason == "" {
		t.Errorf("paused: %+v, want auto, with its reason", p)
	}
	wait.For(t, 10*time.Second, "the paused TTL to end it", func() bool { return h.record(idle.ID).State == api.StateStopped })

	h.Runtime.Memoryless = false
	sb, err := h.Manager.Create(ctx, tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
		TimeoutSeconds: 1, Lifecycle: api.Lifecycle{OnTimeout: api.OnTimeoutPause},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the timeout to pause it", func() bool { return h.record(sb.ID).State == api.StatePaused })
	rec := h.record(sb.ID)
	if !rec.Paused.Memory || !rec.Held() || rec.ExpiresAt.Before(time.Now().Add(24*time.Hour)) {
		t.Errorf("paused at its timeout: %+v, held %v, expires %v; want memory, held, kept for the default paused TTL", rec.Paused, rec.Held(), rec.ExpiresAt)
	}
	kinds, reasons := h.events(sb.ID)
	if k := kinds[len(kinds)-1]; k != api.EventSandboxAutoPaused || reasons[len(reasons)-1] != "its timeout passed" {
		t.Errorf("last event %s (%q), want auto_paused at its timeout", k, reasons[len(reasons)-1])
	}
	// A timeout set while it sleeps keeps its paused TTL, and is the one
	// it wakes with.
	if _, err := h.Manager.SetTimeout(ctx, tenant, sb.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	if after := h.record(sb.ID); !after.ExpiresAt.Equal(rec.ExpiresAt) || after.Timeout != time.Hour {
		t.Errorf("timeout set while paused: expires %v (was %v), timeout %v; want the paused TTL kept, the timeout an hour", after.ExpiresAt, rec.ExpiresAt, after.Timeout)
	}
	woke, err := h.Manager.Resume(ctx, tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(woke.ExpiresAt); left < 59*time.Minute || left > time.Hour {
		t.Errorf("woke with %v left, want the hour set while it slept", left)
	}
}

// TestLifecycleRefusals: what a lifecycle may not say is a bad request
// naming it.
func TestLifecycleRefusals(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, spec := range []api.SandboxSpec{
		{Lifecycle: api.Lifecycle{OnTimeout: "sleep"}},
		{Lifecycle: api.Lifecycle{IdleTimeoutSeconds: -1}},
		{Lifecycle: api.Lifecycle{PausedTTLSeconds: 365 * 24 * 3600}},
		{Persistence: api.PersistenceAlways, Lifecycle: api.Lifecycle{OnTimeout: api.OnTimeoutPause}},
	} {
		if _, err := h.Manager.Create(ctx, tenant, api.CreateSandboxRequest{SandboxSpec: spec}); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("create with %+v: %v, want a bad request", spec.Lifecycle, err)
		}
	}
}

// TestPauseStoresMemory: a pause with memory stores the sandbox's memory
// image; a sandbox whose node was lost wakes elsewhere from that image
// (its processes running on) when the runtime there restores its format,
// and from its disk alone when it does not; a resume in place, and a
// wake, delete the image.
func TestPauseStoresMemory(t *testing.T) {
	for _, format := range []string{"inproc-1", "inproc-2"} {
		h := newHarness(t)
		ctx := context.Background()
		h.Runtime.Format = "inproc-1"
		sb := h.createWith(api.Lifecycle{}, false)
		p, err := h.Manager.Pause(ctx, tenant, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Paused.Memory || !p.Paused.Held || p.Paused.Image == "" {
			t.Fatalf("paused: %+v, want held, its memory stored", p.Paused)
		}
		// In place: the image goes.
		if _, err := h.Manager.Resume(ctx, tenant, sb.ID); err != nil {
			t.Fatal(err)
		}
		h.imageGone(p.Paused.Image)
		if p, err = h.Manager.Pause(ctx, tenant, sb.ID); err != nil {
			t.Fatal(err)
		}

		// The node is lost: nothing of the sandbox is left here, and no
		// node holds it.
		h.Manager.Close()
		os.Remove(h.Manager.DiskPath(sb.ID))
		os.RemoveAll(h.Manager.StateDir(sb.ID))
		rec, err := h.Deps.Store.Unhold(ctx, h.record(sb.ID), "", "its node was lost")
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Paused.Memory || rec.Paused.Image != p.Paused.Image {
			t.Fatalf("unheld: %+v, want its memory kept in its image", rec.Paused)
		}
		h.Runtime.Format = format
		m := h.Restart()
		woke, err := m.Resume(ctx, tenant, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := h.Runtime.Live(sb.ID).Restored()
		want := inproc.Memory{Sandbox: sb.ID, Pauses: 2}
		if format != "inproc-1" {
			want = inproc.Memory{}
		}
		if woke.State != api.StateRunning || got != want {
			t.Errorf("format %s: woke %s from memory %+v, want running from %+v", format, woke.State, got, want)
		}
		h.imageGone(p.Paused.Image)
	}
}

// imageGone waits until memory image id is deleted.
func (h harness) imageGone(id string) {
	h.t.Helper()
	wait.For(h.t, 10*time.Second, "memory image "+id+" to go", func() bool {
		err := h.Deps.Snapshots.GetImage(context.Background(), tenant, id, "inproc-1", filepath.Join(h.t.TempDir(), "image"))
		return err != nil && !errors.Is(err, snapshot.ErrImageFormat)
	})
}
