package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRequestClaims: one claim of a key wins, however many race for it on
// however many connections; the others see it running, then its answer;
// a released key is claimed anew; old keys are purged.
func TestRequestClaims(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		now := time.Now()
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				r, claimed, err := s.ClaimRequest(ctx, "acme", "k1", "req-a", now)
				if err != nil {
					t.Error(err)
					return
				}
				if claimed {
					wins.Add(1)
				} else if r.Status != 0 || r.Request != "req-a" {
					t.Errorf("a loser saw %+v; want the running request", r)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d claims of one key won", wins.Load())
		}
		if err := s.AnswerRequest(ctx, "acme", "k1", 201, []byte(`{"id":"sb-1"}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.AnswerRequest(ctx, "acme", "k1", 500, nil); !errors.Is(err, ErrNotFound) {
			t.Errorf("a second answer: %v, want ErrNotFound", err)
		}
		r, claimed, err := s.ClaimRequest(ctx, "acme", "k1", "req-a", now)
		if err != nil || claimed || r.Status != 201 || string(r.Answer) != `{"id":"sb-1"}` {
			t.Errorf("claim after the answer: %+v, %v, %v", r, claimed, err)
		}
		if _, claimed, _ := s.ClaimRequest(ctx, "other", "k1", "req-b", now); !claimed {
			t.Error("another tenant's key of the same name was not its own")
		}
		if _, claimed, _ := s.ClaimRequest(ctx, "acme", "k2", "req-c", now); !claimed {
			t.Fatal("a new key was not claimed")
		}
		if err := s.ReleaseRequest(ctx, "acme", "k2"); err != nil {
			t.Fatal(err)
		}
		if _, claimed, _ := s.ClaimRequest(ctx, "acme", "k2", "req-c", now); !claimed {
			t.Error("a released key was not claimed again")
		}
		if n, err := s.PurgeRequests(ctx, now.Add(time.Second)); err != nil || n != 3 {
			t.Errorf("PurgeRequests = %d, %v; want 3", n, err)
		}
	})
}
