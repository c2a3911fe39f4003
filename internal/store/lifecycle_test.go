package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// TestStateMachine: every pair of states is a move exactly when the
// machine lists it, and the store refuses the others before touching the
// record.
func TestStateMachine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		all := []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateMoving, api.StateStopped, api.StateFailed}
		want := map[[2]string]bool{
			{api.StateStarting, api.StateRunning}: true, {api.StateStarting, api.StateStopped}: true, {api.StateStarting, api.StateFailed}: true,
			{api.StateRunning, api.StatePaused}: true, {api.StateRunning, api.StateStopped}: true, {api.StateRunning, api.StateFailed}: true,
			{api.StatePaused, api.StateRunning}: true, {api.StatePaused, api.StateStopped}: true, {api.StatePaused, api.StateFailed}: true,
			{api.StateStarting, api.StateMoving}: true, {api.StateRunning, api.StateMoving}: true, {api.StatePaused, api.StateMoving}: true,
			{api.StateMoving, api.StateStarting}: true, {api.StateMoving, api.StateStopped}: true, {api.StateMoving, api.StateFailed}: true,
			// A wake from a pause snapshot, and one that could not start.
			{api.StatePaused, api.StateStarting}: true, {api.StateStarting, api.StatePaused}: true,
		}
		for _, from := range all {
			for _, to := range all {
				if got := CanMove(from, to); got != want[[2]string{from, to}] {
					t.Errorf("CanMove(%s, %s) = %v", from, to, got)
				}
			}
		}
		if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStopped}, To: api.StateRunning}); err == nil || errors.Is(err, ErrTransition) {
			t.Errorf("a move the machine does not have: %v, want it refused as such", err)
		}
		// A move from a state the sandbox is not in changes nothing.
		_, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateRunning}, To: api.StatePaused})
		var te *TransitionError
		if !errors.As(err, &te) || te.State != api.StateStarting || !errors.Is(err, ErrTransition) {
			t.Errorf("move from running of a starting sandbox: %v", err)
		}
		if got, _ := s.GetSandbox(ctx, "sb-1"); got.State != api.StateStarting || got.Version != 1 {
			t.Errorf("after a refused move: %s, version %d", got.State, got.Version)
		}
		// A stale version is refused too.
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning, Version: 7}); !errors.Is(err, ErrTransition) {
			t.Errorf("move at a stale version: %v", err)
		}
		up, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning, Version: 1})
		if err != nil || up.State != api.StateRunning || up.Version != 2 {
			t.Fatalf("starting → running: %+v %v", up, err)
		}
		// Final is final: a late timeout or pause of a stopped sandbox changes
		// nothing.
		if _, err := s.Transition(ctx, "sb-1", Transition{From: Live, To: api.StateStopped, Error: "deleted"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetExpiry(ctx, "sb-1", time.Now().Add(time.Hour), Live...); !errors.Is(err, ErrTransition) {
			t.Errorf("set the expiry of a stopped sandbox: %v", err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateRunning}, To: api.StatePaused}); !errors.Is(err, ErrTransition) {
			t.Errorf("pause a stopped sandbox: %v", err)
		}
		if got, _ := s.GetSandbox(ctx, "sb-1"); got.State != api.StateStopped || got.Error != "deleted" {
			t.Errorf("stopped sandbox after late writes: %+v", got)
		}
	})
}

// TestTransitionRace: of concurrent moves from one state, exactly one wins.
func TestTransitionRace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := map[string]int{}
		for i := range 20 {
			to := []string{api.StateRunning, api.StateStopped, api.StateFailed}[i%3]
			wg.Go(func() {
				if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: to}); err == nil {
					mu.Lock()
					won[to]++
					mu.Unlock()
				} else if !errors.Is(err, ErrTransition) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		total := 0
		for _, n := range won {
			total += n
		}
		got, _ := s.GetSandbox(ctx, "sb-1")
		if total != 1 || won[got.State] != 1 || got.Version != 2 {
			t.Errorf("winners %v, record %s at version %d", won, got.State, got.Version)
		}
	})
}

