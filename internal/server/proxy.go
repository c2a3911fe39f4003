package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"warren/api"
	"warren/internal/earlyconn"
)

// Exposed ports: a request on ANY /v1/sandboxes/{id}/ports/{port}/{path...}
// (API key) or on a preview host name (preview.go) is proxied, as HTTP/1.1,
// to a TCP port the sandbox listens on, through Sandboxes.DialPort.
//
// Each request dials its own connection, which carries that request only
// (no pool): the manager checks the tenant at every dial, and nothing stays
// open to a sandbox between requests. Bodies stream both ways and every
// write to the caller is flushed at once (server-sent events, chunked
// answers); an Upgrade answered 101 (WebSocket or any other protocol)
// hijacks the caller's connection and splices the two, passing each half
// close on. Only the dial has a deadline.
//
// The sandbox sees the request as the caller sent it, with the Host the
// caller used, X-Forwarded-For/-Host/-Proto (and X-Forwarded-Prefix on the
// API route), and without warren's credentials: the API key's headers on
// the API route, the preview token's header, query parameter and cookie
// everywhere.

// dialTimeout bounds the connection to a sandbox's port (and
// Timeouts.PortAnswer its answer's headers once the request is sent).
const dialTimeout = 10 * time.Second

// Names of the preview access token in a request (preview.go). The cookie
// is __Host- prefixed where previews are https: host-only and Secure, which
// no sibling host can overwrite.
const (
	tokenHeader       = "X-Warren-Access-Token"
	tokenParam        = "warren_token"
	tokenCookie       = "warren_token"
	tokenCookieSecure = "__Host-warren_token"
)

// portTarget is where a proxied request goes and what it came with.
type portTarget struct {
	tenant, id string
	port       int
	// path is the escaped path the sandbox sees, from its "/".
	path string
	// prefix is what the caller's path had before path (the API route's
	// /v1/sandboxes/ID/ports/PORT), sent as X-Forwarded-Prefix; "" on a
	// preview host.
	prefix string
	// apiKey says the caller authenticated with an API key: Authorization
	// and X-API-Key are warren's and are not forwarded. On a preview host
	// they are the app's own, but for a warren key sent by mistake.
	apiKey bool
}

// proxyPort answers ANY /v1/sandboxes/{id}/ports/{port}/{path...}: the
// request goes to the port of the caller's sandbox, with the path after
// the port and the query.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request) error {
	streamBody(r)
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return err
	}
	// The mux matched the escaped path segment by segment; what follows
	// the sixth slash is the sandbox's path, escaped as the caller sent it.
	escaped := r.URL.EscapedPath()
	rest := afterSegments(escaped, 5)
	return s.proxy(w, r, portTarget{
		tenant: caller(r).Tenant, id: id, port: port,
		path: rest, prefix: strings.TrimSuffix(escaped, rest), apiKey: true,
	})
}

// parsePort reads a port number: 1-65535, in decimal without leading
// zeros.
func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != s {
		return 0, api.Errorf(api.CodeBadRequest, "bad port %q: want a number from 1 to 65535", s)
	}
	return p, nil
}

// afterSegments returns what follows the first n segments of the escaped
// path p, from its slash ("/" when nothing does).
func afterSegments(p string, n int) string {
	for range n {
		i := strings.IndexByte(p[min(1, len(p)):], '/')
		if i < 0 {
			return "/"
		}
		p = p[i+1:]
	}
	if p == "" {
		return "/"
	}
	return p
}

// proxy sends r to the target port and relays the answer. It returns an
// error only when nothing was sent to the caller yet (the dial failed);
// later failures are answered 502 or cut the caller's connection.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, t portTarget) error {
	// A port that takes requests and never answers holds one of the
	// sandbox's streams each.
	release, err := s.holdStream(t.id)
	if err != nil {
		return err
	}
	defer release()
	dctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	conn, err := s.sb.DialPort(dctx, t.tenant, t.id, t.port)
	cancel()
	if err != nil {
		return s.dialError(r, t, err)
	}
	once := &oneConn{conn: conn}
	defer once.closeUnused()
	tr := &http.Transport{
		DialContext:        once.dial,
		DisableKeepAlives:  true, // the connection is this request's alone
		DisableCompression: true, // relay bytes as the sandbox sent them
		// Generous, but bounded: the answer's headers are held in memory.
		MaxResponseHeaderBytes: 1 << 20,
		ResponseHeaderTimeout:  s.opts.Timeouts.PortAnswer,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { rewrite(pr, t) },
		ModifyResponse: func(resp *http.Response) error { sanitizeAnswer(resp.Header, t); return nil },
		Transport:      tr,
		FlushInterval:  -1,
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller left; what broke is the cut
			}
			s.logger().Debug("port proxy", "request_id", requestID(r.Context()), "sandbox", t.id, "port", t.port, "err", err)
			s.WriteError(w, r, api.Errorf(api.CodeBadGateway, "port %d of sandbox %s did not answer with HTTP", t.port, t.id))
		},
		ErrorLog: slog.NewLogLogger(s.logger().Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(upgradeWriter{w}, r)
	return nil
}

// dialError is what the caller sees of a failed dial: the manager's
// not_found and conflict as they are; anything else means the sandbox runs
// and the port did not take the connection, a 502 (the detail, which may
// name node addresses, goes to the log).
func (s *Server) dialError(r *http.Request, t portTarget, err error) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return err
	case r.Context().Err() != nil:
		return fmt.Errorf("dial port %d of %s: the caller left: %w", t.port, t.id, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return api.Errorf(api.CodeBadGateway, "nothing listens on port %d of sandbox %s (connection refused)", t.port, t.id)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT):
		return api.Errorf(api.CodeBadGateway, "port %d of sandbox %s did not take the connection within %s", t.port, t.id, dialTimeout)
	}
	s.logger().Warn("dial sandbox port", "request_id", requestID(r.Context()), "sandbox", t.id, "port", t.port, "err", err)
	return api.Errorf(api.CodeBadGateway, "port %d of sandbox %s is unreachable", t.port, t.id)
}

