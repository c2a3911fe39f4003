package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"time"

	"warren/api"
)

// Idempotency keys (docs/API.md, "Retries"): a create, restore, fork,
// snapshot or delete sent with an Idempotency-Key header takes effect once. Its
// answer is kept, and a request with the same key gets that answer again
// (with Idempotent-Replayed: true) instead of a second effect, on any
// server of the fleet: the key is claimed in the shared store before the
// request runs. It runs to its end even if its caller leaves. A request
// still running under the key is waited for; the same key with another
// request is refused. A request that fails with a 5xx (or no answer at
// all) releases its key, so a retry runs it again.

// idempotent are the routes that honour an Idempotency-Key.
var idempotent = map[string]bool{
	"POST /v1/sandboxes":                true,
	"POST /v1/snapshots/{id}/restore":   true,
	"POST /v1/sandboxes/{id}/fork":      true,
	"POST /v1/sandboxes/{id}/snapshots": true,
	"DELETE /v1/sandboxes/{id}":         true,
}

// Requests keeps the requests made with an idempotency key, and their
// answers. It may be called concurrently, from several servers at once.
type Requests interface {
	// Claim records that tenant's request (a digest) runs under key and
	// returns nil; or returns the one that already has the key.
	Claim(ctx context.Context, tenant, key, request string) (*Answer, error)
	// Answer records the claimed request's answer.
	Answer(ctx context.Context, tenant, key string, status int, body []byte) error
	// Release forgets the claimed request: a retry runs it again.
	Release(ctx context.Context, tenant, key string) error
}

// Answer is a request made under an idempotency key.
type Answer struct {
	// Request is the digest of the request the key was first used with.
	Request string
	// Status is its answer's status; 0 while it runs.
	Status int
	Body   []byte
}

const (
	// maxIdempotencyKey bounds a key's length.
	maxIdempotencyKey = 255
	// waitForRunning bounds how long a retry waits for the request that
	// holds its key (a restore of many sandboxes takes a while).
	waitForRunning = 2 * time.Minute
	// maxAnswer bounds an answer kept for a retry: a restore of the most
	// sandboxes answers in less.
	maxAnswer = 4 << 20
)

// once runs handle for r at most once per idempotency key, as the package
// comment says; r has one (the header is set).
func (s *Server) once(w http.ResponseWriter, r *http.Request, pattern string, handle handlerFunc) error {
	key := r.Header.Get(api.IdempotencyKeyHeader)
	if len(key) > maxIdempotencyKey || !printable(key) {
		return api.Errorf(api.CodeBadRequest, "the %s header must be 1-%d printable ASCII characters", api.IdempotencyKeyHeader, maxIdempotencyKey)
	}
	if s.opts.Requests == nil {
		return api.Errorf(api.CodeBadRequest, "this server keeps no idempotency keys: send the request without %s", api.IdempotencyKeyHeader)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		return api.Errorf(api.CodeBadRequest, "read the body: %v", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sum := sha256.Sum256(append([]byte(pattern+" "+r.URL.Path+"?"+r.URL.RawQuery+"\n"), body...))
	digest := hex.EncodeToString(sum[:])
	tenant := caller(r).Tenant
	ctx := r.Context()
	prior, err := s.opts.Requests.Claim(ctx, tenant, key, digest)
	deadline := time.Now().Add(waitForRunning)
	for err == nil && prior != nil && prior.Status == 0 && prior.Request == digest {
		if time.Now().After(deadline) {
			return api.Errorf(api.CodeConflict, "the request with idempotency key %q is still running: retry later", key)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		prior, err = s.opts.Requests.Claim(ctx, tenant, key, digest)
	}
	switch {
	case err != nil:
		return err
	case prior != nil && prior.Request != digest:
		return api.Errorf(api.CodeBadRequest, "idempotency key %q was used with another request: use a new key for a new request", key)
	case prior != nil:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(api.ReplayedHeader, "true")
		w.WriteHeader(prior.Status)
		_, err := w.Write(prior.Body)
		return err
	}
	// Under a key the request's effect does not hang on its caller: one
	// that left (a control replica that died, a client that timed out)
	// retries, and must find this request's answer rather than a request
	// cut short.
	r = r.WithContext(context.WithoutCancel(ctx))
	rec := &answerWriter{ResponseWriter: w}
	herr := handle(rec, r)
	if herr != nil && !began(w) {
		s.WriteError(rec, r, herr)
		herr = nil
	}
	// The outcome is kept whatever the caller does now.
	sctx := context.WithoutCancel(ctx)
	if rec.status == 0 || rec.status >= 500 || rec.overflow {
		err = s.opts.Requests.Release(sctx, tenant, key)
	} else {
		err = s.opts.Requests.Answer(sctx, tenant, key, rec.status, rec.body.Bytes())
	}
	if err != nil {
		s.log.Error("record an idempotent request", "request_id", requestID(ctx), "err", err)
	}
	return herr
}

// printable reports whether s is printable ASCII and not empty.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// answerWriter keeps the status and body of an answer.
type answerWriter struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	overflow bool // the body outgrew maxAnswer
}

func (a *answerWriter) WriteHeader(code int) {
	if a.status == 0 && code >= 200 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.body.Len()+len(b) > maxAnswer {
		a.overflow = true
	} else {
		a.body.Write(b)
	}
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
