package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"doubles up to the cap", Backoff{Base: ms, Max: 10 * ms}, []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 10 * ms, 10 * ms}},
		{"uncapped", Backoff{Base: time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{"fixed", Backoff{Base: 10 * ms, Max: 10 * ms}, []time.Duration{10 * ms, 10 * ms, 10 * ms}},
		{"base above the cap", Backoff{Base: time.Second, Max: 10 * ms}, []time.Duration{10 * ms, 10 * ms}},
		{"zero", Backoff{}, []time.Duration{0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			for i, want := range tt.want {
				if got := b.Next(); got != want {
					t.Fatalf("wait %d = %v, want %v", i+1, got, want)
				}
			}
			b.Reset()
			if got := b.Next(); got != tt.want[0] {
				t.Fatalf("after Reset: %v, want %v", got, tt.want[0])
			}
		})
	}
}

func TestNextDoesNotOverflow(t *testing.T) {
	b := Backoff{Base: time.Duration(1) << 61}
	for range 10 {
		if d := b.Next(); d <= 0 {
			t.Fatalf("wait %v after doubling a large base", d)
		}
	}
}

func TestJitter(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: 1600 * time.Millisecond, Jitter: true}
	for i, want := range []time.Duration{100, 200, 400, 800, 1600, 1600, 1600} {
		want *= time.Millisecond
		if d := b.Next(); d < want/2 || d > want {
			t.Errorf("wait %d = %v, want in [%v, %v]", i+1, d, want/2, want)
		}
	}
}

func TestWait(t *testing.T) {
	b := Backoff{Base: time.Millisecond}
	if !b.Wait(make(chan struct{})) {
		t.Fatal("Wait with an open channel = false")
	}
	done := make(chan struct{})
	close(done)
	slow := Backoff{Base: time.Hour}
	start := time.Now()
	if slow.Wait(done) {
		t.Fatal("Wait with a closed channel = true")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait on a closed channel took %v", d)
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(context.Background(), Backoff{Base: time.Millisecond}, func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	boom := errors.New("boom")
	if err := Poll(context.Background(), Backoff{Base: time.Millisecond}, func() (bool, error) { return false, boom }); err != boom {
		t.Fatalf("Poll = %v, want cond's error", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := Poll(ctx, Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, func() (bool, error) { return false, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll = %v, want the deadline", err)
	}
}
