package server

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"warren/api"
	"warren/internal/pki"
	"warren/internal/reqid"
)

// metaKey is the context key of a request's *requestMeta.
type metaKey struct{}

// requestMeta is what serve and the route wrapper learn about a request.
// Only the request's own goroutine writes it, before the handler runs.
type requestMeta struct {
	// key authenticated the request; zero on routes that need none.
	key Key
	// previewTenant owns the sandbox a preview host request reached (for
	// the access log: such a request has no key).
	previewTenant string
	// route is the route table's "METHOD PATH" that served the request, ""
	// for none (a 404, a 405, a preview host, a request a fleet's front
	// sent to another process: pattern names its route).
	route string
}

// meta returns the request's metadata (zero outside serve).
func meta(ctx context.Context) *requestMeta {
	m, _ := ctx.Value(metaKey{}).(*requestMeta)
	if m == nil {
		return &requestMeta{}
	}
	return m
}

// requestID returns the id serve gave the request.
func requestID(ctx context.Context) string { return reqid.From(ctx) }

// caller returns the key that authenticated the request.
func caller(r *http.Request) Key { return meta(r.Context()).key }

// errPanic is what a recovered panic is reported as.
var errPanic = errors.New("handler panicked")

// Wrap gives every request to h an id (X-Request-Id: a new one, or on a
// fleet's node the one the control replica gave it), its body and write
// timeouts and an access log line, recovers a panicking handler into a
// JSON 500 (or, when the response has begun, aborts the connection so the
// caller sees a cut stream rather than a complete-looking one), and
// refuses CONNECT and "*" in JSON.
func (s *Server) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, h) })
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, h http.Handler) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w, writeIdle: s.opts.Timeouts.WriteIdle}
	m, id := &requestMeta{}, requestIDOf(r)
	rw.Header().Set(reqid.Header, id)
	r = r.WithContext(context.WithValue(reqid.With(r.Context(), id), metaKey{}, m))
	defer limitBody(rw, r, s.opts.Timeouts.BodyIdle)()
	defer func() {
		v := recover()
		if v != nil && v != http.ErrAbortHandler {
			s.log.Error("panic serving request", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rw.wroteHeader {
				s.WriteError(rw, r, errPanic)
				v = nil
			}
		}
		level := slog.LevelInfo
		switch {
		case v != nil || rw.status >= 500:
			level = slog.LevelWarn
		case r.URL.Path == "/healthz":
			level = slog.LevelDebug
		}
		took := time.Since(start)
		s.log.Log(r.Context(), level, "request", "request_id", id, "method", r.Method, "path", r.URL.Path,
			"status", rw.status, "bytes", rw.bytes, "duration", took, "tenant", cmp.Or(m.key.Tenant, m.previewTenant))
		if m.route == "" && s.opts.Metrics != nil {
			m.route = s.pattern(r)
		}
		s.opts.Metrics.Request(m.route, rw.status, took)
		if v != nil {
			panic(http.ErrAbortHandler)
		}
	}()
	// ServeMux answers these two itself, in plain text, before any route:
	// keep every answer JSON.
	switch {
	case r.Method == http.MethodConnect:
		s.WriteError(rw, r, api.Errorf(api.CodeMethodNotAllowed, "method CONNECT is not allowed"))
		return
	case r.RequestURI == "*":
		s.WriteError(rw, r, api.Errorf(api.CodeBadRequest, "request target * is not supported"))
		return
	case !s.admitConn(r):
		rw.Header().Set("Connection", "close")
		s.WriteError(rw, r, api.Errorf(api.CodeUnavailable,
			"the server's connections left are kept for callers with an API key: send one, or retry later"))
		return
	}
	h.ServeHTTP(rw, r)
}

// admitConn tells r's connection, until one of its requests has, whether
// r presents a valid API key (limitedListener), and reports whether r may
// be served: a connection on probation must authenticate at once.
func (s *Server) admitConn(r *http.Request) bool {
	c, ok := r.Context().Value(connKey{}).(*limitConn)
	if !ok || c.proven() {
		return true
	}
	_, err := s.authenticateSocket(r)
	return c.request(err == nil)
}

