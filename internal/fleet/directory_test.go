package fleet

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"warren/api"
	"warren/internal/pgtest"
	"warren/internal/scheduler"
	"warren/internal/store"
)

// TestLostNodeMoves: a control replica fences a node that stopped
// heartbeating; its sandbox with a checkpoint moves, saying from which
// checkpoint and how much work was lost, and one without fails; the
// replica then places the moving sandbox in the region of the node it
// left, and stops one whose time ran out while it was moving.
func TestLostNodeMoves(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.Start(t).Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	report, _ := json.Marshal(Report{
		Capacity: scheduler.Resources{MilliCPUs: 8000, MemoryMB: 16 << 10, DiskMB: 100 << 10},
		Runtimes: []scheduler.Runtime{{Name: "container", Isolation: scheduler.IsolationContainer}},
	})
	now := time.Now()
	lastBeat := now.Add(-time.Minute)
	for _, n := range []store.Node{
		{ID: "n1", Addr: "n1:1", Region: "r1", Cluster: "r1-a"},
		{ID: "n2", Addr: "n2:1", Region: "r1", Cluster: "r1-b"},
		{ID: "n3", Addr: "n3:1", Region: "r2", Cluster: "r2-a"},
	} {
		n.Report = report
		at := now
		if n.ID == "n1" {
			at = lastBeat
		}
		if _, err := st.RegisterNode(ctx, n, at); err != nil {
			t.Fatal(err)
		}
	}
	checkpointAt := lastBeat.Add(-20 * time.Second)
	insert := func(id string, every time.Duration) {
		t.Helper()
		sb := &store.Sandbox{ID: id, Tenant: "acme", Template: "default", Runtime: "container", State: api.StateStarting,
			CPUs: 1, MemoryMB: 256, Pids: 64, DiskMB: 1024, Node: "n1", CheckpointEvery: every, ExpiresAt: now.Add(time.Hour)}
		if err := st.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Transition(ctx, id, store.Transition{From: []string{api.StateStarting}, To: api.StateRunning}); err != nil {
			t.Fatal(err)
		}
	}
	insert("sb-kept", time.Minute)
	if _, err := st.SetCheckpoint(ctx, "sb-kept", "n1", api.Checkpoint{Snapshot: "sn-1", At: checkpointAt}); err != nil {
		t.Fatal(err)
	}
	insert("sb-plain", 0)

	d, err := NewDirectory(ctx, st, nil, nil, Config{Heartbeat: 200 * time.Millisecond, Lease: time.Second, FenceAfter: 2 * time.Second},
		DirectoryConfig{DefaultCPUs: 1, DefaultMemoryMB: 256}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d.fenceStale(ctx)
	kept, _ := st.GetSandbox(ctx, "sb-kept")
	if kept.State != api.StateMoving || kept.Node != "" || kept.Restored == nil {
		t.Fatalf("the checkpointed sandbox of the fenced node: %s on %q, restored %+v", kept.State, kept.Node, kept.Restored)
	}
	if r := kept.Restored; r.Snapshot != "sn-1" || r.From != "n1" || r.LostSeconds < 19 || r.LostSeconds > 21 || !r.At.IsZero() {
		t.Errorf("how it is to come back: %+v; want from sn-1, n1, about 20 s lost, not back yet", r)
	}
	if plain, _ := st.GetSandbox(ctx, "sb-plain"); plain.State != api.StateFailed {
		t.Errorf("the sandbox with no checkpoint: %s, want failed", plain.State)
	}

	expired := &store.Sandbox{ID: "sb-late", Tenant: "acme", Template: "default", Runtime: "container", State: api.StateMoving,
		CPUs: 1, MemoryMB: 256, Pids: 64, DiskMB: 1024, CheckpointEvery: time.Minute, ExpiresAt: now.Add(-time.Second),
		Restored: &api.Restored{Snapshot: "sn-2", From: "n1"}}
	if err := st.InsertSandbox(ctx, expired); err != nil {
		t.Fatal(err)
	}
	if err := d.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	d.placeMoving(ctx)
	if kept, _ = st.GetSandbox(ctx, "sb-kept"); kept.State != api.StateMoving || kept.Node != "n2" {
		t.Errorf("the moving sandbox placed on %q (%s); want n2, the other node of its region", kept.Node, kept.State)
	}
	if late, _ := st.GetSandbox(ctx, "sb-late"); late.State != api.StateStopped {
		t.Errorf("a moving sandbox whose time ran out: %s, want stopped", late.State)
	}
	// n2 lost too before it started it: the placement is void again.
	if _, err := st.FenceStale(ctx, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	n2, _ := st.GetNode(ctx, "n2")
	lose(ctx, st, kept, n2.HeartbeatAt, "its node n2 stopped answering", d.log)
	if kept, _ = st.GetSandbox(ctx, "sb-kept"); kept.State != api.StateMoving || kept.Node != "" {
		t.Errorf("a moving sandbox whose new node was lost: %s on %q, want moving on none", kept.State, kept.Node)
	}
}

// TestSleepingWakePlaced: a paused sandbox whose node was lost sleeps on,
// held by none; a replica places its wake on a live node, and Owner sends
// its requests there; an owner remembered on a node that was drained is
// not remembered again once the node is active: the sandbox woke
// elsewhere meanwhile.
func TestSleepingWakePlaced(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.Start(t).Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	report, _ := json.Marshal(Report{
		Capacity: scheduler.Resources{MilliCPUs: 8000, MemoryMB: 16 << 10, DiskMB: 100 << 10},
		Runtimes: []scheduler.Runtime{{Name: "container", Isolation: scheduler.IsolationContainer}},
	})
	now := time.Now()
	for _, n := range []store.Node{{ID: "n1", Addr: "n1:1", Region: "r1", Cluster: "a"}, {ID: "n2", Addr: "n2:1", Region: "r1", Cluster: "b"}} {
		n.Report = report
		if _, err := st.RegisterNode(ctx, n, now); err != nil {
			t.Fatal(err)
		}
	}
	sb := &store.Sandbox{ID: "sb-asleep", Tenant: "acme", Template: "default", Runtime: "container", State: api.StateStarting,
		CPUs: 1, MemoryMB: 256, Pids: 64, DiskMB: 1024, Node: "n1", ExpiresAt: now.Add(time.Hour)}
	if err := st.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Transition(ctx, sb.ID, store.Transition{From: []string{api.StateStarting}, To: api.StateRunning, RuntimeState: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d, err := NewDirectory(ctx, st, nil, nil, Config{Heartbeat: 200 * time.Millisecond, Lease: time.Second, FenceAfter: 2 * time.Second},
		DirectoryConfig{DefaultCPUs: 1, DefaultMemoryMB: 256}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if node, err := d.Owner(ctx, sb.ID); err != nil || node != "n1" {
		t.Fatalf("owner while it runs: %q %v", node, err)
	}
	// n1 drains: the sandbox pauses and n1 lets go of it.
	if _, err := st.SetNodeState(ctx, "n1", []string{store.NodeActive}, store.NodeDraining); err != nil {
		t.Fatal(err)
	}
	if err := d.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	why := api.Paused{Reason: "requested", Snapshot: "sn-p"}
	rec, err := st.Transition(ctx, sb.ID, store.Transition{From: []string{api.StateRunning}, To: api.StatePaused, RuntimeState: []byte(`{}`), Paused: &why})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Unhold(ctx, rec, "", "its node was drained"); err != nil {
		t.Fatal(err)
	}
	d.placeSleeping(ctx)
	if got, _ := st.GetSandbox(ctx, sb.ID); got.Node != "n2" || got.State != api.StatePaused {
		t.Fatalf("the sleeping sandbox's wake placed on %q (%s), want n2", got.Node, got.State)
	}
	if _, err := st.SetNodeState(ctx, "n1", []string{store.NodeDraining}, store.NodeActive); err != nil {
		t.Fatal(err)
	}
	if err := d.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if node, err := d.Owner(ctx, sb.ID); err != nil || node != "n2" {
		t.Errorf("owner after n1 is active again: %q %v, want n2", node, err)
	}
}