// TestMoving: a checkpointed sandbox whose node is lost moves with no
// node; of two placements of it one wins; the node placed claims it by its
// move to starting, with how it came back; no node claims a moving
// sandbox as its own unowned record.
// TestMovable: which lost sandboxes move, and from what.
func TestMovable(t *testing.T) {
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		rec    Sandbox
		snap   string
		atZero bool
	}{
		{"no policy", Sandbox{ID: "sb-1", Origin: "sn-o"}, "", true},
		{"a policy, no checkpoint yet", Sandbox{ID: "sb-1", Origin: "sn-o", CheckpointEvery: time.Minute, CreatedAt: at}, "sn-o", false},
		{"a checkpoint", Sandbox{ID: "sb-1", CheckpointEvery: time.Minute, Checkpoint: "sn-c", CheckpointAt: at}, "sn-c", false},
		{"a workspace disk", Sandbox{ID: "sb-1", CheckpointEvery: time.Minute, Checkpoint: "sn-c", WorkspaceMB: 128}, "", true},
		{"always-on: its own volume", Sandbox{ID: "sb-1", Persistence: api.PersistenceAlways}, "sb-1", true},
		{"always-on with a workspace disk", Sandbox{ID: "sb-1", Persistence: api.PersistenceAlways, WorkspaceMB: 128}, "", true},
	} {
		snap, got := Movable(tc.rec)
		if snap != tc.snap || got.IsZero() != tc.atZero {
			t.Errorf("%s: Movable = %q, %v; want %q (zero time %v)", tc.name, snap, got, tc.snap, tc.atZero)
		}
	}
	if lost := lostSince(time.Time{}, at); lost != 0 {
		t.Errorf("an always-on sandbox lost %v s, want none", lost)
	}
	if lost := lostSince(at, at.Add(90*time.Second)); lost != 90 {
		t.Errorf("lost %v s since a checkpoint 90 s before, want 90", lost)
	}
}

func TestMoving(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		sb := newSandbox("sb-1", "acme")
		sb.Node, sb.CheckpointEvery = "n1", 30*time.Second
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCheckpoint(ctx, "sb-1", "n1", api.Checkpoint{Snapshot: "sn-0", At: time.Now()}); !errors.Is(err, ErrTransition) {
			t.Errorf("a checkpoint of a starting sandbox: %v, want it refused", err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning}); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
		if _, err := s.SetCheckpoint(ctx, "sb-1", "n2", api.Checkpoint{Snapshot: "sn-1", At: at}); !errors.Is(err, ErrTransition) {
			t.Errorf("a checkpoint by a node that does not run it: %v, want it refused", err)
		}
		rec, err := s.SetCheckpoint(ctx, "sb-1", "n1", api.Checkpoint{Snapshot: "sn-1", At: at})
		if err != nil || rec.Checkpoint != "sn-1" || !rec.CheckpointAt.Equal(at) || rec.CheckpointEvery != 30*time.Second {
			t.Fatalf("SetCheckpoint: %+v, %v", rec, err)
		}
		none := ""
		rec, err = s.Transition(ctx, "sb-1", Transition{From: OnNode, To: api.StateMoving, Node: &none, Error: "its node n1 stopped answering"})
		if err != nil || rec.Node != "" || rec.State != api.StateMoving {
			t.Fatalf("move to moving: %+v, %v", rec, err)
		}
		if n, err := s.ClaimUnowned(ctx, "n3"); err != nil || n != 0 {
			t.Errorf("ClaimUnowned took %d moving sandboxes (%v); want none", n, err)
		}
		unplaced, err := s.MovingSandboxes(ctx, "", 10)
		if err != nil || len(unplaced) != 1 || unplaced[0].ID != "sb-1" {
			t.Fatalf("MovingSandboxes(\"\") = %+v, %v", unplaced, err)
		}
		// Two replicas place it at once: one wins.
		won, lost := 0, 0
		for _, to := range []string{"n2", "n3"} {
			if _, err := s.AssignMove(ctx, "sb-1", unplaced[0].Version, "", to); err == nil {
				won++
			} else if errors.Is(err, ErrTransition) {
				lost++
			} else {
				t.Fatal(err)
			}
		}
		rec, _ = s.GetSandbox(ctx, "sb-1")
		if won != 1 || lost != 1 || rec.Node != "n2" {
			t.Fatalf("two placements: %d won, %d lost, node %q", won, lost, rec.Node)
		}
		if mine, err := s.MovingSandboxes(ctx, "n2", 10); err != nil || len(mine) != 1 {
			t.Fatalf("MovingSandboxes(n2) = %+v, %v", mine, err)
		}
		node := "n2"
		back := &api.Restored{Snapshot: "sn-1", SnapshotAt: at, At: at.Add(time.Minute), LostSeconds: 60, Reason: rec.Error, From: "n1"}
		rec, err = s.Transition(ctx, "sb-1", Transition{From: []string{api.StateMoving}, To: api.StateStarting, Version: rec.Version, Node: &node, Restored: back})
		if err != nil || rec.State != api.StateStarting || rec.Error != "" || rec.Restored == nil ||
			rec.Restored.Snapshot != "sn-1" || rec.Restored.From != "n1" || rec.Restored.Reason != back.Reason || !rec.Restored.At.Equal(back.At) {
			t.Fatalf("the claim of the node placed: %+v (restored %+v), %v", rec, rec.Restored, err)
		}
		if got, _ := s.GetSandbox(ctx, "sb-1"); got.Restored == nil || got.Restored.Snapshot != "sn-1" || got.Restored.LostSeconds != 60 {
			t.Errorf("restored read back: %+v", got.Restored)
		}
	})
}

