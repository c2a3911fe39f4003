package store

import (
	"context"
	"errors"
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
		all := []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateStopped, api.StateFailed}
		want := map[[2]string]bool{
			{api.StateStarting, api.StateRunning}: true, {api.StateStarting, api.StateStopped}: true, {api.StateStarting, api.StateFailed}: true,
			{api.StateRunning, api.StatePaused}: true, {api.StateRunning, api.StateStopped}: true, {api.StateRunning, api.StateFailed}: true,
			{api.StatePaused, api.StateRunning}: true, {api.StatePaused, api.StateStopped}: true, {api.StatePaused, api.StateFailed}: true,
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
