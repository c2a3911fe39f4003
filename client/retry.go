package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"syscall"

	"warren/internal/backoff"
)

// retryClass says when a call may be sent again after a failed attempt.
type retryClass int

const (
	// retryNever: the call has effects that must not happen twice, or its
	// body cannot be replayed (exec, create, stdin, file upload). Sent once.
	retryNever retryClass = iota
	// retryRefused: repeated only when the connection was refused, which
	// proves that nothing reached the server.
	retryRefused
	// retryIdempotent: repeating the call changes nothing (GET, DELETE of a
	// sandbox). Also repeated on a broken connection and on 502 and 503.
	retryIdempotent
)

// allows reports whether a call of class r may be repeated after an attempt
// that got the HTTP status (0 when none came back) or failed with err.
func (r retryClass) allows(status int, err error) bool {
	switch {
	case r == retryNever:
		return false
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable:
		return r == retryIdempotent
	case status != 0:
		return false
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return false
	case refused(err):
		return true
	default:
		return r == retryIdempotent
	}
}

// refused reports whether err is a refused connection: the request was
// never sent.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// waits is the backoff between the attempts of one call: c.backoff
// doubled per attempt, capped at 16 times it, with jitter so that many
// clients do not retry in step.
func (c *Client) waits() backoff.Backoff {
	return backoff.Backoff{Base: c.backoff, Max: 16 * c.backoff, Jitter: true}
}

// idempotencyKeyOf is the context key of WithIdempotencyKey.
type idempotencyKeyOf struct{}

// WithIdempotencyKey makes the create, snapshot or restore called with ctx
// send key as its idempotency key (docs/API.md, "Retries"): however often
// it is sent, from this process or another that uses the same key, it
// takes effect once and answers the same. Without one, each such call
// makes a key of its own, which makes its own retries safe.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyOf{}, key)
}

// once makes cl a call sent under an idempotency key (ctx's, or a new
// one), which may then be repeated like an idempotent one.
func once(ctx context.Context, cl *call) *call {
	key, _ := ctx.Value(idempotencyKeyOf{}).(string)
	if key == "" {
		b := make([]byte, 16)
		rand.Read(b)
		key = hex.EncodeToString(b)
	}
	cl.idempotencyKey, cl.retry = key, retryIdempotent
	return cl
}
