package agentconn

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"warren/internal/vmport"
)

// Health checks of the one connection of NewH2C: after h2cPingAfter
// without a frame from the agent it is sent a PING, and if no answer comes
// within h2cPingTimeout it is closed as broken (the next call redials).
//
// The host never closes the connection for idleness: the agent's server
// does, after 10 idle minutes, with a GOAWAY the session notices at the
// next call. A host that closed first would leave a VM's agent polling for
// its return; the cost of the agent closing is that a call crossing its
// GOAWAY fails (it is not retried: it may have been processed).
const (
	h2cPingAfter   = 30 * time.Second
	h2cPingTimeout = 15 * time.Second
	// h2cStreamWindow bounds each stream's receive window: 256 streams
	// (the daemon's bound per sandbox) then hold at most 64 MiB.
	h2cStreamWindow = 256 << 10
)

// NewH2C makes a Conn that carries every call and file stream over one
// HTTP/2 connection with prior knowledge (h2c) from dial, made at the first
// call, kept, and redialled at the next call once it has broken (closed,
// refused by a GOAWAY, or found dead by a PING). dial is never called while
// a connection from it is open: it suits a transport that takes one client
// at a time, such as a QEMU chardev socket bridged to the agent's
// virtio-serial port. Calls that were in flight on a broken connection
// fail; they are not retried.
func NewH2C(dial func(ctx context.Context) (net.Conn, error)) *Conn {
	return newH2C(dial, h2cStreamWindow)
}

// newH2C is NewH2C with a stream receive window of window bytes (0:
// HTTP/2's default, 4 MiB).
func newH2C(dial func(ctx context.Context) (net.Conn, error), window int) *Conn {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s := newH2CSession(&http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		Protocols:          &p,
		DisableCompression: true,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: h2cPingAfter,
			PingTimeout:     h2cPingTimeout,
			// What a stream may have in flight to us unread: HTTP/2's
			// default of 4 MiB would let each stalled stream (a slow
			// client of a streaming exec or a download) hold that much of
			// the daemon's memory.
			MaxReceiveBufferPerStream: window,
		},
	})
	c := &http.Client{Transport: s}
	return newConn(c, c, s.closeIdle)
}

// DialVMPort makes a Conn (see NewH2C) to the agent of a microVM, whose
// virtio-serial port (vmport.Name) the VMM bridges to the unix socket at
// path, one client at a time. Each connection starts with the port's
// session handshake (vmport.Handshake), which keeps a quick reconnect from
// mixing its bytes with those of the previous session. Make one Conn per
// VM: a second would wait behind the first.
func DialVMPort(path string) *Conn {
	return NewH2C(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, err
		}
		hc, err := vmport.Handshake(ctx, c)
		if err != nil {
			c.Close()
			return nil, err
		}
		return hc, nil
	})
}

// h2cSession is an http.RoundTripper over at most one HTTP/2 connection at a
// time.
type h2cSession struct {
	t *http.Transport // makes the connection: dial, protocol, HTTP/2 settings

	// turn is held (a token in it) by the one call that checks the
	// connection and, when it broke, closes it and dials the next: a
	// connection is closed before the next is dialled, and two are never
	// dialled at once. Waiting for it honours the caller's context.
	turn chan struct{}

	mu sync.Mutex // guards cc
	cc *http.ClientConn
}

func newH2CSession(t *http.Transport) *h2cSession {
	return &h2cSession{t: t, turn: make(chan struct{}, 1)}
}

func (s *h2cSession) RoundTrip(req *http.Request) (*http.Response, error) {
	cc, err := s.conn(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil && !usable(cc) {
		s.drop(cc)
	}
	return resp, err
}

// conn returns the connection, dialling a new one when there is none or it
// broke.
func (s *h2cSession) conn(ctx context.Context) (*http.ClientConn, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("connect to agent: %w", ctx.Err())
	}
	defer func() { <-s.turn }()
	s.mu.Lock()
	cc := s.cc
	s.mu.Unlock()
	if cc != nil {
		if usable(cc) {
			return cc, nil
		}
		s.drop(cc)
	}
	cc, err := s.t.NewClientConn(ctx, "http", "agent:80")
	if err != nil {
		return nil, fmt.Errorf("connect to agent: %w", err)
	}
	s.mu.Lock()
	s.cc = cc
	s.mu.Unlock()
	return cc, nil
}

// usable reports whether cc takes new requests: it is open and has a free
// slot or calls in flight (at its concurrency limit a new call waits for a
// slot). One that got a GOAWAY has neither.
func usable(cc *http.ClientConn) bool {
	return cc.Err() == nil && (cc.Available() > 0 || cc.InFlight() > 0)
}

// drop closes cc and forgets it if it is still the session's connection.
func (s *h2cSession) drop(cc *http.ClientConn) {
	s.mu.Lock()
	if s.cc == cc {
		s.cc = nil
	}
	s.mu.Unlock()
	cc.Close()
}

// closeIdle closes the connection unless calls are in flight on it.
func (s *h2cSession) closeIdle() {
	s.mu.Lock()
	cc := s.cc
	if cc != nil && cc.InFlight() == 0 {
		s.cc = nil
	} else {
		cc = nil
	}
	s.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}
