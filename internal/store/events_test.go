package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// TestEvents: each change of a sandbox, a snapshot and a node records one
// event, with what it is about, in order; a refused move records none;
// the query filters by tenant, sandbox, snapshot, kind and position.
func TestEvents(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		rang := s.EventsChanged()
		move := func(id string, from []string, to, reason string) {
			t.Helper()
			if _, err := s.Transition(ctx, id, Transition{From: from, To: to, Error: reason}); err != nil {
				t.Fatal(err)
			}
		}
		starting, running, paused := []string{api.StateStarting}, []string{api.StateRunning}, []string{api.StatePaused}

		if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rang:
		default:
			t.Error("EventsChanged did not ring at an insert")
		}
		move("sb-1", starting, api.StateRunning, "")
		move("sb-1", running, api.StatePaused, "")
		move("sb-1", paused, api.StateRunning, "")
		if _, err := s.Transition(ctx, "sb-1", Transition{From: paused, To: api.StateRunning}); err == nil {
			t.Fatal("a resume of a running sandbox was not refused")
		}
		move("sb-1", Live, api.StateStopped, "deleted")

		kid := newSandbox("sb-2", "acme")
		kid.Origin = "sn-1"
		if err := s.InsertSandbox(ctx, kid); err != nil {
			t.Fatal(err)
		}
		move("sb-2", starting, api.StateRunning, "")
		move("sb-2", Live, api.StateFailed, "its agent died")

		old := newSandbox("sb-3", "other")
		old.ExpiresAt = time.Now().Add(-time.Second)
		if err := s.InsertSandbox(ctx, old); err != nil {
			t.Fatal(err)
		}
		move("sb-3", starting, api.StateRunning, "")
		move("sb-3", Live, api.StateStopped, "timeout expired")

		if err := s.InsertSnapshot(ctx, &Snapshot{ID: "sn-1", Tenant: "acme", SandboxID: "sb-1", State: api.SnapshotPending}); err != nil {
			t.Fatal(err)
		}
		// No change of state: no event.
		if _, err := s.SetSnapshotTaken(ctx, "sn-1", "", time.Millisecond, 1<<20); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MakeSnapshotDurable(ctx, "sn-1", "", Durable{StoredBytes: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FailSnapshot(ctx, "sn-1", "", "late", 0); !errors.Is(err, ErrTransition) {
			t.Fatalf("fail a durable snapshot: %v, want ErrTransition", err) // refused: no event
		}
		if err := s.InsertSnapshot(ctx, &Snapshot{ID: "sn-2", Tenant: "acme", SandboxID: "sb-1", State: api.SnapshotPending}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FailSnapshot(ctx, "sn-2", "", "disk full", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSnapshot(ctx, "sn-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.InsertSnapshot(ctx, &Snapshot{ID: "tb-1", State: api.SnapshotDurable}); err != nil {
			t.Fatal(err) // a template's base layer: no event
		}
		tb, _ := s.GetSnapshot(ctx, "tb-1")
		if _, err := s.RetryBaseLayer(ctx, tb, ""); err != nil {
			t.Fatal(err) // nor when it goes back to pending
		}
		if _, err := s.MakeSnapshotDurable(ctx, "tb-1", "", Durable{}); err != nil {
			t.Fatal(err) // or becomes durable again
		}
		if _, err := s.MakeSnapshotDurable(ctx, "sn-none", "", Durable{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("move of no snapshot: %v, want ErrNotFound", err)
		}

		t0 := time.Now()
		if _, err := s.RegisterNode(ctx, Node{ID: "n1", Addr: "n1:1"}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetNodeState(ctx, "n1", nil, NodeCordoned); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetNodeState(ctx, "n1", []string{NodeDraining}, NodeActive); err == nil {
			t.Fatal("a move from a state the node is not in was not refused")
		}
		if _, err := s.FenceStale(ctx, t0.Add(time.Nanosecond)); err != nil {
			t.Fatal(err)
		}

		type row struct{ kind, tenant, sandbox, snapshot, node, state, reason string }
		want := []row{
			{api.EventSandboxCreated, "acme", "sb-1", "", "", api.StateStarting, ""},
			{api.EventSandboxRunning, "acme", "sb-1", "", "", api.StateRunning, ""},
			{api.EventSandboxPaused, "acme", "sb-1", "", "", api.StatePaused, ""},
			{api.EventSandboxResumed, "acme", "sb-1", "", "", api.StateRunning, ""},
			{api.EventSandboxDeleted, "acme", "sb-1", "", "", api.StateStopped, "deleted"},
			{api.EventSandboxCreated, "acme", "sb-2", "sn-1", "", api.StateStarting, ""},
			{api.EventSandboxRestored, "acme", "sb-2", "sn-1", "", api.StateRunning, ""},
			{api.EventSandboxFailed, "acme", "sb-2", "", "", api.StateFailed, "its agent died"},
			{api.EventSandboxCreated, "other", "sb-3", "", "", api.StateStarting, ""},
			{api.EventSandboxRunning, "other", "sb-3", "", "", api.StateRunning, ""},
			{api.EventSandboxExpired, "other", "sb-3", "", "", api.StateStopped, "timeout expired"},
			{api.EventSnapshotPending, "acme", "sb-1", "sn-1", "", api.SnapshotPending, ""},
			{api.EventSnapshotDurable, "acme", "sb-1", "sn-1", "", api.SnapshotDurable, ""},
			{api.EventSnapshotPending, "acme", "sb-1", "sn-2", "", api.SnapshotPending, ""},
			{api.EventSnapshotFailed, "acme", "sb-1", "sn-2", "", api.SnapshotFailed, "disk full"},
			{api.EventSnapshotDeleted, "acme", "sb-1", "sn-1", "", "", ""},
			{api.EventNodeJoined, "", "", "", "n1", NodeActive, ""},
			{api.EventNodeState, "", "", "", "n1", NodeCordoned, ""},
			{api.EventNodeFenced, "", "", "", "n1", NodeFenced, "its lease lapsed"},
		}
		all, err := s.Events(ctx, EventQuery{Tenant: listing.AnyTenant, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var got []row
		for i, e := range all {
			got = append(got, row{e.Kind, e.Tenant, e.Sandbox, e.Snapshot, e.Node, e.State, e.Reason})
			if i > 0 && e.ID <= all[i-1].ID {
				t.Errorf("event %d has ID %d after %d", i, e.ID, all[i-1].ID)
			}
			if e.At.IsZero() || time.Since(e.At) > time.Minute {
				t.Errorf("event %+v: at %v", e, e.At)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("events:\n got %v\nwant %v", got, want)
		}

		query := func(q EventQuery) []string {
			t.Helper()
			q.Limit = cmp.Or(q.Limit, 100)
			evs, err := s.Events(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, e := range evs {
				kinds = append(kinds, e.Sandbox+" "+e.Snapshot+" "+e.Kind)
			}
			return kinds
		}
		acme, err := s.Events(ctx, EventQuery{Tenant: "acme", Limit: 100})
		if err != nil || len(acme) != 13 {
			t.Fatalf("acme's events: %d, %v; want 13", len(acme), err)
		}
		for _, c := range []struct {
			q    EventQuery
			want []string
		}{
			{EventQuery{Tenant: "other"}, []string{"sb-3  sandbox.created", "sb-3  sandbox.running", "sb-3  sandbox.expired"}},
			{EventQuery{Tenant: "acme", Sandbox: "sb-2"}, []string{"sb-2 sn-1 sandbox.created", "sb-2 sn-1 sandbox.restored", "sb-2  sandbox.failed"}},
			{EventQuery{Tenant: "acme", Snapshot: "sn-2"}, []string{"sb-1 sn-2 snapshot.pending", "sb-1 sn-2 snapshot.failed"}},
			{EventQuery{Tenant: "acme", Kinds: []string{api.EventSandboxFailed, api.EventSnapshotDeleted}}, []string{"sb-2  sandbox.failed", "sb-1 sn-1 snapshot.deleted"}},
			{EventQuery{Tenant: "nobody"}, nil},
			{EventQuery{Tenant: "acme", After: acme[11].ID}, []string{"sb-1 sn-1 snapshot.deleted"}},
			{EventQuery{Tenant: listing.AnyTenant, After: all[1].ID, Limit: 2}, []string{"sb-1  sandbox.paused", "sb-1  sandbox.resumed"}},
		} {
			if got := query(c.q); !slices.Equal(got, c.want) {
				t.Errorf("%+v: %q, want %q", c.q, got, c.want)
			}
		}

		// Trimming keeps the newest, and the IDs go on counting up.
		oldest, newest, err := s.EventBounds(ctx, listing.AnyTenant)
		if err != nil || oldest != all[0].ID || newest != all[len(all)-1].ID {
			t.Errorf("bounds %d, %d (%v); want %d, %d", oldest, newest, err, all[0].ID, all[len(all)-1].ID)
		}
		if n, err := s.TrimEvents(ctx, time.Now().Add(-time.Hour), 3); err != nil || n != int64(len(all)-3) {
			t.Errorf("trim to 3: %d, %v", n, err)
		}
		if oldest, _, _ := s.EventBounds(ctx, listing.AnyTenant); oldest != all[len(all)-3].ID {
			t.Errorf("oldest after the trim: %d, want %d", oldest, all[len(all)-3].ID)
		}
		if n, err := s.TrimEvents(ctx, time.Now().Add(time.Second), 100); err != nil || n != 3 {
			t.Errorf("trim by age: %d, %v", n, err)
		}
		if err := s.InsertSandbox(ctx, newSandbox("sb-4", "acme")); err != nil {
			t.Fatal(err)
		}
		if oldest, newest, _ := s.EventBounds(ctx, listing.AnyTenant); oldest != newest || newest <= all[len(all)-1].ID {
			t.Errorf("after trimming everything, the next event is %d..%d; want one above %d", oldest, newest, all[len(all)-1].ID)
		}
	})
}

// TestEventsCommitOrder: a reader that follows the events by position
// while many writers change sandboxes at once misses none: no event
// commits below one the reader has seen.
func TestEventsCommitOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		const writers, each = 8, 10
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					id := fmt.Sprintf("sb-%d-%d", w, i)
					if err := s.InsertSandbox(ctx, newSandbox(id, "acme")); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Transition(ctx, id, Transition{From: []string{api.StateStarting}, To: api.StateRunning}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		seen := map[int64]bool{}
		var after int64
		follow := func() {
			evs, err := s.Events(ctx, EventQuery{Tenant: "acme", After: after, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				seen[e.ID] = true
				after = e.ID
			}
		}
		for running := true; running; {
			select {
			case <-done:
				running = false
			default:
			}
			follow()
		}
		for range writers * each * 2 {
			follow()
		}
		all, err := s.Events(ctx, EventQuery{Tenant: "acme", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != writers*each*2 {
			t.Fatalf("%d events, want %d", len(all), writers*each*2)
		}
		for _, e := range all {
			if !seen[e.ID] {
				t.Errorf("the reader missed event %d (%s of %s): it committed below one it had read", e.ID, e.Kind, e.Sandbox)
			}
		}
	})
}

// TestEventIDsPerTenant (issue 35, row 12): a tenant's event IDs count its
// own events alone, so the gaps between them say nothing of another
// tenant's activity; the stream's bounds are the tenant's too.
func TestEventIDsPerTenant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		insert := func(id, tenant string) {
			t.Helper()
			if err := s.InsertSandbox(ctx, newSandbox(id, tenant)); err != nil {
				t.Fatal(err)
			}
		}
		insert("sb-a1", "acme")
		for i := range 5 {
			insert(fmt.Sprintf("sb-o%d", i), "other")
		}
		insert("sb-a2", "acme")
		evs, err := s.Events(ctx, EventQuery{Tenant: "acme", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		if !slices.Equal(ids, []int64{1, 2}) {
			t.Errorf("acme's event IDs %v around five of another tenant's; want [1 2]", ids)
		}
		if after, err := s.Events(ctx, EventQuery{Tenant: "acme", After: 1, Limit: 100}); err != nil || len(after) != 1 || after[0].Sandbox != "sb-a2" {
			t.Errorf("acme's events after 1: %+v, %v; want sb-a2's", after, err)
		}
		if oldest, newest, err := s.EventBounds(ctx, "acme"); err != nil || oldest != 1 || newest != 2 {
			t.Errorf("acme's bounds %d, %d (%v); want 1, 2", oldest, newest, err)
		}
		// The node-wide view (an admin's all_tenants) keeps one order.
		all, err := s.Events(ctx, EventQuery{Tenant: listing.AnyTenant, Limit: 100})
		if err != nil || len(all) != 7 {
			t.Fatalf("every tenant's events: %d, %v; want 7", len(all), err)
		}
		if oldest, newest, err := s.EventBounds(ctx, listing.AnyTenant); err != nil || oldest != all[0].ID || newest != all[6].ID {
			t.Errorf("node-wide bounds %d, %d (%v); want %d, %d", oldest, newest, err, all[0].ID, all[6].ID)
		}
		// Once a tenant's events are all trimmed, its IDs go on from where
		// they were, and the bounds say nothing older is held.
		if _, err := s.TrimEvents(ctx, time.Now().Add(time.Second), 100); err != nil {
			t.Fatal(err)
		}
		if oldest, newest, err := s.EventBounds(ctx, "acme"); err != nil || oldest != 3 || newest != 2 {
			t.Errorf("acme's bounds with nothing kept %d, %d (%v); want 3, 2", oldest, newest, err)
		}
		insert("sb-a3", "acme")
		if evs, err := s.Events(ctx, EventQuery{Tenant: "acme", After: 2, Limit: 100}); err != nil || len(evs) != 1 || evs[0].ID != 3 {
			t.Errorf("acme's event after the trim: %+v, %v; want ID 3", evs, err)
		}
	})
}

// TestEventSeqMigration: the events recorded before events were numbered
// per tenant keep their IDs as their positions, and a tenant's next event
// comes above every ID given before, so a client resuming from a position
// it got before the upgrade misses nothing and sees nothing twice.
func TestEventSeqMigration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		dsn := b.dsn(t)
		old, _, err := connect(dsn)
		if err != nil {
			t.Fatal(err)
		}
		before := slices.IndexFunc(migrations, func(m migration) bool { return strings.Contains(m.sqlite, "CREATE TABLE event_seqs") })
		if before < 0 {
			t.Fatal("no migration numbers events per tenant")
		}
		if err := old.migrateTo(ctx, before); err != nil {
			t.Fatal(err)
		}
		for i, tenant := range []string{"acme", "other", "other", "acme", "other"} {
			if _, err := old.db.ExecContext(ctx, `INSERT INTO events (at, kind, tenant, sandbox, snapshot, node, state, reason)
				VALUES (?, ?, ?, ?, '', '', ?, '')`, time.Now().UnixNano(), api.EventSandboxCreated, tenant,
				fmt.Sprintf("sb-old%d", i), api.StateStarting); err != nil {
				t.Fatal(err)
			}
		}
		// A tenant with a key and no event yet may hold a position too
		// (a stream's first message gives the newest ID).
		if _, err := old.db.ExecContext(ctx, `INSERT INTO api_keys (id, hash, tenant, admin, created_at) VALUES ('key-1', ?, 'quiet', ?, 0)`,
			[]byte("hash"), false); err != nil {
			t.Fatal(err)
		}
		old.Close()

		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		evs, err := s.Events(ctx, EventQuery{Tenant: "acme", Limit: 100})
		if err != nil || len(evs) != 2 || evs[0].ID != 1 || evs[1].ID != 4 {
			t.Fatalf("acme's old events %+v, %v; want IDs 1 and 4", evs, err)
		}
		for _, tenant := range []string{"acme", "quiet", "new"} {
			if err := s.InsertSandbox(ctx, newSandbox("sb-"+tenant, tenant)); err != nil {
				t.Fatal(err)
			}
		}
		for tenant, want := range map[string]int64{"acme": 6, "quiet": 6, "new": 1} {
			evs, err := s.Events(ctx, EventQuery{Tenant: tenant, After: 4, Limit: 100})
			if tenant == "new" {
				evs, err = s.Events(ctx, EventQuery{Tenant: tenant, Limit: 100})
			}
			if err != nil || len(evs) != 1 || evs[0].ID != want {
				t.Errorf("%s's first event after the upgrade: %+v, %v; want ID %d", tenant, evs, err, want)
			}
		}
	})
}
