//go:build linux

package vmport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakePort stands in for the port device: each open is a new socketpair,
// whose other end (the host's side of that session) goes to hosts.
type fakePort struct {
	hosts chan net.Conn
	opens atomic.Int32
}

func (p *fakePort) open() (int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		return -1, err
	}
	f := os.NewFile(uintptr(fds[1]), "host")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return -1, err
	}
	p.opens.Add(1)
	p.hosts <- c
	return fds[0], nil
}

// serveOnPort serves HTTP/2 (as the agent does: HTTP/1 and h2c) on a
// Listener over a fakePort.
func serveOnPort(t *testing.T) (*fakePort, *Listener, <-chan error) {
	t.Helper()
	port := &fakePort{hosts: make(chan net.Conn, 4)}
	l := newListener("test.port", port.open)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var n atomic.Int32
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s answer %d", r.Proto, n.Add(1))
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return port, l, served
}

// session takes the host's side of the next open, runs the handshake and
// sends one HTTP/2 request with prior knowledge.
func session(t *testing.T, port *fakePort) (net.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var host net.Conn
	select {
	case host = <-port.hosts:
	case <-ctx.Done():
		t.Fatal("the listener did not open the port")
	}
	hc, err := Handshake(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(context.Context, string, string) (net.Conn, error) { return hc, nil }}
	cc, err := tr.NewClientConn(ctx, "http", "agent:80")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return host, string(body)
}

func TestListenerServesOneHostSessionAfterAnother(t *testing.T) {
	port, _, _ := serveOnPort(t)
	host, got := session(t, port)
	if got != "HTTP/2.0 answer 1" {
		t.Errorf("first session: %q", got)
	}
	// The host goes: the guest reads EOF, the server closes the conn, the
	// listener reopens the port for the next host.
	host.Close()
	_, got = session(t, port)
	if got != "HTTP/2.0 answer 2" {
		t.Errorf("second session: %q", got)
	}
	if n := port.opens.Load(); n != 2 {
		t.Errorf("port opened %d times, want 2", n)
	}
}

func TestListenerCloseStopsAccept(t *testing.T) {
	port, l, served := serveOnPort(t)
	host := <-port.hosts // opened, in the handshake: no SYN ever comes
	defer host.Close()
	l.Close()
	select {
	case err := <-served:
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running after the listener closed")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
}

func TestWritesAfterHangupFail(t *testing.T) {
	port := &fakePort{hosts: make(chan net.Conn, 1)}
	l := newListener("test.port", port.open)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	host := <-port.hosts
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Handshake(ctx, host); err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	defer c.Close()
	host.Close()
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the host went: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, errHungUp) {
		t.Errorf("write after the host went: %v", err)
	}
}