// rewrite makes the request the sandbox sees.
func rewrite(pr *httputil.ProxyRequest, t portTarget) {
	out := pr.Out
	out.URL.Scheme = "http"
	// The dial ignores the address; it names the port in errors, and the
	// Host header when the caller sent none.
	out.URL.Host = net.JoinHostPort(t.id, strconv.Itoa(t.port))
	out.URL.Path, out.URL.RawPath = t.path, t.path
	if p, err := url.PathUnescape(t.path); err == nil {
		out.URL.Path = p
	}
	out.URL.RawQuery = withoutParam(pr.In.URL.RawQuery, tokenParam)
	out.Host = pr.In.Host
	pr.SetXForwarded()
	if t.prefix != "" {
		out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	out.Header.Del(tokenHeader)
	withoutCookie(out.Header, tokenCookie)
	withoutCookie(out.Header, tokenCookieSecure)
	if t.apiKey {
		out.Header.Del("Authorization")
		out.Header.Del("X-API-Key")
		return
	}
	if isWarrenKey(out.Header.Get("Authorization")) {
		out.Header.Del("Authorization")
	}
	if isWarrenKey(out.Header.Get("X-API-Key")) {
		out.Header.Del("X-API-Key")
	}
}

// sanitizeAnswer takes from a sandbox's answer what would reach beyond its
// own host name: a sandbox's preview hosts share a parent domain with every
// other sandbox's (the same site, to a browser), and the API route shares
// the API's origin.
//   - Set-Cookie: host-only (its Domain dropped), never a cookie of warren's
//     access token, and on the API route under the route's path;
//   - Clear-Site-Data, which would wipe the whole site's storage, is
//     dropped; HSTS loses includeSubDomains (and preload), which would bind
//     every sibling host;
//   - the sandbox's X-Request-Id is dropped: warren's is the request's.
func sanitizeAnswer(h http.Header, t portTarget) {
	cookies := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, line := range cookies {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Name == tokenCookie || c.Name == tokenCookieSecure {
			continue
		}
		c.Domain = ""
		if t.prefix != "" && !strings.HasPrefix(c.Path, t.prefix+"/") {
			c.Path = t.prefix + "/" + strings.TrimPrefix(c.Path, "/")
		}
		if v := c.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
	h.Del("Clear-Site-Data")
	h.Del("X-Request-Id")
	if v := h.Get("Strict-Transport-Security"); v != "" {
		var kept []string
		for d := range strings.SplitSeq(v, ";") {
			switch strings.ToLower(strings.TrimSpace(d)) {
			case "includesubdomains", "preload", "":
			default:
				kept = append(kept, strings.TrimSpace(d))
			}
		}
		h.Set("Strict-Transport-Security", strings.Join(kept, "; "))
	}
}

// isWarrenKey reports whether a credential header's value holds a warren
// API key ("wk_…", bare or after a scheme).
func isWarrenKey(v string) bool {
	_, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		cred = v
	}
	return strings.HasPrefix(strings.TrimSpace(cred), "wk_")
}

// withoutParam returns the raw query q without its name parameters, the
// rest exactly as it was (order, escaping).
func withoutParam(q, name string) string {
	if !strings.Contains(q, name) && !strings.Contains(q, "%") {
		return q
	}
	var kept []string
	for part := range strings.SplitSeq(q, "&") {
		key, _, _ := strings.Cut(part, "=")
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if key != name {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, "&")
}

// withoutCookie removes the cookies called name from h's Cookie headers,
// leaving the others as they were.
func withoutCookie(h http.Header, name string) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			n, _, _ := strings.Cut(part, "=")
			if strings.TrimSpace(n) != name && strings.TrimSpace(part) != "" {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// oneConn is the Transport's dialer of one proxied request: it hands out
// the connection DialPort made, once.
type oneConn struct {
	mu   sync.Mutex // guards conn
	conn net.Conn   // nil once handed out
}

func (o *oneConn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.conn
	if c == nil {
		return nil, errors.New("the sandbox's connection was used already")
	}
	o.conn = nil
	return c, nil
}

// closeUnused closes the connection if the Transport never took it (the
// request failed before it was sent); a taken one is the Transport's.
func (o *oneConn) closeUnused() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		o.conn.Close()
		o.conn = nil
	}
}

// upgradeWriter is the ResponseWriter the proxy writes to. On a protocol
// switch the hijacked connection reads first what the server had already
// buffered from it (bytes a client sent right behind its upgrade request),
// which ReverseProxy, reading the bare connection, would lose.
type upgradeWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController flush through to the connection.
func (u upgradeWriter) Unwrap() http.ResponseWriter { return u.ResponseWriter }

func (u upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		// Taken out of the buffer, not read through it: the server's
		// reader under it ends the request's context at EOF, which would
		// cut the sandbox's side before a half close got through.
		early, _ := brw.Reader.Peek(n)
		c = &earlyconn.Conn{Conn: c, Early: bytes.Clone(early)}
		brw.Reader.Discard(n)
	}
	return c, brw, nil
}

// logger is s.log, or a logger that drops everything for a Server built
// without one (tests of the route table).
func (s *Server) logger() *slog.Logger {
	if s.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.log
}