// TestSleepMoves: a pause records how the sandbox sleeps and its event
// says why; a paused sandbox whose node is lost stays paused, held by
// none and without its memory, and any node's reaper finds it once its
// paused TTL passes; one placement of its wake wins; the wake's claim
// (paused → starting) is its auto_resumed event, and its start to
// running none; and a wake that fails puts it back to sleep as it was.
func TestSleepMoves(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		sb := newSandbox("sb-1", "acme")
		sb.Node, sb.Lifecycle, sb.Timeout = "n1", api.Lifecycle{OnTimeout: api.OnTimeoutPause, AutoResume: true}, time.Minute
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning, RuntimeState: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		why := api.Paused{At: time.Now().UTC(), Reason: "idle for 3s", Auto: true, Memory: true, Snapshot: "sn-p"}
		soon := time.Now().Add(time.Hour)
		rec, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateRunning}, To: api.StatePaused, RuntimeState: []byte(`{}`), Paused: &why, Expires: &soon})
		if err != nil || !rec.Held() || rec.Paused == nil || *rec.Paused != why || rec.Lifecycle != sb.Lifecycle || rec.Timeout != time.Minute {
			t.Fatalf("paused: %+v %v", rec, err)
		}
		rec, err = s.Lose(ctx, rec, "", time.Now(), "its node stopped answering")
		if err != nil || rec.State != api.StatePaused || rec.Held() || rec.Node != "" || rec.Paused.Memory || rec.Paused.Snapshot != "sn-p" {
			t.Fatalf("lost while paused: %+v %+v %v", rec, rec.Paused, err)
		}
		if got, err := s.ExpiredSandboxes(ctx, "n2", soon.Add(time.Second)); err != nil || len(got) != 1 {
			t.Errorf("expired for another node: %d, %v; want the paused one no node holds", len(got), err)
		}
		if got, err := s.SleepingSandboxes(ctx, "", time.Time{}, 10); err != nil || len(got) != 1 || got[0].ID != "sb-1" {
			t.Errorf("sleeping, unplaced: %d, %v; want the one its node lost", len(got), err)
		}
		placed, err := s.AssignWake(ctx, rec, "n2")
		if err != nil || placed.Node != "n2" {
			t.Fatalf("wake placed: %+v %v", placed, err)
		}
		if got, err := s.SleepingSandboxes(ctx, "n2", placed.UpdatedAt, 10); err != nil || len(got) != 1 {
			t.Errorf("sleeping, placed on n2 since its placement: %d, %v; want it", len(got), err)
		}
		if got, err := s.SleepingSandboxes(ctx, "n2", placed.UpdatedAt.Add(time.Nanosecond), 10); err != nil || len(got) != 0 {
			t.Errorf("sleeping, placed on n2 after its placement: %d, %v; want none", len(got), err)
		}
		if _, err := s.AssignWake(ctx, rec, "n3"); !errors.Is(err, ErrTransition) {
			t.Errorf("a second placement: %v, want refused", err)
		}
		n2 := "n2"
		claimed, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StatePaused}, To: api.StateStarting, Node: &n2,
			Cause: &Cause{Auto: true, Reason: "a call to its agent"}})
		if err != nil || claimed.Paused == nil {
			t.Fatalf("claimed: %+v %v, want its pause kept while it starts", claimed, err)
		}
		back, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StatePaused, Paused: rec.Paused, Error: "its last wake failed"})
		if err != nil || back.Paused == nil || back.Paused.Snapshot != "sn-p" {
			t.Fatalf("back to sleep: %+v %v", back, err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StatePaused}, To: api.StateStarting, Node: &n2, Cause: &Cause{Reason: "requested"}}); err != nil {
			t.Fatal(err)
		}
		up, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning, RuntimeState: []byte(`{}`)})
		if err != nil || up.Paused != nil {
			t.Fatalf("running: %+v %v, want its pause cleared", up, err)
		}
		evs, err := s.Events(ctx, EventQuery{Tenant: "acme", Sandbox: "sb-1", Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Kind+" "+e.Reason)
		}
		want := []string{"sandbox.created ", "sandbox.running ", "sandbox.auto_paused idle for 3s",
			"sandbox.auto_resumed a call to its agent", "sandbox.paused its last wake failed",
			"sandbox.resumed requested"}
		if !slices.Equal(got, want) {
			t.Errorf("events:\n%q\nwant\n%q", got, want)
		}
	})
}

