package layer

import (
	"context"
	"sync"
	"sync/atomic"
)

// forEach calls fn(ctx, worker, i) for every i in [0, n) from up to
// parallel goroutines (at least one); worker, in [0, parallel), names the
// goroutine, for per-worker buffers. The first error cancels the ctx given
// to fn, stops new calls and is returned once every call has ended; if ctx
// ends first, its error is.
func forEach(ctx context.Context, n, parallel int, fn func(ctx context.Context, worker, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	for w := range max(1, min(parallel, n)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, w, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if next.Load() < int64(n) {
		return ctx.Err() // cancelled before every call started
	}
	return nil
}
