package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"warren/internal/blockdev"
)

// conn is one client's connection. One goroutine (ServeConn's) reads
// requests; each request then runs in a goroutine of its own, and its reply
// is written whole under wmu, in whatever order requests finish.
type conn struct {
	s        *Server
	c        net.Conn
	r        *bufio.Reader // read only by ServeConn's goroutine
	noZeroes bool          // the client asked for no 124 zero bytes
	budget   budget

	wmu  sync.Mutex // guards writes to c in transmission, and werr
	werr error      // the first failed reply; no more are written
}

func newConn(s *Server, c net.Conn) *conn {
	cn := &conn{s: s, c: c, r: bufio.NewReaderSize(c, 64<<10)}
	cn.budget.cond.L = &cn.budget.mu
	return cn
}

// request is one request's header.
type request struct {
	flags  uint16
	typ    uint16
	handle uint64
	off    uint64
	len    uint32
}

// transmit reads and serves requests until the client disconnects, breaks
// the protocol, or ctx is done, and returns once every request it started
// has been answered.
func (cn *conn) transmit(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() {
		cn.c.SetReadDeadline(time.Now())
		cn.c.SetWriteDeadline(time.Now().Add(shutdownGrace))
	})
	defer stop()

	var h [requestSize]byte
	for {
		if _, err := io.ReadFull(cn.r, h[:]); err != nil {
			if err == io.EOF {
				return nil // the client hung up between requests
			}
			return fmt.Errorf("read request: %w", err)
		}
		if magic := binary.BigEndian.Uint32(h[:]); magic != magicRequest {
			return fmt.Errorf("bad request magic %#x", magic)
		}
		req := request{
			flags:  binary.BigEndian.Uint16(h[4:]),
			typ:    binary.BigEndian.Uint16(h[6:]),
			handle: binary.BigEndian.Uint64(h[8:]),
			off:    binary.BigEndian.Uint64(h[16:]),
			len:    binary.BigEndian.Uint32(h[24:]),
		}
		if req.typ == cmdDisc {
			return nil
		}
		if (req.typ == cmdRead || req.typ == cmdWrite) && req.len > maxPayload {
			// A WRITE's payload cannot be skipped safely; nor can a client
			// that sends one be trusted with the stream.
			return fmt.Errorf("command %d of %d bytes, limit %d", req.typ, req.len, maxPayload)
		}
		if errno := cn.check(req); errno != 0 {
			if req.typ == cmdWrite {
				if _, err := io.CopyN(io.Discard, cn.r, int64(req.len)); err != nil {
					return fmt.Errorf("read write payload: %w", err)
				}
			}
			cn.reply(req.handle, errno, nil)
			continue
		}

		size := 0
		if req.typ == cmdRead || req.typ == cmdWrite {
			size = int(req.len)
		}
		cn.budget.acquire(size)
		buf := getBuf(size)
		if req.typ == cmdWrite {
			if _, err := io.ReadFull(cn.r, buf); err != nil {
				cn.budget.release(len(buf))
				putBuf(buf)
				return fmt.Errorf("read write payload: %w", err)
			}
		}
		wg.Go(func() {
			defer cn.budget.release(len(buf))
			defer putBuf(buf)
			errno := cn.do(req, buf)
			var data []byte
			if req.typ == cmdRead && errno == 0 {
				data = buf
			}
			cn.reply(req.handle, errno, data)
		})
		if err := cn.replyErr(); err != nil {
			return err
		}
	}
}

// check returns the error for a request that must not reach the device, or 0.
func (cn *conn) check(req request) uint32 {
	// FUA is allowed on every command, and ignored where nothing is written.
	allowed := uint16(cmdFlagFUA)
	switch req.typ {
	case cmdRead, cmdWrite, cmdFlush, cmdTrim:
	case cmdWriteZeroes:
		allowed |= cmdFlagNoHole
	default:
		return errInvalid
	}
	if req.flags&^allowed != 0 {
		return errInvalid
	}
	size := uint64(cn.s.dev.Size())
	if req.typ != cmdFlush && (req.off > size || uint64(req.len) > size-req.off) {
		return errInvalid
	}
	return 0
}

