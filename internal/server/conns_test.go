package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
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
	extra := e.dialRaw()
	if !closedWithin(extra, 3*time.Second) {
		t.Error("a fourth connection from one address was kept")
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
