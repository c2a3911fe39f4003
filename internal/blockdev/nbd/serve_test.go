package nbd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Serve keeps at most MaxConns connections: one more is closed at once,
// and a slot that frees up is taken again.
func TestMaxConns(t *testing.T) {
	dev, _ := newFile(t, testSize)
	s := serve(t, dev, Options{MaxConns: 2})
	first := dial(t, s.sock)
	first.negotiate("")
	dial(t, s.sock) // still negotiating: it counts too

	extra, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("connection over MaxConns got %d bytes of greeting", n)
	}

	first.c.Close()
	waitFor(t, "a connection to be served again", func() bool {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		return err == nil
	})
}

// When its context ends, Serve lets the requests in flight finish and
// answers them, closes every connection, and returns nil.
func TestServeCancel(t *testing.T) {
	var entered atomic.Bool
	release, open := gate()
	defer open()
	dev, _ := newFile(t, testSize)
	if _, err := dev.WriteAt(pattern(4096, 1), 0); err != nil {
		t.Fatal(err)
	}
	s := serve(t, &hooked{Device: dev, hook: func(op string, off, n int64) error {
		if op == "read" && off == 0 {
			entered.Store(true)
			<-release
		}
		return nil
	}}, Options{})
	busy := dial(t, s.sock)
	busy.negotiate("")
	idle := dial(t, s.sock)
	idle.negotiate("")
	negotiating := dial(t, s.sock)

	busy.request(cmdRead, 0, 1, 0, 4096, nil)
	waitFor(t, "the READ in the device", entered.Load)
	s.cancel()
	select {
	case err := <-s.done:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	open()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if errno, handle := busy.reply(); errno != 0 || handle != 1 {
		t.Fatalf("reply: error %d, handle %d", errno, handle)
	}
	if got := busy.read(4096); !bytes.Equal(got, pattern(4096, 1)) {
		t.Fatal("READ in flight at shutdown: wrong data")
	}
	for _, cl := range []*client{busy, idle, negotiating} {
		cl.closed()
	}
	if _, err := net.Dial("unix", s.sock); err == nil {
		t.Fatal("listener still accepts after Serve returned")
	}
}

// Serve returns when its listener is closed under it.
func TestServeListenerClosed(t *testing.T) {
	dev, _ := newFile(t, testSize)
	ln, err := net.Listen("unix", filepath.Join(sockDir(t), "sock"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- NewServer(dev, Options{}).Serve(context.Background(), ln) }()
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}
