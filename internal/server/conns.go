package server

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Connection bounds. A client holds a connection only while it makes
// progress, and no client holds more than its share:
//
//   - idle keep-alive connections close after Timeouts.Idle, and a
//     request's headers must arrive within Timeouts.Header (HTTPServer);
//   - a request body must deliver something every Timeouts.BodyIdle, and a
//     JSON body (at most Options.MaxBodyBytes) must arrive whole within
//     Timeouts.JSONBody;
//   - a response write must be taken by the client within
//     Timeouts.WriteIdle, so a reader that stops reading is cut, while a
//     stream that is quiet for hours (exec, process, file and port
//     streams) lives on;
//   - Limit bounds connections in total and per client (an IPv4 address,
//     an IPv6 /64), and keeps a share of them for authenticated callers
//     (limitedListener);
//   - an answer 401 closes its connection.

// Timeouts are the server's connection timeouts; zero fields take the
// defaults of DefaultTimeouts.
type Timeouts struct {
	Header, Idle, BodyIdle, JSONBody, WriteIdle time.Duration
	// PortAnswer bounds how long a sandbox's port may take to answer a
	// proxied request's headers (502 beyond).
	PortAnswer time.Duration
}

// DefaultTimeouts are the documented defaults (docs/API.md, "Limits").
var DefaultTimeouts = Timeouts{
	Header: 10 * time.Second, Idle: 60 * time.Second,
	BodyIdle: 60 * time.Second, JSONBody: 60 * time.Second, WriteIdle: 60 * time.Second,
	PortAnswer: 60 * time.Second,
}

// withDefaults fills t's zero fields from DefaultTimeouts.
func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.Header, &d.Header}, {&t.Idle, &d.Idle}, {&t.BodyIdle, &d.BodyIdle},
		{&t.JSONBody, &d.JSONBody}, {&t.WriteIdle, &d.WriteIdle}, {&t.PortAnswer, &d.PortAnswer},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Defaults of ListenerLimits.
const (
	DefaultMaxConns      = 8192
	DefaultMaxConnsPerIP = 2048
)

// HTTPServer is the http.Server that serves h (Handler, or a fleet's front
// wrapped) with s's timeouts.
func (s *Server) HTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler: h,
		// Revocation closes a revoked credential's connections (revoke.go).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ReadHeaderTimeout: s.opts.Timeouts.Header,
		IdleTimeout:       s.opts.Timeouts.Idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errorLog,
	}
}

// ListenerLimits bound a listener's connections.
type ListenerLimits struct {
	// Total is how many connections may be open at once; Accept waits for
	// one to close beyond it. Default DefaultMaxConns.
	Total int
	// PerIP is how many connections that no valid key has authenticated
	// yet one client (an IPv4 address, an IPv6 /64) may hold in the open
	// share, and as many again in the reserve; a connection beyond both is
	// closed at once. Default DefaultMaxConnsPerIP.
	PerIP int
	// Reserved is the share of Total that connections without a valid key
	// hold only on probation: their first request must authenticate.
	// Default a quarter of Total.
	Reserved int
}

// Limit bounds l's connections by Options.Conns.
func (s *Server) Limit(l net.Listener) net.Listener { return limitListener(l, s.opts.Conns) }

// limitListener wraps l with lim.
func limitListener(l net.Listener, lim ListenerLimits) net.Listener {
	if lim.Total <= 0 {
		lim.Total = DefaultMaxConns
	}
	if lim.PerIP <= 0 {
		lim.PerIP = DefaultMaxConnsPerIP
	}
	if lim.Reserved <= 0 || lim.Reserved >= lim.Total {
		lim.Reserved = lim.Total / 4
	}
	return &limitedListener{Listener: l, lim: lim, slots: make(chan struct{}, lim.Total),
		open: map[string]int{}, probation: map[string]int{}}
}

// limitedListener bounds its connections (docs/API.md, "Limits"). A
// connection is anonymous until a request on it presents a valid API key
// (Server.serve tells it, limitConn.request), and from then on
// authenticated. Anonymous connections hold at most Total-Reserved slots
// together (the open share), and PerIP of them per client. One accepted
// beyond either is on probation, in the reserve: its first request must
// authenticate, or it is answered 503 and closed; a client holds at most
// PerIP such too. Authenticated connections count only against Total. So
// callers without a key, from however many addresses, cannot keep one
// with a key from connecting, and clients behind one proxy share a bucket
// only for what they do without a key.
type limitedListener struct {
	net.Listener
	lim   ListenerLimits
	slots chan struct{} // one token per open connection

	mu        sync.Mutex     // guards the fields below and each limitConn's state
	open      map[string]int // anonymous connections in the open share, by client
	anonymous int            // the sum of open
	probation map[string]int // connections on probation, by client
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		client := clientOf(c.RemoteAddr())
		l.mu.Lock()
		state := connClosed
		switch {
		case l.open[client] < l.lim.PerIP && l.anonymous < l.lim.Total-l.lim.Reserved:
			state = connAnonymous
			l.open[client]++
			l.anonymous++
		case l.probation[client] < l.lim.PerIP:
			state = connProbation
			l.probation[client]++
		}
		l.mu.Unlock()
		if state == connClosed {
			c.Close()
			<-l.slots
			continue
		}
		return &limitConn{Conn: c, l: l, client: client, state: state}, nil
	}
}

