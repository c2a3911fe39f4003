package client

import (
	"context"
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
