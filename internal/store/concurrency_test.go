package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"warren/api"
)

// TestOpenRace: stores opening one new PostgreSQL database at once
// (control-plane replicas starting together) migrate it exactly once:
// every Open succeeds, where a second run of any step would fail (its
// tables exist), and the schema is complete. A SQLite database belongs to
// one server (the data directory's lock): concurrent first opens of one
// file may fail busy while it switches to WAL mode.
func TestOpenRace(t *testing.T) {
	dsn := pg.Database(t)
	ctx := context.Background()
	const n = 8
	stores := make([]*Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(ctx, dsn)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	if v, err := stores[0].schemaVersion(ctx, stores[0].db.sql); err != nil || v != len(migrations) {
		t.Errorf("schema version %d (%v), want %d", v, err, len(migrations))
	}
	if err := stores[n-1].InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
		t.Errorf("InsertSandbox after the race: %v", err)
	}
}

// TestTransitionSteps: goroutines race every move of one sandbox, each
// from the state and version it read. Each step has exactly one winner,
// every loser gets a *TransitionError saying the record moved on, and the
// record ends as the last winner wrote it: no move overwrote another.
func TestTransitionSteps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); err != nil {
			t.Fatal(err)
		}
		const workers, steps = 8, 40
		var mu sync.Mutex
		winners := map[int64]string{} // the version moved from → who won it
		losses := 0
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for {
					cur, err := s.GetSandbox(ctx, "sb-1")
					if err != nil {
						t.Error(err)
						return
					}
					if cur.Version > steps {
						return
					}
					to := api.StatePaused
					if cur.State != api.StateRunning {
						to = api.StateRunning
					}
					me := fmt.Sprintf(`{"worker":%d,"from":%d}`, w, cur.Version)
					moved, err := s.Transition(ctx, "sb-1", Transition{
						From: []string{cur.State}, To: to, Version: cur.Version, RuntimeState: []byte(me)})
					var te *TransitionError
					switch {
					case err == nil:
						if moved.Version != cur.Version+1 || moved.State != to || string(moved.RuntimeState) != me {
							t.Errorf("won from version %d: record %s at version %d holding %s", cur.Version, moved.State, moved.Version, moved.RuntimeState)
						}
						mu.Lock()
						if other, ok := winners[cur.Version]; ok {
							t.Errorf("two winners from version %d: %s and %s", cur.Version, other, me)
						}
						winners[cur.Version] = me
						mu.Unlock()
					case errors.As(err, &te):
						if te.Version <= cur.Version {
							t.Errorf("refused from version %d, but the record is at version %d", cur.Version, te.Version)
						}
						mu.Lock()
						losses++
						mu.Unlock()
					default:
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		got, err := s.GetSandbox(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		// Version 1 is starting; every move after puts it at running on an
		// even version and at paused on an odd one.
		wantState := api.StateRunning
		if got.Version%2 == 1 {
			wantState = api.StatePaused
		}
		if got.Version != steps+1 || len(winners) != steps || got.State != wantState || string(got.RuntimeState) != winners[steps] {
			t.Errorf("record %s at version %d holding %s; %d winners, the last %s", got.State, got.Version, got.RuntimeState, len(winners), winners[steps])
		}
		t.Logf("%d steps won, %d moves refused", len(winners), losses)
	})
}