// TestStandby: a paused sandbox its node holds gets a standby, found by
// that node's look for sleeping sandboxes; a standby on a node no longer
// active is looked for again; when its node is lost, the wake goes to the
// standby; and a wake clears it.
func TestStandby(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		sb := newSandbox("sb-1", "acme")
		sb.Node = "n1"
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateRunning, RuntimeState: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.WithoutStandby(ctx, []string{"n1", "n2"}, 10); err != nil || len(got) != 0 {
			t.Errorf("running, without a standby: %d, %v; want none (it does not sleep)", len(got), err)
		}
		why := api.Paused{At: time.Now().UTC(), Reason: "requested", Memory: true, Snapshot: "sn-p", Image: "mi-1"}
		rec, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateRunning}, To: api.StatePaused, RuntimeState: []byte(`{}`), Paused: &why})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.WithoutStandby(ctx, []string{"n1", "n2"}, 10); err != nil || len(got) != 1 {
			t.Fatalf("paused, without a standby: %d, %v; want it", len(got), err)
		}
		rec, err = s.SetStandby(ctx, rec, "n2")
		if err != nil || rec.Standby != "n2" {
			t.Fatalf("standby: %+v %v", rec, err)
		}
		if got, err := s.WithoutStandby(ctx, []string{"n1", "n2"}, 10); err != nil || len(got) != 0 {
			t.Errorf("with a standby: %d, %v; want none", len(got), err)
		}
		if got, err := s.WithoutStandby(ctx, []string{"n1", "n3"}, 10); err != nil || len(got) != 1 {
			t.Errorf("with a standby no longer active: %d, %v; want it", len(got), err)
		}
		if got, err := s.SleepingSandboxes(ctx, "n2", time.Time{}, 10); err != nil || len(got) != 1 {
			t.Errorf("the standby's look: %d, %v; want it", len(got), err)
		}
		if got, err := s.SleepingSandboxes(ctx, "", time.Time{}, 10); err != nil || len(got) != 0 {
			t.Errorf("unplaced: %d, %v; want none (its node holds it)", len(got), err)
		}
		lost, err := s.Lose(ctx, rec, "", time.Now(), "its node stopped answering")
		if err != nil || lost.Held() || lost.Node != "n2" || lost.Standby != "" || !lost.Paused.Memory {
			t.Fatalf("lost: %+v %+v %v; want its wake on its standby, its memory kept in its image", lost, lost.Paused, err)
		}
		if _, err := s.SetStandby(ctx, lost, "n3"); !errors.Is(err, ErrTransition) {
			t.Errorf("a standby for one no node holds: %v, want refused", err)
		}
	})
}
