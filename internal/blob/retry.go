package blob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"warren/internal/backoff"
)

// Retry wraps a Store and repeats a call that failed, waiting longer after
// each failure: Base, then twice that, and so on up to Max, each wait
// randomly shortened by up to half so that many callers spread out. It
// suits backends whose failures are often passing (a network, a busy S3
// server); the Store contract lets any call repeat.
//
// It never repeats a call that failed with ErrNotFound or ErrInvalidKey, or
// because the context ended: the answer would not change. It stops waiting
// as soon as the context ends. When it gives up, the error says how many
// attempts were made and wraps the last failure.
//
// The zero values of the fields pick defaults; a Retry is used as a value
// or pointer, and is safe for concurrent use if the Store is.
type Retry struct {
	Store
	// Attempts is how many times a call is tried in all (default 4).
	Attempts int
	// Base is the wait after the first failure (default 100ms).
	Base time.Duration
	// Max caps every wait (default 5s).
	Max time.Duration
	// Log gets one warning per failed attempt that will be retried
	// (default: no logging).
	Log *slog.Logger
}

var _ Store = Retry{}

// Put calls the Store's Put until it succeeds or the Retry gives up.
func (r Retry) Put(ctx context.Context, key string, data []byte) error {
	_, err := retry(ctx, r, "put", key, func() (struct{}, error) {
		return struct{}{}, r.Store.Put(ctx, key, data)
	})
	return err
}

// Get calls the Store's Get until it succeeds or the Retry gives up.
func (r Retry) Get(ctx context.Context, key string) ([]byte, error) {
	return retry(ctx, r, "get", key, func() ([]byte, error) {
		return r.Store.Get(ctx, key)
	})
}

// Stat calls the Store's Stat until it succeeds or the Retry gives up.
func (r Retry) Stat(ctx context.Context, key string) (Info, error) {
	return retry(ctx, r, "stat", key, func() (Info, error) {
		return r.Store.Stat(ctx, key)
	})
}

// Delete calls the Store's Delete until it succeeds or the Retry gives up.
func (r Retry) Delete(ctx context.Context, key string) error {
	_, err := retry(ctx, r, "delete", key, func() (struct{}, error) {
		return struct{}{}, r.Store.Delete(ctx, key)
	})
	return err
}

// List calls the Store's List until it succeeds or the Retry gives up.
func (r Retry) List(ctx context.Context, prefix string) ([]Info, error) {
	return retry(ctx, r, "list", prefix, func() ([]Info, error) {
		return r.Store.List(ctx, prefix)
	})
}

// retry runs call up to r.Attempts times. A generic function, not a
// method, because methods cannot have type parameters. Its errors do not
// repeat op and key: the Store's own errors name them.
func retry[T any](ctx context.Context, r Retry, op, key string, call func() (T, error)) (T, error) {
	tries := r.Attempts
	if tries <= 0 {
		tries = 4
	}
	wait := r.Base
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	limit := r.Max
	if limit <= 0 {
		limit = 5 * time.Second
	}
	waits := backoff.Backoff{Base: wait, Max: limit, Jitter: true}
	for n := 1; ; n++ {
		v, err := call()
		if err == nil || !retryable(ctx, err) {
			if err != nil && n > 1 {
				err = fmt.Errorf("after %s: %w", attempts(n), err)
			}
			return v, err
		}
		if n == tries {
			return v, fmt.Errorf("gave up after %s: %w", attempts(n), err)
		}
		d := waits.Next()
		if r.Log != nil {
			r.Log.Warn("blob call failed, retrying", "op", op, "key", key,
				"attempt", n, "wait", d, "err", err)
		}
		if !backoff.Sleep(ctx.Done(), d) {
			return v, fmt.Errorf("stopped after %s: %w (last error: %w)",
				attempts(n), context.Cause(ctx), err)
		}
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// retryable reports whether err may pass if the call is made again.
func retryable(ctx context.Context, err error) bool {
	switch {
	case ctx.Err() != nil,
		errors.Is(err, ErrNotFound),
		errors.Is(err, ErrInvalidKey),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}
