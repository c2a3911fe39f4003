// Package backoff spaces out the attempts of something that may succeed
// later: polling for a device or a socket to appear, a blob call that
// failed, a pool refill. The wait starts at a base, doubles after each
// attempt up to a cap, and may be jittered so that many callers do not
// retry in step.
//
// It decides how long to wait and waits; it does not decide what is worth
// retrying, nor how many times: callers keep their own rules for that.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a wait that doubles after each use. The zero value waits 0
// every time. A Backoff is not safe for concurrent use: each loop keeps its
// own, as a value.
type Backoff struct {
	// Base is the first wait.
	Base time.Duration
	// Max caps the wait; 0 leaves it uncapped.
	Max time.Duration
	// Jitter picks each wait at random between half the current delay and
	// all of it ("equal jitter").
	Jitter bool

	cur time.Duration // the next delay before jitter; 0 before the first
}

// Next returns the wait before the next attempt and doubles the delay.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	if d <= 0 {
		d = b.Base
	}
	if b.Max > 0 {
		d = min(d, b.Max)
	}
	if d <= 0 {
		return 0
	}
	b.cur = d
	if d < 1<<62 { // else doubling would overflow
		b.cur = 2 * d
	}
	if b.Jitter {
		return d/2 + rand.N(d/2+1)
	}
	return d
}

// Reset makes the next wait Base again, after an attempt that succeeded.
func (b *Backoff) Reset() { b.cur = 0 }

// Wait waits Next, and reports false at once if done is (or gets) closed
// first. Pass ctx.Done() to bound it by a context.
func (b *Backoff) Wait(done <-chan struct{}) bool {
	return Sleep(done, b.Next())
}

// Sleep waits d, and reports false at once if done is (or gets) closed
// first.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return false
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

// Poll calls cond until it reports true or an error, waiting b between
// calls; it returns cond's error, or ctx's if ctx ends first. cond is
// called at once, and once more after each wait.
func Poll(ctx context.Context, b Backoff, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if !b.Wait(ctx.Done()) {
			return ctx.Err()
		}
	}
}
