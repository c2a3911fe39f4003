// Package wait is the one way tests wait for something to happen: poll a
// condition, at a short interval that grows, until it holds or the time
// allowed is up. It is for tests only (it fails a testing.TB); the node's
// own retry and poll loops use internal/backoff.
package wait

import (
	"context"
	"testing"
	"time"

	"warren/internal/backoff"
)

// interval is how often For polls: at once, then after 1 ms, doubling to
// 50 ms, so that a quick condition is seen quickly and a slow one is not
// polled in a busy loop.
var interval = backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}

// For calls cond until it reports true, and fails t (Fatalf, so from the
// test's goroutine only) when it has not within the time allowed; what
// says what was waited for.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := backoff.Poll(ctx, interval, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}
