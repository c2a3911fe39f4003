// Package egress is the interceptor of a sandbox's requests to the
// destinations its egress rules name (docs/NETWORK.md, "Secrets at
// egress"). The router sends it the sandbox's new connections to ports 80
// and 443 of the addresses the resolver answered for the rules' names,
// once the policy allowed them (package firewall); it listens in the
// router's namespace and dials out from there, so its own connections
// leave as the sandbox's would.
//
// For HTTPS it reads the TLS ClientHello first: a connection whose server
// name has no rule is passed through untouched, byte for byte, to the
// address the sandbox asked for. One whose name has a rule is terminated
// with a certificate of the sandbox's own CA; each request then gets the
// rule's headers, secrets resolved, and goes on over a TLS connection of
// the proxy's own to that same address, verified for that name against
// the node's trust store. A request whose upstream fails verification is
// answered 502 to the sandbox, never sent. Plain HTTP gets the same
// headers only when the address was answered for the request's Host
// name. Redirects are passed back, never followed, so a header goes only
// where its rule says.
//
// Nothing here logs a header's value.
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"time"

	"warren/internal/earlyconn"
	"warren/internal/network/policy"
)

// Bounds on what one sandbox's interceptor takes on.
const (
	maxConns       = 256 // connections from the sandbox at once
	helloTimeout   = 10 * time.Second
	maxHelloBytes  = 16 << 10
	maxUpstreams   = 64 // upstream pools (address and name) kept
	idleUpstream   = 90 * time.Second
	headerTimeout  = 30 * time.Second
	idleFromClient = 2 * time.Minute
	dialTimeout    = 10 * time.Second
)

// Config configures a sandbox's interceptor.
type Config struct {
	// Sandbox names it in logs.
	Sandbox string
	// Listener takes the connections the router sends; the proxy owns it.
	Listener net.Listener
	// Dial connects to addr as the sandbox's own connections leave.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// CA is the sandbox's CA.
	CA *CA
	// Roots verify upstream servers; nil: the host's trust store.
	Roots *x509.CertPool
	// Gateway is never dialed: it is the router itself.
	Gateway netip.Addr
	// Destination says where a connection was headed; nil: where the
	// router redirected it from (SO_ORIGINAL_DST).
	Destination func(net.Conn) (netip.AddrPort, error)
	Log         *slog.Logger
}

// Proxy is a sandbox's running interceptor.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}
	srv   *http.Server
	conns chan net.Conn // handed to srv
	done  chan struct{}
	wg    sync.WaitGroup

	mu        sync.Mutex
	pol       policy.Policy
	values    map[string]string
	names     map[netip.Addr]map[string]time.Time // what each address was answered for, until when
	upstreams map[upstreamKey]*http.Transport
	closed    bool
	open      map[net.Conn]struct{} // passed-through connections, closed by Close
}

type upstreamKey struct {
	addr netip.AddrPort
	name string // the verified name; "" for plain HTTP
}

// conn is a connection the proxy serves HTTP on.
type conn struct {
	net.Conn
	orig netip.AddrPort
	name string // the TLS server name; "" for plain HTTP
}

// recordTypeHandshake is the first byte of a TLS connection.
const recordTypeHandshake = 0x16

// ctxKey finds a request's *conn in its context; missingKey the
// errMissing of a request that must not go out.
type (
	ctxKey     struct{}
	missingKey struct{}
)

// Start serves cfg.Listener until Close.
func Start(cfg Config) *Proxy {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Destination == nil {
		cfg.Destination = originalDst
	}
	p := &Proxy{
		cfg: cfg, log: cfg.Log.With("sandbox", cfg.Sandbox),
		slots: make(chan struct{}, maxConns), conns: make(chan net.Conn), done: make(chan struct{}),
		names: map[netip.Addr]map[string]time.Time{}, upstreams: map[upstreamKey]*http.Transport{},
		open: map[net.Conn]struct{}{},
	}
	rp := &httputil.ReverseProxy{
		Rewrite:      p.rewrite,
		Transport:    roundTripper(p.roundTrip),
		ErrorHandler: p.fail,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.srv = &http.Server{
		Handler:           rp,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleFromClient,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, c.(*conn))
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				<-p.slots
			}
		},
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(chanListener{p})
	}()
	go func() {
		defer p.wg.Done()
		p.accept()
	}()
	return p
}

