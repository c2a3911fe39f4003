package server

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
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
//   - Limit bounds connections in total and per client address;
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
	// PerIP is how many one client address may hold; a connection beyond
	// it is closed at once. Default DefaultMaxConnsPerIP.
	PerIP int
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
	return &limitedListener{Listener: l, lim: lim, slots: make(chan struct{}, lim.Total), perIP: map[string]int{}}
}

type limitedListener struct {
	net.Listener
	lim   ListenerLimits
	slots chan struct{} // one token per open connection

	mu    sync.Mutex
	perIP map[string]int // open connections by client address; guarded by mu
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		l.mu.Lock()
		over := l.perIP[ip] >= l.lim.PerIP
		if !over {
			l.perIP[ip]++
		}
		l.mu.Unlock()
		if over {
			c.Close()
			<-l.slots
			continue
		}
		return &limitConn{Conn: c, l: l, ip: ip}, nil
	}
}

// clientIP is the host part of a remote address.
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

type limitConn struct {
	net.Conn
	l    *limitedListener
	ip   string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.perIP[c.ip]--; c.l.perIP[c.ip] <= 0 {
			delete(c.l.perIP, c.ip)
		}
		c.l.mu.Unlock()
		<-c.l.slots
	})
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