// do runs a checked request against the device and returns its error.
func (cn *conn) do(req request, buf []byte) uint32 {
	dev := cn.s.dev
	off, n := int64(req.off), int64(req.len)
	var err error
	switch req.typ {
	case cmdRead:
		_, err = dev.ReadAt(buf, off)
	case cmdWrite:
		_, err = dev.WriteAt(buf, off)
	case cmdFlush:
		err = dev.Flush()
	case cmdTrim:
		err = cn.zero(off, n, true)
	case cmdWriteZeroes:
		// NBD_CMD_FLAG_NO_HOLE is accepted and left to the device, which
		// decides how its blocks are stored.
		err = cn.zero(off, n, false)
	}
	if err == nil && req.flags&cmdFlagFUA != 0 && req.typ != cmdRead && req.typ != cmdFlush {
		err = dev.Flush()
	}
	if err == nil {
		return 0
	}
	cn.s.log.Error("nbd: device error", "cmd", req.typ, "offset", off, "length", n, "err", err)
	switch {
	case errors.Is(err, blockdev.ErrRange):
		return errInvalid
	case errors.Is(err, syscall.ENOSPC):
		return errNoSpace
	default:
		return errIO
	}
}

// zeros is what the partial blocks at the ends of a WRITE_ZEROES are written
// with: a range with no whole block in it is shorter than two blocks.
var zeros [2 * blockdev.BlockSize]byte

// zero trims or zeroes [off, off+n). The device takes whole blocks only:
// a write of zeros covers the partial blocks at either end, which a trim
// simply leaves alone, as the spec allows.
func (cn *conn) zero(off, n int64, trim bool) error {
	end := off + n
	first := (off + blockdev.BlockSize - 1) / blockdev.BlockSize * blockdev.BlockSize
	last := end / blockdev.BlockSize * blockdev.BlockSize
	if first >= last {
		first, last = end, end // no whole block: [off, end) is all head
	}
	if !trim {
		for _, r := range [][2]int64{{off, first}, {last, end}} {
			if r[0] < r[1] {
				if _, err := cn.s.dev.WriteAt(zeros[:r[1]-r[0]], r[0]); err != nil {
					return err
				}
			}
		}
	}
	if first == last {
		return nil
	}
	if trim {
		return cn.s.dev.Trim(first, last-first)
	}
	return cn.s.dev.WriteZeroes(first, last-first)
}

// reply sends a simple reply, with data after it (a READ's). After one reply
// fails no more are sent, and the reader is woken to end the connection.
func (cn *conn) reply(handle uint64, errno uint32, data []byte) {
	h := make([]byte, 0, replySize)
	h = binary.BigEndian.AppendUint32(h, magicReply)
	h = binary.BigEndian.AppendUint32(h, errno)
	h = binary.BigEndian.AppendUint64(h, handle)
	bufs := net.Buffers{h, data}

	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	if cn.werr != nil {
		return
	}
	if _, err := bufs.WriteTo(cn.c); err != nil {
		cn.werr = fmt.Errorf("write reply: %w", err)
		cn.c.SetReadDeadline(time.Now())
	}
}

func (cn *conn) replyErr() error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	return cn.werr
}

// budget bounds a connection's requests in flight, by count (maxInFlight)
// and by the bytes of their buffers (maxInFlightBytes). The reader waits in
// acquire, leaving further requests unread, until both are free.
type budget struct {
	mu    sync.Mutex
	cond  sync.Cond // L is &mu; signalled on release
	n     int       // guarded by mu
	bytes int       // guarded by mu
}

func (b *budget) acquire(size int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.n >= maxInFlight || b.n > 0 && b.bytes+size > maxInFlightBytes {
		b.cond.Wait()
	}
	b.n++
	b.bytes += size
}

func (b *budget) release(size int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n--
	b.bytes -= size
	b.cond.Signal()
}