// Set gives the proxy the sandbox's policy and the values of the secrets
// its rules name.
func (p *Proxy) Set(pol policy.Policy, values map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pol, p.values = pol, values
}

// Answered records that the resolver answered addrs for name, until ttl
// from now: plain HTTP to those addresses gets name's rule when the
// request names it.
func (p *Proxy) Answered(name string, addrs []netip.Addr, ttl time.Duration) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	until := time.Now().Add(ttl)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range addrs {
		m := p.names[a]
		if m == nil {
			m = map[string]time.Time{}
			p.names[a] = m
		}
		m[name] = until
	}
	if len(p.names) > 4096 {
		p.expire()
	}
}

// expire drops what the resolver's answers no longer vouch for.
func (p *Proxy) expire() {
	now := time.Now()
	for a, m := range p.names {
		for n, until := range m {
			if now.After(until) {
				delete(m, n)
			}
		}
		if len(m) == 0 {
			delete(p.names, a)
		}
	}
}

// Close stops serving and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.open {
		c.Close()
	}
	for _, t := range p.upstreams {
		t.CloseIdleConnections()
	}
	p.mu.Unlock()
	close(p.done)
	err := p.cfg.Listener.Close()
	p.srv.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.cfg.Listener.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			p.log.Warn("egress: accept", "err", err)
			return
		}
		select {
		case p.slots <- struct{}{}:
		default:
			p.log.Debug("egress: too many connections; one refused")
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// handle sorts out a new connection: served as HTTP (its slot then goes
// back when the server closes it), or passed through.
func (p *Proxy) handle(c net.Conn) {
	drop := func(c net.Conn) {
		c.Close()
		<-p.slots
	}
	orig, err := p.cfg.Destination(c)
	if err == nil && orig.Addr() == p.cfg.Gateway {
		err = errors.New("the router itself")
	}
	if err != nil {
		p.log.Debug("egress: no destination", "err", err)
		drop(c)
		return
	}
	// TLS begins with a handshake record; anything else is taken for
	// plain HTTP.
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	first := make([]byte, 1)
	if _, err := io.ReadFull(c, first); err != nil {
		drop(c)
		return
	}
	if first[0] != recordTypeHandshake {
		c.SetReadDeadline(time.Time{})
		p.serve(&conn{Conn: &earlyconn.Conn{Conn: c, Early: first}, orig: orig})
		return
	}
	hello, seen, err := readHello(&earlyconn.Conn{Conn: c, Early: first})
	c.SetReadDeadline(time.Time{})
	if err != nil {
		p.log.Debug("egress: no TLS hello", "dest", orig, "err", err)
		drop(c)
		return
	}
	name := strings.ToLower(hello)
	p.mu.Lock()
	rule := p.pol.RuleFor(name)
	p.mu.Unlock()
	if name == "" || rule == nil {
		p.pass(c, seen, orig)
		return
	}
	ca := p.cfg.CA
	tc := tls.Server(&earlyconn.Conn{Conn: c, Early: seen}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.leaf(name)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		p.log.Debug("egress: handshake with the sandbox", "dest", orig, "name", name, "err", err)
		drop(tc)
		return
	}
	p.serve(&conn{Conn: tc, orig: orig, name: name})
}

// serve hands c to the HTTP server, unless the proxy is closing.
func (p *Proxy) serve(c *conn) {
	select {
	case p.conns <- c:
	case <-p.done:
		c.Close()
		<-p.slots
	}
}

// pass connects c to orig untouched, the bytes read already first.
func (p *Proxy) pass(c net.Conn, seen []byte, orig netip.AddrPort) {
	defer func() { <-p.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := p.cfg.Dial(ctx, orig)
	cancel()
	if err != nil {
		p.log.Debug("egress: pass through: dial", "dest", orig, "err", err)
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	defer p.untrack(c, up)
	if _, err := up.Write(seen); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		closeWrite(c)
		close(done)
	}()
	io.Copy(up, c)
	closeWrite(up)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.open[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.open, c)
	}
}

// errMissing is a rule whose secret is gone.
type errMissing struct{ header, dest string }

func (e errMissing) Error() string {
	return fmt.Sprintf("the rule for %s sets %s from a secret this sandbox does not have (it was deleted before the rule was set)", e.dest, e.header)
}

// rewrite makes the request that goes upstream: to the address the
// sandbox asked for, the rule's headers set.
func (p *Proxy) rewrite(r *httputil.ProxyRequest) {
	c := r.In.Context().Value(ctxKey{}).(*conn)
	r.Out.URL.Scheme, r.Out.URL.Host = "http", c.orig.String()
	host := c.name
	if host != "" {
		r.Out.URL.Scheme, r.Out.URL.Host = "https", c.name
	} else {
		host = hostOnly(r.In.Host)
	}
	r.Out.Host = r.In.Host
	p.mu.Lock()
	defer p.mu.Unlock()
	rule := p.pol.RuleFor(host)
	if rule == nil || c.name == "" && !p.answeredFor(c.orig.Addr(), host) {
		return
	}
	for _, h := range rule.Headers {
		v, ok := h.Resolve(p.values)
		if !ok {
			*r.Out = *r.Out.WithContext(context.WithValue(r.Out.Context(), missingKey{}, errMissing{h.Name, rule.Dest.String()}))
			return
		}
		r.Out.Header[h.Name] = []string{v}
	}
	p.log.Debug("egress: headers set", "dest", rule.Dest.String(), "headers", len(rule.Headers), "tls", c.name != "")
}

// answeredFor reports whether the resolver answered a for name and that
// answer still holds. p.mu is held.
func (p *Proxy) answeredFor(a netip.Addr, name string) bool {
	until, ok := p.names[a][name]
	return ok && time.Now().Before(until)
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends r over the pool of its connection's address and name.
func (p *Proxy) roundTrip(r *http.Request) (*http.Response, error) {
	if err, ok := r.Context().Value(missingKey{}).(errMissing); ok {
		return nil, err
	}
	c := r.Context().Value(ctxKey{}).(*conn)
	return p.upstream(upstreamKey{c.orig, c.name}).RoundTrip(r)
}

// upstream is the transport of one address and verified name.
func (p *Proxy) upstream(k upstreamKey) *http.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.upstreams[k]; t != nil {
		return t
	}
	if len(p.upstreams) >= maxUpstreams {
		for old, t := range p.upstreams {
			t.CloseIdleConnections()
			delete(p.upstreams, old)
			break
		}
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return p.cfg.Dial(ctx, k.addr) }
	t := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     idleUpstream,
		TLSHandshakeTimeout: helloTimeout,
		TLSClientConfig:     &tls.Config{ServerName: k.name, RootCAs: p.cfg.Roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
	}
	p.upstreams[k] = t
	return t
}

// fail answers the sandbox when its request could not be sent: 502, and
// what went wrong (no secret is ever in it).
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(ctxKey{}).(*conn)
	p.log.Debug("egress: request refused", "dest", c.orig, "name", c.name, "err", err)
	msg := "warren egress: " + err.Error()
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		msg = fmt.Sprintf("warren egress: %s at %s failed verification, so the request was not sent: %v", c.name, c.orig, verr.Err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Warren-Egress-Error", "1")
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintln(w, msg)
}

// chanListener gives the HTTP server the connections handle sorted out.
type chanListener struct{ p *Proxy }

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.conns:
		return c, nil
	case <-l.p.done:
		return nil, net.ErrClosed
	}
}

func (l chanListener) Close() error   { return nil }
func (l chanListener) Addr() net.Addr { return l.p.cfg.Listener.Addr() }

// readHello reads the connection's TLS ClientHello and returns its server
// name ("" without one) and the bytes read, to be replayed.
func readHello(c net.Conn) (string, []byte, error) {
	rec := &recorder{Conn: c}
	var name string
	err := tls.Server(rec, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errHelloRead
	}}).Handshake()
	if !errors.Is(err, errHelloRead) {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return "", nil, err
	}
	return name, rec.seen, nil
}

var errHelloRead = errors.New("hello read")

// recorder is a connection that keeps what is read and writes nothing:
// the TLS server that parses the hello must not answer the sandbox.
type recorder struct {
	net.Conn
	seen []byte
}

func (r *recorder) Read(b []byte) (int, error) {
	if len(r.seen) >= maxHelloBytes {
		return 0, errors.New("the ClientHello is too large")
	}
	b = b[:min(len(b), maxHelloBytes-len(r.seen))]
	n, err := r.Conn.Read(b)
	r.seen = append(r.seen, b[:n]...)
	return n, err
}

func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
