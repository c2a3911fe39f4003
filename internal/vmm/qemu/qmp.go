package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The QMP client. QMP is JSON over a stream, one object per line: QEMU
// greets ({"QMP": {...}}), the client negotiates capabilities
// (qmp_capabilities), then sends commands ({"execute", "arguments", "id"})
// and reads replies ({"return"} or {"error"}, echoing the id) with
// asynchronous events ({"event", "data", "timestamp"}) interleaved anywhere
// between them. One goroutine reads; it hands each reply to the call that
// waits for its id and each event to every subscriber, and never blocks on
// either.
//
// The peer is a VMM that runs an untrusted guest: a guest that escapes into
// it controls what this client reads. So a line is at most maxMessage
// bytes, malformed input ends the connection with an error (never a panic),
// and a subscriber that does not keep up loses events rather than stalling
// the reader.

// maxMessage bounds one QMP line. QEMU's largest replies to the commands
// warren uses are a few KiB.
const maxMessage = 1 << 20

// defaultHandshake bounds the greeting and capability negotiation when ctx
// has no deadline.
const defaultHandshake = 10 * time.Second

// writeTimeout bounds one command's write: a VMM that stops reading its
// socket must not block the caller forever.
const writeTimeout = 10 * time.Second

// ErrClosed means the QMP connection is gone: closed by Close, or ended by
// the VMM (it exited, or sent something that is not QMP).
var ErrClosed = errors.New("qmp connection closed")

// Error is a command's error reply.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return fmt.Sprintf("qmp %s: %s", e.Class, e.Desc) }

// Event is an asynchronous QMP event, such as STOP, RESUME, SHUTDOWN or
// MIGRATION.
type Event struct {
	Name string
	// Data is the event's "data" member, raw; nil if it had none.
	Data json.RawMessage
	// Time is QEMU's timestamp of the event.
	Time time.Time
}

// Greeting is what QEMU announces when a client connects.
type Greeting struct {
	Version struct {
		QEMU struct {
			Major int `json:"major"`
			Minor int `json:"minor"`
			Micro int `json:"micro"`
		} `json:"qemu"`
		Package string `json:"package"`
	} `json:"version"`
	Capabilities []string `json:"capabilities"`
}

