//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
	"warren/internal/sandbox/sandboxtest"
	"warren/internal/store"
	"warren/internal/wait"
)

// harness is sandboxtest's real manager with the lifecycle tests' helpers.
type harness struct {
	*sandboxtest.Harness
	t *testing.T
}

func newHarness(t *testing.T) harness {
	t.Helper()
	return harness{sandboxtest.New(t), t}
}

const tenant = "acme"

func (h harness) record(id string) store.Sandbox {
	h.t.Helper()
	rec, err := h.Deps.Store.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatalf("record of %s: %v", id, err)
	}
	return rec
}

// create makes a sandbox of tenant.
func (h harness) create() api.Sandbox {
	h.t.Helper()
	sb, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	return sb
}

// createHeld starts a create that the runtime holds at its start, and
// returns the sandbox's ID once it is recorded starting, and where the
// create's answer comes once h.Runtime.Gate is sent to.
func (h harness) createHeld() (string, <-chan error) {
	h.t.Helper()
	h.Runtime.Gate = make(chan struct{})
	created := make(chan error, 1)
	go func() {
		_, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{})
		created <- err
	}()
	return h.starting(), created
}

// starting waits for the one sandbox recorded starting and returns its ID.
func (h harness) starting() string {
	h.t.Helper()
	var id string
	wait.For(h.t, 10*time.Second, "a sandbox to be starting", func() bool {
		recs, _ := h.Deps.Store.ListSandboxes(context.Background(), "", []string{api.StateStarting}, listing.Page{})
		if len(recs) > 0 {
			id = recs[0].ID
		}
		return id != ""
	})
	return id
}

func (h harness) diskExists(id string) bool {
	_, err := os.Stat(h.Manager.DiskPath(id))
	return err == nil
}

func TestCreateAndDelete(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.create()
	if rec := h.record(sb.ID); rec.State != api.StateRunning || rec.Version != 2 {
		t.Errorf("after create: %s at version %d", rec.State, rec.Version)
	}
	if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(sb.ID); rec.State != api.StateStopped || h.diskExists(sb.ID) || h.Runtime.Live(sb.ID) != nil {
		t.Errorf("after delete: %s, disk %v, live %v", rec.State, h.diskExists(sb.ID), h.Runtime.Live(sb.ID) != nil)
	}
}

// TestDeleteDuringCreate: a delete of a sandbox still starting wins; the
// create unwinds everything it made and says the sandbox was deleted; no
// record says running with nothing behind it.
func TestDeleteDuringCreate(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id, created := h.createHeld()
	if err := h.Manager.Delete(ctx, tenant, id); err != nil {
		t.Fatalf("delete of a starting sandbox: %v", err)
	}
	h.Runtime.Gate <- struct{}{}
	err := <-created
	if !api.IsCode(err, api.CodeConflict) {
		t.Errorf("the create of a sandbox deleted while it started: %v, want a conflict", err)
	}
	rec := h.record(id)
	if rec.State != api.StateStopped || h.diskExists(id) || h.Runtime.Live(id) != nil {
		t.Errorf("after: %s, disk %v, live %v", rec.State, h.diskExists(id), h.Runtime.Live(id) != nil)
	}
	if _, err := os.Stat(h.Manager.StateDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its directory: %v, want it gone", err)
	}
	if h.Manager.CountsLive(id) {
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
			if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			for range 20 {
				if _, err := h.Manager.SetTimeout(ctx, tenant, sb.ID, time.Hour); err != nil && !api.IsCode(err, api.CodeConflict) {
					t.Error(err)
				}
			}
		})
		wg.Wait()
		if _, err := h.Manager.SetTimeout(ctx, tenant, sb.ID, time.Hour); !api.IsCode(err, api.CodeConflict) {
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
	h.Runtime.Live(sb.ID).Crash()
	wait.For(t, 10*time.Second, "the crashed sandbox to be failed", func() bool { return h.record(sb.ID).State == api.StateFailed })
	got, err := h.Manager.Get(ctx, tenant, sb.ID)
	if err != nil || got.State != api.StateFailed || !got.DiskKept || !h.diskExists(sb.ID) {
		t.Fatalf("after the crash: %+v %v, disk %v", got, err, h.diskExists(sb.ID))
	}
	if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if h.diskExists(sb.ID) {
		t.Error("the failed sandbox's disk outlived its delete")
	}
	if _, err := h.Deps.Store.GetSandbox(ctx, sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("its record after the delete: %v", err)
	}
}

