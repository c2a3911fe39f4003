package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/internal/wait"
)

// dialRaw opens a plain TCP connection to the test server.
func (e *testEnv) dialRaw() net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closes c within d (a read ends
// in EOF or a reset); whatever c was sent back before is read and dropped.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// Regression tests of issue 13, item 3: connections were never closed.

func TestIdleConnectionsClosed(t *testing.T) {
	e := newTestEnv(t, nil, Options{Timeouts: Timeouts{Idle: 300 * time.Millisecond, Header: 300 * time.Millisecond}})
	// Keep-alive connections after a request, and connections that never
	// send one.
	var conns []net.Conn
	for i := range 20 {
		c := e.dialRaw()
		if i%2 == 0 {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if !closedWithin(c, 3*time.Second) {
			t.Errorf("connection %d still open 3 s after its idle timeout", i)
		}
	}
}

func TestSlowJSONBodyCut(t *testing.T) {
	e := newTestEnv(t, nil, Options{Timeouts: Timeouts{JSONBody: 400 * time.Millisecond, BodyIdle: 10 * time.Second}})
	c := e.dialRaw()
	fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{", e.keyA)
	start := time.Now()
	done := make(chan struct{})
	go func() { // one byte every 100 ms, never finishing in time
		defer close(done)
		for range 40 {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "did not arrive within") {
		t.Errorf("slow body: %d %s", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("slow body answered after %v, want about 400ms", took)
	}
	if !closedWithin(c, 3*time.Second) {
		t.Error("connection of a slow body left open")
	}
	<-done
}

func TestStalledBodyCut(t *testing.T) {
	e := newTestEnv(t, nil, Options{Timeouts: Timeouts{BodyIdle: 300 * time.Millisecond}})
	c := e.dialRaw()
	// A file upload (a streamed body) that stops sending.
	fmt.Fprintf(c, "PUT /v1/sandboxes/sb-aaaaaaaaaaaaaaaaaaaa/files?path=/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000000\r\n\r\nabc", e.keyA)
	if !closedWithin(c, 5*time.Second) {
		t.Error("connection with a stalled body still open 5 s after its idle timeout")
	}
}

func TestUnauthorizedCloses(t *testing.T) {
	e := newTestEnv(t, nil, Options{})
	c := e.dialRaw()
	fmt.Fprintf(c, "GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("no key: %d, Connection %q; want 401 and close", resp.StatusCode, resp.Header.Get("Connection"))
	}
	if !closedWithin(c, 3*time.Second) {
		t.Error("connection left open after 401")
	}
}

func TestConnectionsPerClientBounded(t *testing.T) {
	e := newTestEnv(t, nil, Options{Conns: ListenerLimits{PerIP: 3}})
	var open []net.Conn
	for range 3 {
		open = append(open, e.dialRaw())
	}
	// Accepted in order: the three first hold their slots.
	for _, c := range open {
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatalf("a connection within the limit: %v", err)
		}
	}
	// As many again wait on probation for a request with a key; one more
	// is closed at once.
	for range 3 {
		e.dialRaw()
	}
	extra := e.dialRaw()
	if !closedWithin(extra, 3*time.Second) {
		t.Error("a seventh connection from one address was kept")
	}
	// Once the server has seen one close, a new connection is served.
	open[0].Close()
	wait.For(t, 3*time.Second, "a new connection to be served after one closed", func() bool {
		again := e.dialRaw()
		defer again.Close()
		fmt.Fprintf(again, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_, err := http.ReadResponse(bufio.NewReader(again), nil)
		return err == nil
	})
}

// addrListener accepts one connection (a pipe) from each address sent to
// it, until addrs is closed.
type addrListener struct{ addrs chan net.Addr }

type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }

func (l addrListener) Accept() (net.Conn, error) {
	a, ok := <-l.addrs
	if !ok {
		return nil, net.ErrClosed
	}
	c, _ := net.Pipe()
	return remoteConn{Conn: c, remote: a}, nil
}
func (l addrListener) Close() error   { return nil }
func (l addrListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestConnectionsPerIPv6Net (issue 35, row 14): the per-client cap counts
// an IPv6 /64 as one client, so one host's many source addresses do not
// take every slot; an IPv4-mapped address is its IPv4 address.
func TestConnectionsPerIPv6Net(t *testing.T) {
	addrs := make(chan net.Addr, 16)
	ln := limitListener(addrListener{addrs}, ListenerLimits{Total: 100, PerIP: 3})
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for i := 1; i <= 7; i++ {
		addrs <- tcp(fmt.Sprintf("[2001:db8::%x]:4000", i))
	}
	addrs <- tcp("[2001:db8:0:1::1]:4000")
	addrs <- tcp("[::ffff:192.0.2.1]:4000")
	close(addrs)
	type got struct {
		remote string
		state  connState
	}
	var conns []got
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		lc := c.(*limitConn)
		conns = append(conns, got{c.RemoteAddr().String(), lc.state})
	}
	want := []got{
		{"[2001:db8::1]:4000", connAnonymous}, {"[2001:db8::2]:4000", connAnonymous}, {"[2001:db8::3]:4000", connAnonymous},
		{"[2001:db8::4]:4000", connProbation}, {"[2001:db8::5]:4000", connProbation}, {"[2001:db8::6]:4000", connProbation},
		// 2001:db8::7 is closed at once: its /64 holds all it may.
		{"[2001:db8:0:1::1]:4000", connAnonymous},
		{"192.0.2.1:4000", connAnonymous},
	}
	if !slices.Equal(conns, want) {
		t.Errorf("accepted:\n got %v\nwant %v", conns, want)
	}
	if c := clientOf(tcp("[::ffff:192.0.2.1]:4000")); c != "192.0.2.1" {
		t.Errorf("an IPv4-mapped address counts as %q, want 192.0.2.1", c)
	}
}

// TestConnectionsReservedForKeys (issue 35, row 14): once connections
// without a key hold the open share (here one client's whole allowance),
// a connection whose request presents a valid key is still served, and
// one without a key is answered 503 and closed.
func TestConnectionsReservedForKeys(t *testing.T) {
	e := newTestEnv(t, nil, Options{Conns: ListenerLimits{Total: 4, Reserved: 2, PerIP: 2}})
	get := func(c net.Conn, path, key string) (*http.Response, error) {
		auth := ""
		if key != "" {
			auth = "Authorization: Bearer " + key + "\r\n"
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, auth)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	for range 2 {
		if resp, err := get(e.dialRaw(), "/healthz", ""); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a connection without a key in the open share: %v, %v", resp, err)
		}
	}
	keyless := e.dialRaw()
	if resp, err := get(keyless, "/healthz", ""); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a connection without a key beyond the open share: %v, %v; want 503", resp, err)
	}
	if !closedWithin(keyless, 3*time.Second) {
		t.Error("a refused connection on probation was left open")
	}
	for i := range 2 {
		c := e.dialRaw()
		for j := range 2 {
			if resp, err := get(c, "/v1/info", e.keyA); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d on keyed connection %d in the reserve: %v, %v; want 200", j, i, resp, err)
			}
		}
	}
}