// message is any line QEMU sends.
type message struct {
	QMP       *Greeting       `json:"QMP"`
	Return    json.RawMessage `json:"return"`
	Error     *Error          `json:"error"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
	ID json.RawMessage `json:"id"`
}

type reply struct {
	ret json.RawMessage
	err error
}

// Client is a QMP connection. Its methods are safe for concurrent use.
//
// Lock order: writeMu before mu.
type Client struct {
	conn     *net.UnixConn
	log      *slog.Logger
	greeting Greeting

	// writeMu serializes writes, so that one command's bytes (and the file
	// descriptor sent with them) are never interleaved with another's.
	writeMu sync.Mutex

	mu      sync.Mutex            // guards the fields below
	nextID  uint64                // id of the next command
	pending map[uint64]chan reply // calls waiting for their reply, by id
	subs    map[*subscription]struct{}
	err     error // why the connection ended; set once, with done closed

	done chan struct{} // closed when the reader has stopped
}

type subscription struct {
	ch      chan Event
	dropped int // events lost because ch was full; guarded by Client.mu
}

// Dial connects to the QMP socket at path and negotiates capabilities; ctx
// bounds the connection and the handshake (default 10 s).
func Dial(ctx context.Context, path string, log *slog.Logger) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp dial: %w", err)
	}
	return NewClient(ctx, c.(*net.UnixConn), log)
}

// NewClient runs the QMP handshake on conn (reads the greeting, sends
// qmp_capabilities) and returns the client, which owns conn from then on.
// ctx bounds the handshake (default 10 s). On error conn is closed.
func NewClient(ctx context.Context, conn *net.UnixConn, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		conn:    conn,
		log:     log,
		nextID:  1,
		pending: map[uint64]chan reply{},
		subs:    map[*subscription]struct{}{},
		done:    make(chan struct{}),
	}
	deadline, ctxDeadline := ctx.Deadline()
	if !ctxDeadline {
		deadline = time.Now().Add(defaultHandshake)
	}
	conn.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := readLine(r)
	stop()
	if err != nil {
		conn.Close()
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded):
			// The socket's deadline is ctx's; its timer may fire first.
			err = context.DeadlineExceeded
		}
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil || m.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: not a QMP greeting: %.200q", line)
	}
	c.greeting = *m.QMP
	conn.SetReadDeadline(time.Time{})
	go c.read(r)
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := c.Execute(hctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp handshake: %w", err)
	}
	return c, nil
}

// Greeting returns QEMU's greeting.
func (c *Client) Greeting() Greeting { return c.greeting }

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (wrapping ErrClosed), or nil while
// it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection and waits for the reader to stop. Calls in
// flight fail with ErrClosed; subscriptions' channels are closed. It may be
// called more than once.
func (c *Client) Close() error {
	c.conn.Close()
	<-c.done
	return nil
}

// Execute runs command with args (nil for none; anything encoding/json
// marshals to an object) and decodes the reply's "return" into result
// (nil to ignore it). A command's error reply is an *Error. If ctx ends
// before the reply, Execute returns ctx's error, but the command may still
// take effect in QEMU. If the connection is gone, the error wraps
// ErrClosed.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	return c.execute(ctx, command, args, nil, result)
}

// ExecuteWithFile is Execute sending f's file descriptor along with the
// command (SCM_RIGHTS), as QMP's getfd and add-fd expect. QEMU gets its own
// copy; the caller keeps f.
func (c *Client) ExecuteWithFile(ctx context.Context, command string, args any, f *os.File, result any) error {
	if f == nil {
		return errors.New("qmp: nil file")
	}
	return c.execute(ctx, command, args, f, result)
}

func (c *Client) execute(ctx context.Context, command string, args any, f *os.File, result any) error {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	id := c.nextID
	c.nextID++
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}

	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        uint64 `json:"id"`
	}{command, args, id}
	b, err := json.Marshal(req)
	if err != nil {
		forget()
		return fmt.Errorf("qmp %s: encode: %w", command, err)
	}
	b = append(b, '\n')
	if err := c.write(ctx, b, f); err != nil {
		forget()
		return fmt.Errorf("qmp %s: %w", command, err)
	}

	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("qmp %s: %w", command, r.err)
		}
		if result != nil && len(r.ret) > 0 {
			if err := json.Unmarshal(r.ret, result); err != nil {
				return fmt.Errorf("qmp %s: decode reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		forget()
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (c *Client) write(ctx context.Context, b []byte, f *os.File) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	deadline := time.Now().Add(writeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetWriteDeadline(deadline)
	defer c.conn.SetWriteDeadline(time.Time{})
	if f == nil {
		_, err := c.conn.Write(b)
		return err
	}
	// The descriptor travels with the first byte: QEMU attaches it to the
	// command being read. A unix stream socket takes a message this small
	// whole, but check.
	n, _, err := c.conn.WriteMsgUnix(b, syscall.UnixRights(int(f.Fd())), nil)
	if err == nil && n < len(b) {
		_, err = c.conn.Write(b[n:])
	}
	return err
}

// Subscribe returns a channel that receives every event from now on, and a
// function that ends the subscription. The channel holds buffer events
// (at least 1); when it is full further events are dropped for this
// subscriber, never queued, so a slow subscriber cannot stall the client.
// The channel is closed when the subscription or the connection ends.
func (c *Client) Subscribe(buffer int) (<-chan Event, func()) {
	s := &subscription{ch: make(chan Event, max(buffer, 1))}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		close(s.ch)
		return s.ch, func() {}
	}
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if _, ok := c.subs[s]; ok {
				delete(c.subs, s)
				close(s.ch)
			}
		})
	}
}

// read is the reader goroutine; it owns r and stops when the connection
// ends or carries something that is not QMP.
func (c *Client) read(r *bufio.Reader) {
	var err error
	for {
		var line []byte
		line, err = readLine(r)
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m message
		if err = json.Unmarshal(line, &m); err != nil {
			err = fmt.Errorf("malformed message %.200q: %w", line, err)
			break
		}
		switch {
		case m.Event != "":
			c.dispatch(eventOf(&m))
		case m.Return != nil || m.Error != nil:
			c.deliver(&m)
		default:
			c.log.Warn("qmp: ignoring unknown message", "msg", fmt.Sprintf("%.200q", line))
		}
	}
	c.conn.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = ErrClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	c.mu.Lock()
	c.err = err
	for id, ch := range c.pending {
		ch <- reply{err: err}
		delete(c.pending, id)
	}
	for s := range c.subs {
		if s.dropped > 0 {
			c.log.Warn("qmp: subscriber missed events", "dropped", s.dropped)
		}
		close(s.ch)
		delete(c.subs, s)
	}
	c.mu.Unlock()
	close(c.done)
}

func eventOf(m *message) Event {
	ev := Event{Name: m.Event, Data: m.Data}
	if ts := m.Timestamp; ts != nil {
		ev.Time = time.Unix(ts.Seconds, ts.Microseconds*1000)
	}
	return ev
}

// deliver hands a reply to the call waiting for its id. A reply nobody
// waits for (its caller gave up, or the id is not ours) is dropped.
func (c *Client) deliver(m *message) {
	id, err := strconv.ParseUint(string(m.ID), 10, 64)
	if err != nil {
		c.log.Warn("qmp: reply without a usable id", "id", string(m.ID))
		return
	}
	r := reply{ret: m.Return}
	if m.Error != nil {
		r.err = m.Error
	}
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		ch <- r // buffered, one reply per id: never blocks
	}
}

func (c *Client) dispatch(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped++
		}
	}
}

// errTooLong means a line exceeded maxMessage.
var errTooLong = fmt.Errorf("qmp message longer than %d bytes", maxMessage)

// readLine reads one line, without its end, of at most maxMessage bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > maxMessage {
			return nil, errTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
