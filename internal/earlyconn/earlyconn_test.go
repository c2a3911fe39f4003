package earlyconn

import (
	"io"
	"net"
	"testing"
)

func TestReadsEarlyFirst(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		b.Write([]byte("world"))
		b.Close()
	}()
	c := &Conn{Conn: a, Early: []byte("hello ")}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := c.CloseWrite(); err == nil {
		t.Error("a pipe has no half close, yet CloseWrite succeeded")
	}
}
