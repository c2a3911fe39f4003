//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/backoff"
	fileblob "warren/internal/blob/file"
	"warren/internal/disk"
	"warren/internal/listing"
	"warren/internal/runtime"
	"warren/internal/runtime/inproc"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
)

// harness is a real manager over the in-process runtime: a store, a disk
// pool of plain copies, a template of 64 MiB of zeros and a file blob
// store, all in a temporary directory. It needs no root.
type harness struct {
	t    *testing.T
	deps Deps
	rt   *inproc.Runtime
	m    *Manager
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pool, err := disk.Open(ctx, dir, nil, disk.Options{NoLoopImage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	tplDir := filepath.Join(pool.Dir(), "templates")
	if err := os.MkdirAll(tplDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tplDir, "default.img"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(tplDir, "default.img"), 64<<20); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(template.Info{Name: "default", BuiltAt: time.Now(), Recipe: "test"})
	if err := os.WriteFile(filepath.Join(tplDir, "default.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	templates, err := template.NewCatalog(pool, nil, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := fileblob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.Open(ctx, slog.New(slog.DiscardHandler), st, pool, blobs, snapshot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, rt: inproc.New("container", nil)}
	h.deps = Deps{
		Store: st, Pool: pool, Templates: templates, Snapshots: snaps,
		Runtimes: []runtime.Runtime{h.rt}, StateDir: filepath.Join(dir, "sandboxes"),
		Host: HostCapacity{CPUs: 4, MemoryMB: 16 << 10, DiskMB: 1 << 20, PidMax: 1 << 22},
	}
	h.m = h.restart()
	return h
}

// restart makes a new manager over the same store and runtime, as a
// restarted daemon has.
func (h *harness) restart() *Manager {
	h.t.Helper()
	deps := h.deps
	deps.Log = slog.New(slog.NewTextHandler(h.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := New(context.Background(), deps, Config{ReapEvery: 20 * time.Millisecond})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(m.Close)
	return m
}

const tenant = "acme"

func (h *harness) record(id string) store.Sandbox {
	h.t.Helper()
	rec, err := h.deps.Store.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatalf("record of %s: %v", id, err)
	}
	return rec
}

// create makes a sandbox of tenant.
func (h *harness) create() api.Sandbox {
	h.t.Helper()
	sb, err := h.m.Create(context.Background(), tenant, api.CreateSandboxRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	return sb
}

// createHeld starts a create that the runtime holds at its start, and
// returns the sandbox's ID once it is recorded starting, and where the
// create's answer comes once h.rt.Gate is sent to.
func (h *harness) createHeld() (string, <-chan error) {
	h.t.Helper()
	h.rt.Gate = make(chan struct{})
	created := make(chan error, 1)
	go func() {
		_, err := h.m.Create(context.Background(), tenant, api.CreateSandboxRequest{})
		created <- err
	}()
	return h.starting(), created
}

// eventually waits, at most 10 s, for cond.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond},
		func() (bool, error) { return cond(), nil }); err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// starting waits for the one sandbox recorded starting and returns its ID.
func (h *harness) starting() string {
	h.t.Helper()
	var id string
	h.eventually("a sandbox to be starting", func() bool {
		recs, _ := h.deps.Store.ListSandboxes(context.Background(), "", []string{api.StateStarting}, listing.Page{})
		if len(recs) > 0 {
			id = recs[0].ID
		}
		return id != ""
	})
	return id
}

func (h *harness) diskExists(id string) bool {
	_, err := os.Stat(h.m.diskPath(id))
	return err == nil
}

func TestCreateAndDelete(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.create()
	if rec := h.record(sb.ID); rec.State != api.StateRunning || rec.Version != 2 {
		t.Errorf("after create: %s at version %d", rec.State, rec.Version)
	}
	if err := h.m.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(sb.ID); rec.State != api.StateStopped || h.diskExists(sb.ID) || h.rt.Live(sb.ID) != nil {
		t.Errorf("after delete: %s, disk %v, live %v", rec.State, h.diskExists(sb.ID), h.rt.Live(sb.ID) != nil)
	}
}

// TestDeleteDuringCreate: a delete of a sandbox still starting wins; the
// create unwinds everything it made and says the sandbox was deleted; no
// record says running with nothing behind it.
func TestDeleteDuringCreate(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id, created := h.createHeld()
	if err := h.m.Delete(ctx, tenant, id); err != nil {
		t.Fatalf("delete of a starting sandbox: %v", err)
	}
	h.rt.Gate <- struct{}{}
	err := <-created
	if !api.IsCode(err, api.CodeConflict) {
		t.Errorf("the create of a sandbox deleted while it started: %v, want a conflict", err)
	}
	rec := h.record(id)
	if rec.State != api.StateStopped || h.diskExists(id) || h.rt.Live(id) != nil {
		t.Errorf("after: %s, disk %v, live %v", rec.State, h.diskExists(id), h.rt.Live(id) != nil)
	}
	if _, err := os.Stat(h.m.stateDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its directory: %v, want it gone", err)
	}
	h.m.mu.Lock()
	_, live := h.m.live[id]
	h.m.mu.Unlock()
	if live {
		t.Error("the manager still counts it live")
	}
}

// TestTimeoutAfterTeardown: a timeout set on a sandbox being torn down
// never brings it back: the store refuses it, and the record stays stopped.
func TestTimeoutAfterTeardown(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for range 5 {
		sb := h.create()
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := h.m.Delete(ctx, tenant, sb.ID); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			for range 20 {
				if _, err := h.m.SetTimeout(ctx, tenant, sb.ID, time.Hour); err != nil && !api.IsCode(err, api.CodeConflict) {
					t.Error(err)
				}
			}
		})
		wg.Wait()
		if _, err := h.m.SetTimeout(ctx, tenant, sb.ID, time.Hour); !api.IsCode(err, api.CodeConflict) {
			t.Errorf("timeout of a stopped sandbox: %v, want a conflict", err)
		}
		if rec := h.record(sb.ID); rec.State != api.StateStopped {
			t.Errorf("after a delete racing timeouts: %s", rec.State)
		}
	}
}

// TestCrashKeepsTheDisk: an init that dies makes the sandbox failed with
// its disk kept; its delete removes the disk and the record.
func TestCrashKeepsTheDisk(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.create()
	h.rt.Live(sb.ID).Crash()
	h.eventually("the crashed sandbox to be failed", func() bool { return h.record(sb.ID).State == api.StateFailed })
	got, err := h.m.Get(ctx, tenant, sb.ID)
	if err != nil || got.State != api.StateFailed || !got.DiskKept || !h.diskExists(sb.ID) {
		t.Fatalf("after the crash: %+v %v, disk %v", got, err, h.diskExists(sb.ID))
	}
	if err := h.m.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if h.diskExists(sb.ID) {
		t.Error("the failed sandbox's disk outlived its delete")
	}
	if _, err := h.deps.Store.GetSandbox(ctx, sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("its record after the delete: %v", err)
	}
}

// TestRestartDuringCreate: a daemon that restarts while a sandbox starts
// records it failed; the create of the old process, when it goes on,
// unwinds instead of recording it running.
func TestRestartDuringCreate(t *testing.T) {
	h := newHarness(t)
	id, created := h.createHeld()
	h.restart()
	if rec := h.record(id); rec.State != api.StateFailed {
		t.Fatalf("after the restart: %s, want failed", rec.State)
	}
	h.rt.Gate <- struct{}{}
	if err := <-created; !api.IsCode(err, api.CodeConflict) {
		t.Errorf("the old create: %v, want a conflict", err)
	}
	if rec := h.record(id); rec.State != api.StateFailed || h.rt.Live(id) != nil {
		t.Errorf("after: %s, live %v", rec.State, h.rt.Live(id) != nil)
	}
}

// TestPauseResumeDeleteRace: pauses, resumes and a delete at once leave
// the sandbox stopped, with nothing running, however they interleave.
func TestPauseResumeDeleteRace(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for range 5 {
		sb := h.create()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for range 5 {
					if _, err := h.m.Pause(ctx, tenant, sb.ID); err != nil && !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeNotFound) {
						t.Errorf("pause: %v", err)
					}
					if _, err := h.m.Resume(ctx, tenant, sb.ID); err != nil && !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeNotFound) {
						t.Errorf("resume: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			time.Sleep(2 * time.Millisecond)
			if err := h.m.Delete(ctx, tenant, sb.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
		wg.Wait()
		if rec := h.record(sb.ID); rec.State != api.StateStopped || h.rt.Live(sb.ID) != nil {
			t.Errorf("after pauses, resumes and a delete: %s, live %v", rec.State, h.rt.Live(sb.ID) != nil)
		}
	}
}