// TestRestartDuringCreate: a daemon that restarts while a sandbox starts
// records it failed; the create of the old process, when it goes on,
// unwinds instead of recording it running.
func TestRestartDuringCreate(t *testing.T) {
	h := newHarness(t)
	id, created := h.createHeld()
	h.Restart()
	if rec := h.record(id); rec.State != api.StateFailed {
		t.Fatalf("after the restart: %s, want failed", rec.State)
	}
	h.Runtime.Gate <- struct{}{}
	if err := <-created; !api.IsCode(err, api.CodeConflict) {
		t.Errorf("the old create: %v, want a conflict", err)
	}
	if rec := h.record(id); rec.State != api.StateFailed || h.Runtime.Live(id) != nil {
		t.Errorf("after: %s, live %v", rec.State, h.Runtime.Live(id) != nil)
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
					if _, err := h.Manager.Pause(ctx, tenant, sb.ID); err != nil && !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeNotFound) {
						t.Errorf("pause: %v", err)
					}
					if _, err := h.Manager.Resume(ctx, tenant, sb.ID); err != nil && !api.IsCode(err, api.CodeConflict) && !api.IsCode(err, api.CodeNotFound) {
						t.Errorf("resume: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			time.Sleep(2 * time.Millisecond) // the delete comes amid the pauses and resumes: the race under test
			if err := h.Manager.Delete(ctx, tenant, sb.ID); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
		wg.Wait()
		if rec := h.record(sb.ID); rec.State != api.StateStopped || h.Runtime.Live(sb.ID) != nil {
			t.Errorf("after pauses, resumes and a delete: %s, live %v", rec.State, h.Runtime.Live(sb.ID) != nil)
		}
	}
}

// TestSetNetworkWithoutNetworking is the bug where setting the one policy a
// node without sandbox networking allows, no egress, dereferenced its
// missing network and answered 500.
func TestSetNetworkWithoutNetworking(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sb := h.create()
	st, err := h.Manager.SetNetwork(ctx, tenant, sb.ID, api.NetworkPolicy{None: true})
	if err != nil || !st.Policy.None {
		t.Fatalf("no egress: %+v, %v; want the policy set", st, err)
	}
	if st, err := h.Manager.Network(ctx, tenant, sb.ID); err != nil || !st.Policy.None {
		t.Errorf("the policy after: %+v, %v", st, err)
	}
	if _, err := h.Manager.SetNetwork(ctx, tenant, sb.ID, api.NetworkPolicy{Allow: []string{"pypi.org"}}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("an allow list without networking: %v, want bad_request", err)
	}
}

// TestFence: a fenced node stops every sandbox it runs and removes their
// disks, and leaves their records to the fleet, which moves them on.
func TestFence(t *testing.T) {
	h := newHarness(t)
	a, b := h.create(), h.create()
	h.Manager.Fence(context.Background())
	for _, sb := range []api.Sandbox{a, b} {
		if h.Runtime.Live(sb.ID) != nil {
			t.Errorf("%s still runs after the fence", sb.ID)
		}
		if h.diskExists(sb.ID) {
			t.Errorf("%s kept its disk after the fence", sb.ID)
		}
		if rec := h.record(sb.ID); rec.State != api.StateRunning || rec.Version != 2 {
			t.Errorf("%s's record after the fence: %s version %d; want it untouched", sb.ID, rec.State, rec.Version)
		}
	}
	if n := h.Manager.Running(listing.AnyTenant); n != 0 {
		t.Errorf("%d sandboxes still counted running", n)
	}
}

// TestPlacedElsewhere: a single machine is in no region and has no labels:
// a create that names either is refused as unavailable, saying why.
func TestPlacedElsewhere(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		spec api.SandboxSpec
		want string
	}{
		{api.SandboxSpec{Region: "eu"}, `no node in region "eu": this warren is not in a region`},
		{api.SandboxSpec{NodeLabels: map[string]string{"gpu": "yes"}}, "no node with label gpu=yes"},
	} {
		_, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{SandboxSpec: tc.spec})
		if !api.IsCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %+v: %v, want unavailable: %s", tc.spec, err, tc.want)
		}
	}
}

// TestDeleteOnTheWrongNode: a delete sent to a node that does not run the
// sandbox (a fleet's front that routed it there) is refused at once, saying
// which node runs it, and the record is left alone.
func TestDeleteOnTheWrongNode(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	rec := store.Sandbox{ID: "sb-elsewhereaaaaaaaaaa", Tenant: tenant, Template: "default", Runtime: "container",
		State: api.StateRunning, Node: "n-other"}
	if err := h.Deps.Store.InsertSandbox(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Manager.Delete(ctx, tenant, rec.ID) }()
	select {
	case err := <-done:
		if !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "runs on node n-other") {
			t.Errorf("delete: %v; want a conflict naming node n-other", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delete did not return")
	}
	if got := h.record(rec.ID); got.State != api.StateRunning {
		t.Errorf("the record is %s after the refused delete; want it running", got.State)
	}
}

// Every sandbox gets an agent token of its own, shown by its create and
// Get, found by AgentAccess, and never in a list.
func TestAgentToken(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	a, b := h.create(), h.create()
	if len(a.AgentToken) != 64 || a.AgentToken == b.AgentToken {
		t.Fatalf("agent tokens %q and %q, want two of their own", a.AgentToken, b.AgentToken)
	}
	if got, err := h.Manager.Get(ctx, tenant, a.ID); err != nil || got.AgentToken != a.AgentToken {
		t.Errorf("Get shows agent token %q (%v), want the create's", got.AgentToken, err)
	}
	list, err := h.Manager.List(ctx, tenant, nil, listing.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.AgentToken != "" {
			t.Errorf("the list shows %s's agent token", sb.ID)
		}
	}
	if tn, tok, err := h.Manager.AgentAccess(ctx, a.ID); err != nil || tn != tenant || tok != a.AgentToken {
		t.Errorf("AgentAccess = %q %q %v", tn, tok, err)
	}
	if _, _, err := h.Manager.AgentAccess(ctx, "sb-bbbbbbbbbbbbbbbbbbbb"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("AgentAccess of an unknown sandbox: %v, want not_found", err)
	}
}
