// Package nbd serves one blockdev.Device over the NBD protocol, to QEMU's
// built-in NBD client on a unix socket: the vm runtime's front end for
// always-on disks.
//
// It speaks fixed newstyle negotiation (NBD_OPT_GO, NBD_OPT_INFO,
// NBD_OPT_EXPORT_NAME, NBD_OPT_LIST, NBD_OPT_ABORT) and simple replies to
// READ, WRITE, FLUSH, TRIM and WRITE_ZEROES, with FUA. It is not a general
// NBD server: one export, no TLS, no structured replies, block status or
// resizing, which clients are told with NBD_REP_ERR_UNSUP.
//
// The socket is reachable from QEMU processes that run tenant guests, so
// clients are not trusted: every length and count a client sends is checked
// against a limit documented here before it is used, and a client that
// breaks the protocol is disconnected.
package nbd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"warren/internal/blockdev"
)

// Limits on what one client can make the server hold or do.
const (
	// DefaultMaxConns is Options.MaxConns when it is zero.
	DefaultMaxConns = 16
	// DefaultHandshakeTimeout is Options.HandshakeTimeout when it is zero.
	DefaultHandshakeTimeout = 10 * time.Second

	// maxOptionLen bounds an option's data: an export name (at most 4096
	// bytes by the spec, far shorter here) and a few info requests. A longer
	// option gets NBD_REP_ERR_TOO_BIG and the connection is closed, as its
	// data is never read.
	maxOptionLen = 4096
	// maxOptions bounds the options a client sends, the last of them
	// choosing the export.
	maxOptions = 32
	// maxInFlight and maxInFlightBytes bound one connection's requests in
	// flight and the bytes of their buffers. QEMU itself sends at most 16.
	maxInFlight      = 16
	maxInFlightBytes = 64 << 20
	// shutdownGrace bounds the wait for a client to take the replies to the
	// requests in flight when ctx ends.
	shutdownGrace = 5 * time.Second
)

// Options configure a Server.
type Options struct {
	// ExportName names the one export. The default export "" names it too.
	ExportName string
	// MaxConns bounds the connections Serve serves at once; one more is
	// closed as soon as it is accepted. Zero means DefaultMaxConns.
	MaxConns int
	// HandshakeTimeout bounds a connection's negotiation, from accept to the
	// choice of export. Zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Log receives the device's errors, at error level. Clients' doings
	// (why one was disconnected, or refused over MaxConns) are logged at
	// debug level only, since a client controls how often they happen. Nil
	// discards.
	Log *slog.Logger
}

// Server serves one Device to any number of NBD clients.
type Server struct {
	dev   blockdev.Device
	opts  Options
	log   *slog.Logger
	conns atomic.Int64 // connections Serve is serving
}

// NewServer returns a server for dev. dev must stay open until every Serve
// and ServeConn call has returned.
func NewServer(dev blockdev.Device, opts Options) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{dev: dev, opts: opts, log: log}
}

// Serve accepts connections on ln and serves each with ServeConn, at most
// MaxConns at once, until ctx is done or ln is closed. It closes ln. It
// returns once every connection it accepted has ended: with nil if ctx
// ended it, else with the error that stopped Accept. Errors Accept may
// recover from (such as running out of file descriptors) are retried.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()

	var delay time.Duration
	for {
		c, err := ln.Accept()
		if ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			return nil
		}
		if errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("nbd: accept: %w", err)
		}
		if err != nil {
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("nbd: accept failed, retrying", "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		if s.conns.Add(1) > int64(s.opts.MaxConns) {
			s.conns.Add(-1)
			s.log.Debug("nbd: connection refused: too many", "max_conns", s.opts.MaxConns)
			c.Close()
			continue
		}
		wg.Go(func() {
			defer s.conns.Add(-1)
			if err := s.ServeConn(ctx, c); err != nil {
				s.log.Debug("nbd: connection dropped", "err", err)
			}
		})
	}
}

// ServeConn negotiates with the client on c, then serves its requests until
// the client disconnects, breaks the protocol, or ctx is done. Before it
// closes c and returns it waits for the requests in flight to finish and
// sends their replies (giving the client shutdownGrace to take them once ctx
// is done). It returns nil when the client ended the session cleanly or ctx
// ended it, else why the connection was dropped. ServeConn does not count
// against MaxConns. c needs working deadlines.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) error {
	defer c.Close()
	cn := newConn(s, c)
	ok, err := cn.negotiate(ctx)
	if err == nil && ok {
		err = cn.transmit(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}
