//go:build linux

package gvisor

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"warren/internal/agentconn"
	"warren/internal/runtime/gvisor/gvisorinit"
)

// channel is the host's end of the agent's channel: a listening socket in
// the sandbox's chan directory, and the Conn that speaks HTTP/2 over the
// connection the agent dials to it.
//
// Anything in the sandbox may dial the socket (its root can reach it), so
// a connection is the agent's only once it sent the agent's token first.
// The agent read the token from a file in the channel's directory before
// anything of the sandbox ran; the file goes once the agent has connected,
// before the sandbox runs anything. A sandbox from a memory image has its
// agent's token already (the image keeps it beside the memory).
type channel struct {
	path  string
	token string
	conn  *agentconn.Conn

	mu  sync.Mutex
	ln  *net.UnixListener // nil while closed (a pause)
	cur *watchedConn      // the agent's connection in use
}

// tokenWait bounds how long a connection may take to send its token.
const tokenWait = 5 * time.Second

// newToken makes a random token and writes it to path, readable by root
// only; the agent reads it at its start.
func newToken(path string) (string, error) {
	b := make([]byte, 32)
	rand.Read(b)
	token := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(token), 0o400); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return token, nil
}

// listen listens for the agent in dir's chan directory.
func listen(dir, token string) (*channel, error) {
	c := &channel{path: filepath.Join(dir, chanDir, gvisorinit.Socket), token: token}
	if err := c.open(); err != nil {
		return nil, err
	}
	c.conn = agentconn.NewH2C(c.accept)
	return c, nil
}

// open listens on the channel's socket, replacing a stale one (of a daemon
// that died) or its own.
func (c *channel) open() error {
	c.mu.Lock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	c.mu.Unlock()
	os.Remove(c.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen for agent: %w", err)
	}
	// The Sentry connects as the host's root; nothing else may.
	if err := os.Chmod(c.path, 0o600); err != nil {
		ln.Close()
		return err
	}
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	return nil
}

// accept takes the agent's next connection (agentconn.NewH2C's dial).
func (c *channel) accept(ctx context.Context) (net.Conn, error) {
	c.mu.Lock()
	ln := c.ln
	c.mu.Unlock()
	if ln == nil {
		return nil, errors.New("the sandbox is paused")
	}
	stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Now()) })
	defer stop()
	ln.SetDeadline(time.Time{})
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if !c.proves(conn) {
			conn.Close()
			continue
		}
		// The agent has its token: the file has served.
		os.Remove(filepath.Join(filepath.Dir(c.path), gvisorinit.TokenFile))
		w := &watchedConn{Conn: conn, gone: make(chan struct{})}
		c.mu.Lock()
		c.cur = w
		c.mu.Unlock()
		return w, nil
	}
}

// proves reads the token a connection must send first, and says whether
// it is the agent's.
func (c *channel) proves(conn net.Conn) bool {
	conn.SetReadDeadline(time.Now().Add(tokenWait))
	defer conn.SetReadDeadline(time.Time{})
	got := make([]byte, len(c.token))
	if _, err := io.ReadFull(conn, got); err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(got, []byte(c.token)) == 1
}

// release stops listening and ends the agent's connection, and waits up
// to wait until the agent has closed its end of it (and of one it made
// that was not taken yet), so that the Sentry holds no host socket of the
// channel. It reports whether the agent let go in time.
func (c *channel) release(wait time.Duration) bool {
	c.mu.Lock()
	ln, cur := c.ln, c.cur
	c.ln, c.cur = nil, nil
	c.mu.Unlock()
	deadline := time.Now().Add(wait)
	let := true
	if ln != nil {
		// A past deadline would fail the accept before it looked.
		ln.SetDeadline(time.Now().Add(time.Millisecond))
		if conn, err := ln.Accept(); err == nil {
			let = drain(conn, deadline)
		}
		ln.Close()
	}
	if cur != nil {
		cur.CloseWrite()
		select {
		case <-cur.gone:
		case <-time.After(time.Until(deadline)):
			let = false
		}
		cur.Close()
	}
	c.conn.Close()
	return let
}

// drain half-closes conn, reads it until the other end closes or the
// deadline, and closes it; it reports whether the other end closed.
func drain(conn net.Conn, deadline time.Time) bool {
	defer conn.Close()
	conn.(*net.UnixConn).CloseWrite()
	conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, conn)
	return err == nil
}

// watchedConn is the agent's connection in use: gone is closed once a
// read of it ended (the agent closed its end, or the host its own).
type watchedConn struct {
	net.Conn
	gone chan struct{}
	once sync.Once
}

func (w *watchedConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if err != nil {
		w.once.Do(func() { close(w.gone) })
	}
	return n, err
}

// CloseWrite ends the host's side of the connection; the agent reads the
// end, and closes its own.
func (w *watchedConn) CloseWrite() error { return w.Conn.(*net.UnixConn).CloseWrite() }