// requestIDOf returns the ID of request r: the one the fleet's control
// replica that sent r gave it (reqid.FleetHeader), else a new one. Only a
// control replica's is taken, over the fleet's mutual TLS (a node's API
// listens for nothing else, pki.Member.ServerConfig), and only when it has
// the form a replica gives; the header is taken off r either way, so
// that nothing after this (a sandbox's port) sees it.
func requestIDOf(r *http.Request) string {
	sent := r.Header.Values(reqid.FleetHeader)
	r.Header.Del(reqid.FleetHeader)
	if len(sent) == 1 && reqid.Valid(sent[0]) && fromControl(tlsState(r)) {
		return sent[0]
	}
	return reqid.New()
}

// fromControl reports whether cs is a connection whose client presented a
// certificate the server verified (against the fleet's CA, when the
// server is a fleet node) that names a control replica.
func fromControl(cs *tls.ConnectionState) bool {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return false
	}
	id, err := pki.PeerIdentity(*cs)
	return err == nil && id.Role == pki.Control
}

// tlsState is the TLS state of r's connection, nil for none. A fleet
// node's API listens through Limit over a TLS listener, so http.Server
// sees a *limitConn, not the *tls.Conn under it, and leaves r.TLS nil:
// the state is read from the connection itself (HTTPServer's ConnContext),
// whose handshake reading r completed.
func tlsState(r *http.Request) *tls.ConnectionState {
	if r.TLS != nil {
		return r.TLS
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if lc, ok := c.(*limitConn); ok {
		c = lc.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		if cs.HandshakeComplete {
			return &cs
		}
	}
	return nil
}

// responseWriter records the status and size of a response, and whether it
// has begun (after which an error can no longer change the status).
type responseWriter struct {
	http.ResponseWriter
	writeIdle   time.Duration
	status      int
	bytes       int64
	wroteHeader bool
}

// WriteHeader records the status; informational (1xx) headers do not begin
// the response.
func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.status = code
		w.wroteHeader = true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write begins the response with 200 if nothing else began it. The client
// must take each write within writeIdle.
func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.writeDeadline()
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// FlushError sends what is buffered; http.ResponseController calls it.
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.writeDeadline()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// writeDeadline gives the next write writeIdle; a writer that cannot take
// deadlines (a test recorder) goes without.
func (w *responseWriter) writeDeadline() {
	if w.writeIdle > 0 {
		http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.writeIdle))
	}
}

// Hijack hands the connection over for a protocol switch (the port
// proxy's WebSocket and other upgrades): the response has begun, and the
// access log shows 101.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.wroteHeader {
		w.status, w.wroteHeader = http.StatusSwitchingProtocols, true
	}
	if err == nil {
		// The taker times the connection from now on.
		c.SetDeadline(time.Time{})
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// began reports whether the response has begun, so an error can no longer
// be sent as an error body.
func began(w http.ResponseWriter) bool {
	rw, ok := w.(*responseWriter)
	return ok && rw.wroteHeader
}

// Authenticate resolves the request's API key: "Authorization: Bearer KEY"
// or "X-API-Key: KEY". An unknown or missing key is CodeUnauthorized.
func (s *Server) Authenticate(r *http.Request) (Key, error) {
	key := r.Header.Get("X-API-Key")
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return Key{}, api.Errorf(api.CodeUnauthorized, "the Authorization header must be \"Bearer <key>\"")
		}
		key = strings.TrimSpace(token)
	}
	if key == "" {
		return Key{}, api.Errorf(api.CodeUnauthorized, "missing API key (Authorization: Bearer <key>)")
	}
	return s.lookupKey(r.Context(), key)
}

// lookupKey resolves an API key a request carries; an unknown one is
// CodeUnauthorized.
func (s *Server) lookupKey(ctx context.Context, key string) (Key, error) {
	k, err := s.keys.LookupKey(ctx, key)
	if errors.Is(err, ErrUnknownKey) {
		return Key{}, api.Errorf(api.CodeUnauthorized, "invalid API key")
	}
	if err != nil {
		return Key{}, fmt.Errorf("authenticate: %w", err)
	}
	return k, nil
}
