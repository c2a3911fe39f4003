package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// TestSnapshotStateMachine: every pair of snapshot states is a move
// exactly when the machine lists it; each change makes its move with what
// it writes, and refuses, changing nothing, a snapshot in another state,
// of another node, or none.
func TestSnapshotStateMachine(t *testing.T) {
	all := []string{api.SnapshotPending, api.SnapshotDurable, api.SnapshotFailed}
	want := map[[2]string]bool{
		{api.SnapshotPending, api.SnapshotDurable}: true, {api.SnapshotPending, api.SnapshotFailed}: true,
		{api.SnapshotDurable, api.SnapshotPending}: true, {api.SnapshotFailed, api.SnapshotPending}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := CanMoveSnapshot(from, to); got != want[[2]string{from, to}] {
				t.Errorf("CanMoveSnapshot(%s, %s) = %v", from, to, got)
			}
		}
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		insert := func(id, tenant string) Snapshot {
			t.Helper()
			sn := Snapshot{ID: id, Tenant: tenant, SandboxID: "sb-1", Parent: "tb-0", State: api.SnapshotPending, Node: "n1"}
			if err := s.InsertSnapshot(ctx, &sn); err != nil {
				t.Fatal(err)
			}
			return sn
		}

		t.Log("pending: taken, then durable, by its node only")
		insert("sn-1", "acme")
		if _, err := s.SetSnapshotTaken(ctx, "sn-1", "n2", time.Second, 1); !errors.Is(err, ErrTransition) ||
			!strings.Contains(err.Error(), `node "n1"`) {
			t.Errorf("another node records sn-1 taken: %v, want ErrTransition naming n1", err)
		}
		got, err := s.SetSnapshotTaken(ctx, "sn-1", "n1", 3*time.Millisecond, 1<<30)
		if err != nil || got.State != api.SnapshotPending || got.Ack != 3*time.Millisecond || got.DiskBytes != 1<<30 {
			t.Fatalf("record sn-1 taken: %+v, %v", got, err)
		}
		if _, err := s.MakeSnapshotDurable(ctx, "sn-1", "n2", Durable{}); !errors.Is(err, ErrTransition) {
			t.Errorf("another node makes sn-1 durable: %v, want ErrTransition", err)
		}
		at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		got, err = s.MakeSnapshotDurable(ctx, "sn-1", "n1", Durable{
			Parent: "sn-0", ChangedBytes: 5, StoredBytes: 4, Upload: time.Second, At: at})
		if err != nil || got.State != api.SnapshotDurable || got.Parent != "sn-0" || got.ChangedBytes != 5 ||
			got.StoredBytes != 4 || got.Upload != time.Second || !got.DurableAt.Equal(at) ||
			got.Ack != 3*time.Millisecond || got.DiskBytes != 1<<30 {
			t.Fatalf("sn-1 pending → durable: %+v, %v", got, err)
		}
		if back, _ := s.GetSnapshot(ctx, "sn-1"); back != got {
			t.Errorf("sn-1 read back: %+v, want %+v", back, got)
		}

		t.Log("pending → failed, with why and what it stored")
		insert("sn-2", "acme")
		got, err = s.FailSnapshot(ctx, "sn-2", "n1", "disk full", 7)
		if err != nil || got.State != api.SnapshotFailed || got.Error != "disk full" || got.StoredBytes != 7 || !got.DurableAt.IsZero() {
			t.Fatalf("sn-2 pending → failed: %+v, %v", got, err)
		}

		t.Log("a snapshot written as it is taken learns its size and ack as it becomes durable")
		insert("sn-3", "acme")
		got, err = s.MakeSnapshotDurable(ctx, "sn-3", "n1", Durable{Parent: "sn-1", DiskBytes: 9, Ack: time.Millisecond})
		if err != nil || got.DiskBytes != 9 || got.Ack != time.Millisecond || got.DurableAt.IsZero() {
			t.Fatalf("sn-3 pending → durable with its size: %+v, %v", got, err)
		}

		t.Log("a tenant's durable and failed snapshots stay so")
		for _, tc := range []struct {
			name   string
			change func(id string) (Snapshot, error)
		}{
			{"record taken", func(id string) (Snapshot, error) { return s.SetSnapshotTaken(ctx, id, "n1", time.Hour, 2) }},
			{"make durable", func(id string) (Snapshot, error) {
				return s.MakeSnapshotDurable(ctx, id, "n1", Durable{StoredBytes: 99})
			}},
			{"fail", func(id string) (Snapshot, error) { return s.FailSnapshot(ctx, id, "n1", "late", 99) }},
			{"retry as a base layer", func(id string) (Snapshot, error) {
				sn, err := s.GetSnapshot(ctx, id)
				if err != nil {
					return Snapshot{}, err
				}
				return s.RetryBaseLayer(ctx, sn, "n1")
			}},
		} {
			for _, id := range []string{"sn-1", "sn-2"} {
				before, _ := s.GetSnapshot(ctx, id)
				_, err := tc.change(id)
				var te *TransitionError
				if !errors.As(err, &te) || !errors.Is(err, ErrTransition) || te.Record != "snapshot" || te.State != before.State {
					t.Errorf("%s of %s %s: %v, want a *TransitionError saying it is %[2]s", tc.name, before.State, id, err)
				}
				if after, _ := s.GetSnapshot(ctx, id); after != before {
					t.Errorf("%s of %s %s changed it: %+v, was %+v", tc.name, before.State, id, after, before)
				}
			}
		}
		if _, err := s.FailSnapshot(ctx, "sn-1", "n1", "late", 0); err == nil ||
			!strings.Contains(err.Error(), "snapshot sn-1: move to failed refused: it is durable, not pending") {
			t.Errorf("fail durable sn-1: %v", err)
		}
		sn1, _ := s.GetSnapshot(ctx, "sn-1")
		if _, err := s.RetryBaseLayer(ctx, sn1, "n1"); err == nil || !strings.Contains(err.Error(), "a tenant's snapshot") {
			t.Errorf("retry tenant's sn-1 as a base layer: %v, want refused as a tenant's", err)
		}

		t.Log("a template base layer goes back to pending, for the node that retries it")
		base := insert("tb-1", "")
		if _, err := s.RetryBaseLayer(ctx, base, "n2"); err == nil || errors.Is(err, ErrTransition) {
			t.Errorf("pending → pending: %v, want refused as no move of the machine", err)
		}
		failed, err := s.FailSnapshot(ctx, "tb-1", "n1", "blob store down", 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err = s.RetryBaseLayer(ctx, failed, "n2")
		if err != nil || got.State != api.SnapshotPending || got.Node != "n2" || got.Error != "" {
			t.Fatalf("tb-1 failed → pending: %+v, %v", got, err)
		}
		if _, err := s.RetryBaseLayer(ctx, failed, "n3"); !errors.Is(err, ErrTransition) {
			t.Errorf("retry tb-1 from a stale read: %v, want ErrTransition", err)
		}
		if _, err := s.MakeSnapshotDurable(ctx, "tb-1", "n1", Durable{}); !errors.Is(err, ErrTransition) {
			t.Errorf("the node that gave tb-1 up makes it durable: %v, want ErrTransition", err)
		}
		durable, err := s.MakeSnapshotDurable(ctx, "tb-1", "n2", Durable{})
		if err != nil {
			t.Fatal(err)
		}
		got, err = s.RetryBaseLayer(ctx, durable, "n2")
		if err != nil || got.State != api.SnapshotPending || !got.DurableAt.IsZero() {
			t.Fatalf("tb-1 durable → pending: %+v, %v", got, err)
		}
		moved := durable
		moved.Node = "n3" // read while another node held it
		if _, err := s.RetryBaseLayer(ctx, moved, "n2"); !errors.Is(err, ErrTransition) {
			t.Errorf("retry tb-1 of a node it is not: %v, want ErrTransition", err)
		}

		t.Log("none: ErrNotFound")
		none := Snapshot{ID: "sn-none", State: api.SnapshotFailed, Node: "n1"}
		for name, change := range map[string]func() (Snapshot, error){
			"record taken": func() (Snapshot, error) { return s.SetSnapshotTaken(ctx, none.ID, "n1", 0, 0) },
			"make durable": func() (Snapshot, error) { return s.MakeSnapshotDurable(ctx, none.ID, "n1", Durable{}) },
			"fail":         func() (Snapshot, error) { return s.FailSnapshot(ctx, none.ID, "n1", "x", 0) },
			"retry":        func() (Snapshot, error) { return s.RetryBaseLayer(ctx, none, "n1") },
		} {
			if _, err := change(); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrTransition) {
				t.Errorf("%s of no snapshot: %v, want ErrNotFound", name, err)
			}
		}
	})
}