// clientOf is the client a remote address counts as: an IPv4 address
// (IPv4-mapped IPv6 included), or an IPv6 address's /64, which one host
// or one customer usually holds whole.
func clientOf(a net.Addr) string {
	var ip netip.Addr
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(ta.IP)
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	} else {
		return a.String()
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// The states of a limitConn.
type connState int

const (
	connAnonymous     connState = iota // in the open share: no valid key yet
	connProbation                      // in the reserve: its first request must authenticate
	connAuthenticated                  // a request presented a valid key
	connClosed
)

type limitConn struct {
	net.Conn
	l      *limitedListener
	client string
	state  connState // guarded by l.mu
}

// proven reports whether a request on c has presented a valid key.
func (c *limitConn) proven() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.state == connAuthenticated
}

// request records whether a request on c presented a valid key, and
// reports whether it may be served: not a request without one on a
// connection on probation.
func (c *limitConn) request(authenticated bool) bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	switch {
	case c.state == connProbation && !authenticated:
		return false
	case c.state == connAuthenticated || !authenticated:
		return true
	}
	c.leaveLocked()
	c.state = connAuthenticated
	return true
}

// leaveLocked takes c out of its share's counts.
func (c *limitConn) leaveLocked() {
	l := c.l
	switch c.state {
	case connAnonymous:
		l.anonymous--
		if l.open[c.client]--; l.open[c.client] <= 0 {
			delete(l.open, c.client)
		}
	case connProbation:
		if l.probation[c.client]--; l.probation[c.client] <= 0 {
			delete(l.probation, c.client)
		}
	}
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	closing := c.state != connClosed
	if closing {
		c.leaveLocked()
		c.state = connClosed
	}
	c.l.mu.Unlock()
	if closing {
		<-c.l.slots
	}
	return err
}

// deadlineBody is a request body whose every read must make progress
// within idle (and end before hard, when set). The read deadline is
// cleared at the end of the body: once a body is read, the server reads
// the connection in the background to notice a client that leaves, and a
// deadline left behind would end a long handler (an exec) that outlives it.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration // 0: no bound on each read (streamBody)
	hard time.Time
	done atomic.Bool // read to its end, or timed out
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	var d time.Time
	if b.idle > 0 {
		d = time.Now().Add(b.idle)
	}
	if !b.hard.IsZero() && (d.IsZero() || b.hard.Before(d)) {
		d = b.hard
	}
	b.rc.SetReadDeadline(d)
	n, err := b.ReadCloser.Read(p)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		// The deadline stays passed: the server must not wait for the
		// rest of this body either (it drains small ones after the
		// handler), and closes the connection.
		b.done.Store(true)
		err = errBodyTimeout
	case err != nil && !b.done.Load():
		b.done.Store(true)
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// errBodyTimeout is a body that stopped arriving.
var errBodyTimeout = errors.New("the request body stopped arriving")

// limitBody wraps the body of r (the handler's copy of the request: the
// server keeps its own to drain) in a deadlineBody of idle. It returns a
// function for when the handler is done: a body it left unread then gets
// idle for the server to drain it, so that a client that stalls cannot
// hold the connection.
func limitBody(w http.ResponseWriter, r *http.Request, idle time.Duration) (done func()) {
	if r.Body == nil || r.Body == http.NoBody {
		return func() {}
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: idle}
	r.Body = b
	return func() {
		if !b.done.Load() {
			b.rc.SetReadDeadline(time.Now().Add(idle))
		}
	}
}

// streamBody lifts the bound on each read of r's body, for the routes
// whose body is a stream a person may pause for long (a process's stdin,
// what the port proxy passes to a sandbox). The connection limits still
// bound how many such bodies one client holds.
func streamBody(r *http.Request) {
	if b, ok := r.Body.(*deadlineBody); ok {
		b.idle = 0
	}
}

// bodyDeadline makes r's body end by t at the latest.
func bodyDeadline(r *http.Request, t time.Time) {
	if b, ok := r.Body.(*deadlineBody); ok {
		b.hard = t
	}
}
