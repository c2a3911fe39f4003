//go:build linux

package agent

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agent/pb/control/controlpbconnect"
)

// Warm pages in the code a first request runs — the HTTP server, Connect,
// protobuf — by sending one Info call to the server over an in-memory
// connection. It touches no file and starts no process, so the container
// init can run it before the sandbox's root exists; the first real request
// then does not pay for the page faults.
func (s *Server) Warm() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	clientEnd, serverEnd := net.Pipe()
	l := &oneConn{conn: serverEnd, closed: make(chan struct{})}
	go s.Serve(ctx, l)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return clientEnd, nil },
	}}
	c := controlpbconnect.NewControlClient(hc, "http://warm")
	c.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	hc.CloseIdleConnections()
	cancel() // stops the serving goroutine
}

// oneConn is a listener that yields one connection, then blocks until closed.
type oneConn struct {
	once   sync.Once
	conn   net.Conn
	closed chan struct{}
	close  sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.close.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "warm", Net: "unix"} }
