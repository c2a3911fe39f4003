// Package warmpool keeps a few expensive things made ahead of demand (the
// network's routers, the container runtime's spawned inits), so that a
// create takes a ready one instead of making it. One goroutine refills the
// pool; it waits for a pause in demand before it makes anything, because
// making competes with the creates that are running, and it retries a
// failed make with a growing wait, so one failure never leaves the pool
// empty for good.
//
// It does not check what it hands out: an item may have gone bad while it
// waited, and the caller that takes it decides (and discards it if so).
package warmpool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"warren/internal/backoff"
)

// Config says what a Pool keeps and how.
type Config[T any] struct {
	// Size is how many items are kept ready (SetSize changes it); 0 makes
	// nothing.
	Size int
	// Make makes one item. It is called only from the pool's goroutine, one
	// call at a time, never after Close has returned.
	Make func() (T, error)
	// Discard ends an item that was made but will not be taken: the ones
	// still ready at Close.
	Discard func(T) error
	// Quiet is how long no Take or Busy must have happened before the pool
	// makes an item.
	Quiet time.Duration
	// Retry spaces the attempts after a failed Make; it is reset by one
	// that succeeds. The zero value waits 1s, doubling up to 30s, jittered.
	Retry backoff.Backoff
	// Setup, if set, runs first on the pool's goroutine, which then runs
	// every Make: to pin it to its OS thread and lower that thread's
	// priority, say.
	Setup func()
	// Log gets a warning per failed Make (default: none).
	Log *slog.Logger
}

// Pool is a warm pool. Its methods are safe for concurrent use.
type Pool[T any] struct {
	cfg  Config[T]
	wake chan struct{} // a Take or Busy happened; buffered, 1
	last atomic.Int64  // unix nanoseconds of the latest Take or Busy; 0: none

	mu      sync.Mutex // guards the fields below
	ready   []T
	started bool // Start was called (or Close: a later Start does nothing)
	closed  bool // Close was called: what is put back is discarded
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine has stopped; nil if never started
}

// New makes a pool that starts filling at Start.
func New[T any](cfg Config[T]) *Pool[T] {
	if cfg.Retry == (backoff.Backoff{}) {
		cfg.Retry = backoff.Backoff{Base: time.Second, Max: 30 * time.Second, Jitter: true}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Pool[T]{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Start starts filling the pool. Calls after the first, or after Close, do
// nothing.
func (p *Pool[T]) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.run(ctx)
}

// Take returns a ready item, the one made last, or false when there is
// none. Like Busy, it holds the next refill back by Config.Quiet.
func (p *Pool[T]) Take() (T, bool) {
	// Busy after the item is out: woken earlier, the goroutine could find
	// the pool full and go back to waiting for a wake that has come.
	defer p.Busy()
	p.mu.Lock()
	defer p.mu.Unlock()
	var item T
	n := len(p.ready)
	if n == 0 {
		return item, false
	}
	item, p.ready = p.ready[n-1], p.ready[:n-1]
	return item, true
}

// Busy says demand is running now (a create began), which holds the next
// refill back by Config.Quiet.
func (p *Pool[T]) Busy() {
	p.last.Store(time.Now().UnixNano())
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Put gives back an item that was taken but not used; it is discarded
// when the pool is full or closed.
func (p *Pool[T]) Put(item T) error {
	p.mu.Lock()
	if p.closed || len(p.ready) >= p.cfg.Size {
		p.mu.Unlock()
		return p.cfg.Discard(item)
	}
	p.ready = append(p.ready, item)
	p.mu.Unlock()
	return nil
}

// SetSize changes how many items are kept ready. Items beyond a smaller
// size are discarded, the oldest first.
func (p *Pool[T]) SetSize(n int) error {
	p.mu.Lock()
	p.cfg.Size = max(n, 0)
	var extra []T
	if over := len(p.ready) - p.cfg.Size; over > 0 {
		extra = append(extra, p.ready[:over]...)
		p.ready = append(p.ready[:0], p.ready[over:]...)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	var errs []error
	for _, item := range extra {
		errs = append(errs, p.cfg.Discard(item))
	}
	return errors.Join(errs...)
}

// Ready returns the items ready now, which stay in the pool.
func (p *Pool[T]) Ready() []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]T(nil), p.ready...)
}

// Close stops refilling, waits for a Make under way, and discards the
// items still ready. Items taken earlier are the takers'.
func (p *Pool[T]) Close() error {
	p.mu.Lock()
	p.started, p.closed = true, true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var errs []error
	for _, item := range ready {
		errs = append(errs, p.cfg.Discard(item))
	}
	return errors.Join(errs...)
}

func (p *Pool[T]) run(ctx context.Context) {
	defer close(p.done)
	if p.cfg.Setup != nil {
		p.cfg.Setup()
	}
	retry := p.cfg.Retry
	var notBefore time.Time // after a failed Make: when to try again
	for ctx.Err() == nil {
		var timer *time.Timer // nil: wait for a Take or Busy
		if p.short() {
			wait := max(p.cfg.Quiet-time.Since(time.Unix(0, p.last.Load())), time.Until(notBefore))
			if wait <= 0 {
				item, err := p.cfg.Make()
				if err == nil {
					p.mu.Lock()
					p.ready = append(p.ready, item)
					p.mu.Unlock()
					retry.Reset()
					continue
				}
				wait = retry.Next()
				notBefore = time.Now().Add(wait)
				p.cfg.Log.Warn("warm pool refill failed", "err", err, "retry_in", wait)
			}
			timer = time.NewTimer(wait)
		}
		var fire <-chan time.Time
		if timer != nil {
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// short reports whether fewer than Config.Size items are ready.
func (p *Pool[T]) short() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready) < p.cfg.Size
}
