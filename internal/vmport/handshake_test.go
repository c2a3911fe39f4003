package vmport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestFindMessage(t *testing.T) {
	syn := "WRNSYN0123456789abcdef\r\n"
	for _, tt := range []struct {
		in        string
		tag, rest string
		ok        bool
	}{
		{syn, tagSyn, "", true},
		{"noise" + syn + "after", tagSyn, "after", true},
		{"WRNACK0123456789abcdef\r\nWRNGO_", tagAck, "WRNGO_", true},
		{"WRNSYN0123456789ABCDEF\r\n" + syn, tagSyn, "", true}, // upper case is not a nonce: skipped
		{"WRNXYZ0123456789abcdef\r\nx", "", "\nx", false},      // unknown tag: noise
		{"junk WRNSYN0123", "", "WRNSYN0123", false},           // a message may be starting
		{"junk WR", "", "WR", false},
		{"junk", "", "nk", false},
		{"", "", "", false},
	} {
		tag, _, rest, ok := findMessage([]byte(tt.in))
		if tag != tt.tag || string(rest) != tt.rest || ok != tt.ok {
			t.Errorf("findMessage(%q) = %q, rest %q, %v; want %q, %q, %v", tt.in, tag, rest, ok, tt.tag, tt.rest, tt.ok)
		}
	}
}

// pair is a connected pair of buffered stream connections (net.Pipe does
// not buffer: both ends writing first would deadlock, which sockets do not).
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// guestEnd runs guestSync on one end of a pipe after writing junk (an old
// session's last words) and returns what it gives back.
func guestEnd(c net.Conn, junk string) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		defer close(out)
		if junk != "" {
			if _, err := c.Write([]byte(junk)); err != nil {
				return
			}
		}
		prefix, err := guestSync(c)
		if err != nil {
			return
		}
		out <- prefix
	}()
	return out
}

func TestHandshake(t *testing.T) {
	host, guest := pair(t)
	synced := guestEnd(guest, "old session's GOAWAY WRNACK0000000000000000\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc, err := Handshake(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	// The host speaks first after GO; the guest gets it whole.
	go hc.Write([]byte("PRI * HTTP/2.0"))
	prefix := <-synced
	rest := make([]byte, 14-len(prefix))
	if _, err := io.ReadFull(guest, rest); err != nil {
		t.Fatal(err)
	}
	if got := string(prefix) + string(rest); got != "PRI * HTTP/2.0" {
		t.Errorf("guest got %q after the handshake", got)
	}
	go guest.Write([]byte("SETTINGS"))
	buf := make([]byte, 8)
	if _, err := io.ReadFull(hc, buf); err != nil || string(buf) != "SETTINGS" {
		t.Errorf("host got %q, %v", buf, err)
	}
}

// TestHandshakeAfterAnOldSession is the quick reconnect: an old guest
// session that did not see the host go eats the first SYN (and dies of it,
// writing its last words); the guest's next session answers the next one.
func TestHandshakeAfterAnOldSession(t *testing.T) {
	host, guest := pair(t)
	synced := make(chan []byte, 1)
	go func() {
		buf := make([]byte, msgLen)
		if _, err := io.ReadFull(guest, buf); err != nil || !bytes.HasPrefix(buf, []byte(tagSyn)) {
			t.Errorf("old session read %q, %v", buf, err)
			return
		}
		guest.Write([]byte("\x00\x00\x08\x07\x00\x00\x00\x00\x00GOAWAY frame")) // dies of it
		prefix, err := guestSync(guest)
		if err != nil {
			t.Error(err)
		}
		synced <- prefix
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	hc, err := Handshake(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	go hc.Write([]byte("h2"))
	if p := <-synced; len(p) > 2 {
		t.Errorf("prefix %q", p)
	}
	if d := time.Since(start); d > 2*resendFirst+time.Second {
		t.Errorf("handshake took %v", d)
	}
}

func TestHandshakeGivesUpWithContext(t *testing.T) {
	host, guest := pair(t)
	go io.Copy(io.Discard, guest) // a guest that never answers
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Handshake(ctx, host)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Handshake: %v, want deadline exceeded", err)
	}
}

func TestGuestSyncIgnoresStaleGo(t *testing.T) {
	// A GO for a SYN this session did not answer (an older host's) does not
	// end the handshake; the GO of the answered SYN does.
	in := "tail of an old stream WRNGO_1111111111111111\r\n" +
		"WRNSYN2222222222222222\r\n" + "WRNGO_1111111111111111\r\n" +
		"WRNGO_2222222222222222\r\n" + "PRI"
	var out bytes.Buffer
	prefix, err := guestSync(struct {
		io.Reader
		io.Writer
	}{strings.NewReader(in), &out})
	if err != nil || string(prefix) != "PRI" || out.String() != "WRNACK2222222222222222\r\n" {
		t.Errorf("guestSync: prefix %q, err %v, wrote %q", prefix, err, out.String())
	}
	// The host going mid-handshake is io.EOF.
	_, err = guestSync(struct {
		io.Reader
		io.Writer
	}{strings.NewReader("WRNSYN2222222222222222\r\n"), io.Discard})
	if err != io.EOF {
		t.Errorf("guestSync at EOF: %v", err)
	}
}
