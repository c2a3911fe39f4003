package blob_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"warren/internal/blob"
	"warren/internal/blob/file"
)

// flaky is a Store that runs fail before passing each call on to the
// Store it wraps, and fails the call when fail returns an error.
type flaky struct {
	blob.Store
	calls atomic.Int32
	fail  func(n int32) error // n counts calls from 1
}

func (f *flaky) check() error {
	return f.fail(f.calls.Add(1))
}

func (f *flaky) Put(ctx context.Context, key string, data []byte) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Put(ctx, key, data)
}

func (f *flaky) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *flaky) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := f.check(); err != nil {
		return blob.Info{}, err
	}
	return f.Store.Stat(ctx, key)
}

func (f *flaky) Delete(ctx context.Context, key string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Delete(ctx, key)
}

func (f *flaky) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

var errFlaky = errors.New("connection reset (injected)")

// failFirst fails the first n calls.
func failFirst(n int32) func(int32) error {
	return func(call int32) error {
		if call <= n {
			return errFlaky
		}
		return nil
	}
}

func newFlaky(t *testing.T, fail func(int32) error) *flaky {
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &flaky{Store: s, fail: fail}
}

func TestRetryRecovers(t *testing.T) {
	f := newFlaky(t, failFirst(2))
	r := blob.Retry{Store: f, Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}
	if err := r.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatalf("Put after 2 failures with 3 attempts: %v", err)
	}
	if got := f.calls.Load(); got != 3 {
		t.Errorf("calls = %d, want 3", got)
	}
	f.fail = failFirst(f.calls.Load() + 1)
	got, err := r.Get(t.Context(), "k")
	if err != nil || string(got) != "v" {
		t.Fatalf("Get = %q, %v; want v", got, err)
	}
	for _, call := range []func() error{
		func() error { _, err := r.Stat(t.Context(), "k"); return err },
		func() error { _, err := r.List(t.Context(), ""); return err },
		func() error { return r.Delete(t.Context(), "k") },
	} {
		f.fail = failFirst(f.calls.Load() + 1)
		if err := call(); err != nil {
			t.Errorf("after one failure: %v", err)
		}
	}
}

func TestRetryGivesUp(t *testing.T) {
	f := newFlaky(t, failFirst(1000))
	var logs strings.Builder
	r := blob.Retry{Store: f, Attempts: 4, Base: time.Millisecond, Max: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	err := r.Put(t.Context(), "k", []byte("v"))
	if !errors.Is(err, errFlaky) || !strings.Contains(err.Error(), "4 attempts") {
		t.Fatalf("Put = %v, want the injected error after 4 attempts", err)
	}
	if got := f.calls.Load(); got != 4 {
		t.Errorf("calls = %d, want 4", got)
	}
	// One warning per failure that was retried, the last one not.
	if got := strings.Count(logs.String(), "retrying"); got != 3 || !strings.Contains(logs.String(), "op=put key=k attempt=3") {
		t.Errorf("logged %d retries, want 3 ending with attempt 3:\n%s", got, logs.String())
	}
}

// TestRetryFinal checks the errors that no retry can cure.
func TestRetryFinal(t *testing.T) {
	tests := []struct {
		name string
		call func(r blob.Retry) error
		want error
	}{
		{"not found", func(r blob.Retry) error {
			_, err := r.Get(t.Context(), "missing")
			return err
		}, blob.ErrNotFound},
		{"invalid key", func(r blob.Retry) error {
			return r.Put(t.Context(), "Bad//Key", nil)
		}, blob.ErrInvalidKey},
		{"invalid prefix", func(r blob.Retry) error {
			_, err := r.List(t.Context(), "/")
			return err
		}, blob.ErrInvalidKey},
		{"cancelled", func(r blob.Retry) error {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return r.Put(ctx, "k", []byte("v"))
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlaky(t, failFirst(0))
			r := blob.Retry{Store: f, Attempts: 5, Base: time.Millisecond}
			if err := tt.call(r); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := f.calls.Load(); got != 1 {
				t.Errorf("calls = %d, want 1 (no retry)", got)
			}
		})
	}
}

// TestRetryNotFoundAfterFailure checks that a retry that ends in
// ErrNotFound keeps it testable and counts the attempts.
func TestRetryNotFoundAfterFailure(t *testing.T) {
	f := newFlaky(t, failFirst(1))
	r := blob.Retry{Store: f, Attempts: 5, Base: time.Millisecond}
	_, err := r.Stat(t.Context(), "missing")
	if !errors.Is(err, blob.ErrNotFound) || !strings.Contains(err.Error(), "2 attempts") {
		t.Fatalf("Stat = %v, want ErrNotFound after 2 attempts", err)
	}
}

// TestRetryStopsWaiting checks that a context ending during the wait ends
// the call at once rather than after the wait.
func TestRetryStopsWaiting(t *testing.T) {
	f := newFlaky(t, failFirst(1000))
	r := blob.Retry{Store: f, Attempts: 10, Base: time.Hour, Max: time.Hour}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.Put(ctx, "k", []byte("v"))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errFlaky) {
		t.Fatalf("Put = %v, want the deadline and the last injected error", err)
	}
	if !strings.Contains(err.Error(), "after 1 attempt:") {
		t.Errorf("Put = %v, want it to count 1 attempt", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Put returned after %v, want soon after the 50ms deadline", d)
	}
	if got := f.calls.Load(); got != 1 {
		t.Errorf("calls = %d, want 1", got)
	}
}

// TestRetryBackoff checks that waits grow and stay under Max.
func TestRetryBackoff(t *testing.T) {
	f := newFlaky(t, failFirst(1000))
	var stamps []time.Time
	inner := f.fail
	f.fail = func(n int32) error {
		stamps = append(stamps, time.Now())
		return inner(n)
	}
	r := blob.Retry{Store: f, Attempts: 5, Base: 20 * time.Millisecond, Max: 40 * time.Millisecond}
	if err := r.Delete(t.Context(), "k"); err == nil {
		t.Fatal("Delete succeeded")
	}
	if len(stamps) != 5 {
		t.Fatalf("calls = %d, want 5", len(stamps))
	}
	// Waits are 20, 40, 40, 40ms before jitter, which takes up to half.
	for i, lo := range []time.Duration{10, 20, 20, 20} {
		if d := stamps[i+1].Sub(stamps[i]); d < lo*time.Millisecond {
			t.Errorf("wait %d = %v, want at least %v", i+1, d, lo*time.Millisecond)
		}
	}
}
