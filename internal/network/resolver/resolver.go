// Package resolver is the node's DNS resolver for sandboxes. Each sandbox's
// DNS (to its gateway 10.0.2.2:53) is redirected by its router to this
// resolver, arriving from the sandbox's node address; the resolver answers
// by the sandbox's egress policy, forwarding what it lets through to the
// node's upstream servers, and pins the addresses that allowed and denied
// names resolve to in the sandbox's firewall before it answers.
//
// It is not a recursive resolver and keeps no cache: the upstreams (the
// node's resolv.conf) do that. It does not program the firewall either: it
// calls Client.Pin, which does.
//
// The decisions, in order, are written on Server.answer.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"warren/internal/cleanup"
	"warren/internal/network/policy"
)

// Client is what the resolver needs of one sandbox.
type Client struct {
	// ID names the sandbox in logs.
	ID string
	// Policy is the sandbox's egress policy; nil refuses every query.
	Policy *policy.Policy
	// Pin records, in the sandbox's firewall, that addrs (IPv4) are what an
	// allowed (policy.Allowed) or a denied (policy.Denied) name resolved to,
	// for ttl. An allowed answer is sent only after Pin returns nil, so a
	// connection made right after the answer cannot race the pin; if Pin
	// fails, the query is answered SERVFAIL (a denied name is refused
	// whatever Pin returns). It may be called concurrently.
	Pin func(v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error
	// Denied is called once for each query the policy refuses (the
	// sandbox's denial counter); nil is allowed. It may be called
	// concurrently.
	Denied func()
	// Intercept records that addrs are what a name of the policy's rules
	// (policy.RuleFor) resolved to, for ttl, before the answer is sent, so
	// that the connection that follows is intercepted; if it fails, the
	// query is answered SERVFAIL. It may be called concurrently.
	Intercept func(name string, addrs []netip.Addr, ttl time.Duration) error
}

// Config configures a Server.
type Config struct {
	// Listen is the address served, over UDP and TCP. With port 0 a free
	// port is chosen, the same for both (Server.Addr tells which).
	Listen netip.AddrPort
	// Upstreams are the servers queries are forwarded to, tried in order.
	// Empty means those of /etc/resolv.conf (see Upstreams).
	Upstreams []netip.AddrPort
	// Lookup says which sandbox a query's source address is; false answers
	// REFUSED. It is called for every query and may be called concurrently.
	Lookup func(src netip.Addr) (Client, bool)
	// Log receives the resolver's logs; nil discards them.
	Log *slog.Logger
	// QPS is each source address's rate limit in queries per second, with
	// a burst of twice that; 0 means DefaultQPS. Queries over it are
	// answered REFUSED (not counted as denials), and past twice the rate
	// dropped.
	QPS int
	// Timeout bounds each try of an upstream; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Defaults of Config.
const (
	DefaultQPS     = 200
	DefaultTimeout = 2 * time.Second
)

// Bounds on the work the resolver takes on, so that a flood from one
// sandbox neither exhausts the node nor starves the other sandboxes.
const (
	maxInflight          = 1024 // UDP queries being answered, in all
	maxInflightPerSource = 64   // UDP queries being answered, per source
	maxConns             = 256  // TCP connections, in all
	maxConnsPerSource    = 16   // TCP connections, per source
	tcpIdle              = 10 * time.Second
	tcpWrite             = 5 * time.Second
)

// Server is a running resolver. Its methods may be called concurrently.
type Server struct {
	cfg      Config
	log      *slog.Logger
	addr     netip.AddrPort
	udp      *net.UDPConn
	tcp      *net.TCPListener
	limit    *limiter
	udpSlots *slots // UDP queries in flight
	tcpSlots *slots // TCP connections open
	// exchange asks the upstreams; forward, but for tests that fake it.
	exchange func(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error)

	// ctx is cancelled by Close; every goroutine and upstream exchange
	// stops on it. wg counts the goroutines, each started by Start, by the
	// UDP loop (one per query) or by the TCP loop (one per connection).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex            // guards conns and closed
	conns  map[net.Conn]struct{} // open TCP connections, closed by Close
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// newServer checks cfg and fills in its defaults; it binds nothing.
func newServer(cfg Config) (*Server, error) {
	if cfg.Lookup == nil {
		return nil, errors.New("resolver: no Lookup")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if len(cfg.Upstreams) == 0 {
		ups, err := Upstreams(resolvConf)
		if err != nil {
			return nil, fmt.Errorf("resolver: default upstreams: %w", err)
		}
		cfg.Upstreams = ups
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Log,
		limit:    newLimiter(cfg.QPS),
		udpSlots: newSlots(maxInflight, maxInflightPerSource),
		tcpSlots: newSlots(maxConns, maxConnsPerSource),
		conns:    make(map[net.Conn]struct{}),
	}
	s.exchange = s.forward
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start binds cfg.Listen over UDP and TCP and serves it until Close.
func Start(cfg Config) (_ *Server, err error) {
	if !cfg.Listen.IsValid() {
		return nil, fmt.Errorf("resolver: invalid listen address %v", cfg.Listen)
	}
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	var undo cleanup.Stack
	defer undo.RunIf(&err)
	undo.Add(s.cancel)
	s.udp, s.tcp, err = listen(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	undo.Add(func() { s.udp.Close(); s.tcp.Close() })
	s.addr = netip.AddrPortFrom(cfg.Listen.Addr(), s.tcp.Addr().(*net.TCPAddr).AddrPort().Port())
	for _, up := range s.cfg.Upstreams {
		if up.Port() == s.addr.Port() && (up.Addr() == s.addr.Addr() || s.addr.Addr().IsUnspecified() && up.Addr().IsLoopback()) {
			return nil, fmt.Errorf("resolver: upstream %v is the resolver itself", up)
		}
	}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	return s, nil
}

// listen binds UDP and TCP on the same address; with port 0, on the same
// free port.
func listen(addr netip.AddrPort) (*net.UDPConn, *net.TCPListener, error) {
	for try := 0; ; try++ {
		tl, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
		if err != nil {
			return nil, nil, fmt.Errorf("listen tcp: %w", err)
		}
		port := tl.Addr().(*net.TCPAddr).AddrPort().Port()
		uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr.Addr(), port)))
		if err == nil {
			return uc, tl, nil
		}
		tl.Close()
		if addr.Port() != 0 || try == 10 {
			return nil, nil, fmt.Errorf("listen udp: %w", err)
		}
	}
}

// Addr is the address served (with the port chosen if Listen had port 0).
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Close stops serving and waits for every query in progress to end
// (upstream exchanges are cut short; calls to Lookup, Pin and Denied are
// waited for). It may be called more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		err := errors.Join(s.udp.Close(), s.tcp.Close())
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		if err != nil {
			s.closeErr = fmt.Errorf("resolver: close: %w", err)
		}
	})
	return s.closeErr
}

// track registers an accepted connection for Close to close; false if the
// server is closing (the caller closes it).
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}
