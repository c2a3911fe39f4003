// Package vmport is the guest agent's virtio-serial port, both ends: the
// session handshake the host (Handshake) and the guest (Listener) run each
// time the host connects, and, in the guest, a net.Listener over the port
// device on which the agent serves HTTP/2.
//
// Why a handshake. A virtio-serial port is one byte stream that outlives
// the host's connections to it (QEMU bridges it to a unix socket that takes
// one client at a time). The guest learns that the host went only by
// reading end-of-file while no host is connected, so when the host
// reconnects quickly the guest's old session may never see the end: it
// reads the new host's first bytes, and the new host reads the old
// session's last words. Plain HTTP/2 on such a stream fails in both
// directions (and can hang). So each session starts with a handshake, in
// 24-byte messages: a 6-byte tag, 16 hex digits of nonce, CRLF.
//
//	host → guest   WRNSYN<nonce>\r\n   sent again with a new nonce until answered
//	guest → host   WRNACK<nonce>\r\n   one for every SYN the guest reads, in order
//	host → guest   WRNGO_<nonce>\r\n   once the ACK of the latest SYN arrived
//
// after which both ends speak HTTP/2, the host first (the client preface).
// The guest skips whatever precedes a SYN (the tail of an older host
// stream) and the host whatever precedes the ACK of its latest SYN (an older
// guest session's last words, ACKs of its earlier SYNs). An older guest
// session that is still reading takes a SYN for a malformed HTTP/2 frame
// (its first three bytes read as a length beyond any limit) and closes; the
// guest then reopens the port and answers the next SYN.
//
// This package is imported by the agent, so it stays small: x/sys and the
// standard library. It knows nothing of HTTP or of the agent's API.
package vmport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"
)

// Name is the name the host gives the agent's port (QEMU: -device
// virtserialport,name=warren.agent); the guest finds it by this name.
const Name = "warren.agent"

// The handshake's messages.
const (
	tagSyn = "WRNSYN"
	tagAck = "WRNACK"
	tagGo  = "WRNGO_"
	msgLen = 6 + 16 + 2
)

// Resend bounds of the host's SYN. A guest that is up answers in
// milliseconds. None answers while the guest still boots (its SYNs wait in
// the socket and are all answered when it opens the port), or while an old
// session that did not see the host go has yet to die of the first SYN: Go's
// HTTP/2 server lingers a second after a protocol error, and SYNs the guest
// had buffered are dropped when it closes the port, so a later one must come.
const (
	resendFirst = 50 * time.Millisecond
	resendMax   = 250 * time.Millisecond
)

func message(tag, nonce string) []byte { return []byte(tag + nonce + "\r\n") }

// findMessage returns the first handshake message in b (its tag and nonce)
// and the bytes after it. When b holds no whole message, ok is false and
// rest is the tail of b that may be the start of one, to keep for more
// bytes; everything before it is noise.
func findMessage(b []byte) (tag, nonce string, rest []byte, ok bool) {
	for i := 0; ; i++ {
		j := bytes.Index(b[i:], []byte("WRN"))
		if j < 0 {
			return "", "", b[max(len(b)-2, i):], false // "W" or "WR" may start one
		}
		i += j
		if len(b)-i < msgLen {
			return "", "", b[i:], false
		}
		m := b[i : i+msgLen]
		tag = string(m[:6])
		if (tag == tagSyn || tag == tagAck || tag == tagGo) && isHex(m[6:22]) && string(m[22:]) == "\r\n" {
			return tag, string(m[6:22]), b[i+msgLen:], true
		}
	}
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// longAgo is a deadline in the past: it interrupts a blocked read or write.
var longAgo = time.Unix(1, 0)

// Handshake runs the host's side of a session's handshake on conn, a new
// connection to the port, and returns the connection to speak HTTP/2 on
// (conn, plus any byte read past the handshake). It sends SYNs (a new nonce
// each, resent at growing intervals) until the ACK of the latest arrives,
// discarding everything else, then sends GO. ctx bounds it; on error the
// caller closes conn.
func Handshake(ctx context.Context, conn net.Conn) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(longAgo) })
	defer stop()
	fail := func(err error) (net.Conn, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("port handshake: %w", err)
	}
	buf := make([]byte, 4096)
	var pending []byte
	resend := resendFirst
	for {
		nonce := fmt.Sprintf("%016x", rand.Uint64())
		if _, err := conn.Write(message(tagSyn, nonce)); err != nil {
			return fail(err)
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		conn.SetReadDeadline(time.Now().Add(resend))
		for {
			n, err := conn.Read(buf)
			pending = append(pending, buf[:n]...)
			for {
				tag, got, rest, ok := findMessage(pending)
				pending = rest
				if !ok {
					break
				}
				if tag == tagAck && got == nonce {
					if _, err := conn.Write(message(tagGo, nonce)); err != nil {
						return fail(err)
					}
					// Past this, ctx no longer reaches conn.
					if !stop() {
						return fail(ctx.Err())
					}
					conn.SetDeadline(time.Time{})
					return &prefixConn{Conn: conn, prefix: pending}, nil
				}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
				break // no answer yet: another SYN
			}
			if err != nil {
				return fail(err)
			}
		}
		resend = min(2*resend, resendMax)
	}
}

// guestSync runs the guest's side of the handshake on a fresh open of the
// port: it answers every SYN with its ACK and returns once it reads the GO
// of the last SYN it answered, with the bytes that came after it (the
// start of the host's HTTP/2). An error (io.EOF: the host went) ends it.
func guestSync(rw io.ReadWriter) ([]byte, error) {
	buf := make([]byte, 4096)
	var pending []byte
	var answered string
	for {
		n, err := rw.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			tag, nonce, rest, ok := findMessage(pending)
			pending = rest
			if !ok {
				break
			}
			switch {
			case tag == tagSyn:
				if _, err := rw.Write(message(tagAck, nonce)); err != nil {
					return nil, err
				}
				answered = nonce
			case tag == tagGo && nonce == answered:
				return pending, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// prefixConn is a net.Conn whose first reads return prefix.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