// TestSnapshotFinishRace: of concurrent finishers of one pending snapshot
// (its upload making it durable, another failing it), exactly one wins, the
// others get a *TransitionError saying what it became, and its one event is
// the winner's.
func TestSnapshotFinishRace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		for round := range 5 {
			id := fmt.Sprintf("sn-%d", round)
			if err := s.InsertSnapshot(ctx, &Snapshot{ID: id, Tenant: "acme", SandboxID: "sb-1", State: api.SnapshotPending, Node: "n1"}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			won := map[string]int{}
			var refused []*TransitionError
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					<-start
					var err error
					if i%2 == 0 {
						_, err = s.MakeSnapshotDurable(ctx, id, "n1", Durable{StoredBytes: int64(i)})
					} else {
						_, err = s.FailSnapshot(ctx, id, "n1", fmt.Sprintf("finisher %d", i), int64(i))
					}
					mu.Lock()
					defer mu.Unlock()
					var te *TransitionError
					switch {
					case err == nil:
						won[[]string{api.SnapshotDurable, api.SnapshotFailed}[i%2]]++
					case errors.As(err, &te):
						refused = append(refused, te)
					default:
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			got, err := s.GetSnapshot(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(won) != 1 || won[got.State] != 1 || len(refused) != 7 {
				t.Errorf("%s: winners %v, %d refused, record %s", id, won, len(refused), got.State)
			}
			for _, te := range refused {
				if te.State != got.State {
					t.Errorf("%s: a loser was told it is %s, but it is %s", id, te.State, got.State)
				}
			}
			evs, err := s.Events(ctx, EventQuery{Tenant: listing.AnyTenant, Snapshot: id, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 2 || evs[1].State != got.State || evs[1].Reason != got.Error {
				t.Errorf("%s: events %+v, want pending then the winner's %s", id, evs, got.State)
			}
		}
	})
}

// TestSnapshotNames: a name is unique among a tenant's snapshots, whether
// recorded pending or durable, and free for another tenant; a refused
// insert records nothing and names the holder; a delete frees the name;
// of concurrent inserts of one name exactly one wins.
func TestSnapshotNames(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		insert := func(id, tenant, name, state string) error {
			return s.InsertSnapshot(ctx, &Snapshot{ID: id, Tenant: tenant, Name: name, SandboxID: "sb-1", State: state, Node: "n1"})
		}
		if err := insert("sn-1", "acme", "build-1", api.SnapshotPending); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetSnapshot(ctx, "sn-1"); err != nil || got.Name != "build-1" {
			t.Fatalf("sn-1 read back: %+v, %v; want named build-1", got, err)
		}
		if got, err := s.SnapshotByName(ctx, "acme", "build-1"); err != nil || got.ID != "sn-1" {
			t.Errorf("acme's build-1: %+v, %v; want sn-1", got, err)
		}
		for _, tc := range []struct{ tenant, name string }{{"globex", "build-1"}, {"acme", "build-2"}, {"acme", ""}, {"", "build-1"}} {
			if got, err := s.SnapshotByName(ctx, tc.tenant, tc.name); !errors.Is(err, ErrNotFound) {
				t.Errorf("%q's %q: %+v, %v; want ErrNotFound", tc.tenant, tc.name, got, err)
			}
		}

		t.Log("another snapshot of the tenant cannot take it, pending or durable")
		for _, state := range []string{api.SnapshotPending, api.SnapshotDurable} {
			err := insert("sn-2", "acme", "build-1", state)
			var nt *NameTakenError
			if !errors.As(err, &nt) || nt.Name != "build-1" || nt.Holder != "sn-1" || !strings.Contains(err.Error(), "sn-1") {
				t.Errorf("a %s sn-2 named build-1: %v, want a *NameTakenError naming sn-1", state, err)
			}
			if _, err := s.GetSnapshot(ctx, "sn-2"); !errors.Is(err, ErrNotFound) {
				t.Errorf("the refused %s sn-2 was recorded: %v", state, err)
			}
		}

		t.Log("another tenant may, and unnamed snapshots are many")
		if err := insert("sn-3", "globex", "build-1", api.SnapshotPending); err != nil {
			t.Errorf("globex's build-1: %v", err)
		}
		for _, id := range []string{"sn-4", "sn-5"} {
			if err := insert(id, "acme", "", api.SnapshotPending); err != nil {
				t.Errorf("unnamed %s: %v", id, err)
			}
		}
		if got, _ := s.SnapshotByName(ctx, "globex", "build-1"); got.ID != "sn-3" {
			t.Errorf("globex's build-1 is %q, want sn-3", got.ID)
		}

		t.Log("a delete frees the name")
		if err := s.DeleteSnapshot(ctx, "sn-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SnapshotByName(ctx, "acme", "build-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("build-1 after its snapshot's delete: %v, want ErrNotFound", err)
		}
		if err := insert("sn-6", "acme", "build-1", api.SnapshotPending); err != nil {
			t.Errorf("build-1 taken again after the delete: %v", err)
		}

		t.Log("of concurrent inserts of one name, one wins")
		var mu sync.Mutex
		var won []string
		var holders []string
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				id := fmt.Sprintf("sn-race%d", i)
				err := insert(id, "acme", "race", api.SnapshotPending)
				mu.Lock()
				defer mu.Unlock()
				var nt *NameTakenError
				switch {
				case err == nil:
					won = append(won, id)
				case errors.As(err, &nt):
					holders = append(holders, nt.Holder)
				default:
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 || len(holders) != 7 {
			t.Fatalf("winners %v, %d refused; want one winner and 7 refused", won, len(holders))
		}
		for _, h := range holders {
			if h != won[0] {
				t.Errorf("a loser was told %q holds the name, but %s won", h, won[0])
			}
		}
	})
}
