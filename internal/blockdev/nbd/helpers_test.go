package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warren/internal/blockdev"
)

// newFile returns a blockdev.File over a new sparse file of size bytes, and
// the file's path.
func newFile(t testing.TB, size int64) (*blockdev.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	f, err := blockdev.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// sockDir returns a new short directory for unix sockets, whose paths are
// limited to about 100 bytes (t.TempDir's can be longer).
func sockDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// server is a Server serving on a unix socket of its own.
type server struct {
	sock   string
	cancel context.CancelFunc
	done   chan error // Serve's result
}

// serve starts Serve for dev; the test's cleanup stops it and checks that
// it returned nil.
func serve(t testing.TB, dev blockdev.Device, opts Options) *server {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	sock := filepath.Join(sockDir(t), "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{sock: sock, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- NewServer(dev, opts).Serve(ctx, ln) }()
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// stop cancels Serve's context and waits for it to return, at most 20 s.
func (s *server) stop() error {
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for another stop
		return err
	case <-time.After(20 * time.Second):
		return errors.New("Serve did not return 20 s after its context was cancelled")
	}
}

// testLog logs through t, so that a failing test shows the server's view.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// hooked is a Device whose every call goes through hook first; an error
// from hook is returned instead of calling the device.
type hooked struct {
	blockdev.Device
	hook func(op string, off, n int64) error
}

var _ blockdev.Device = (*hooked)(nil)

func (d *hooked) ReadAt(p []byte, off int64) (int, error) {
	if err := d.hook("read", off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.Device.ReadAt(p, off)
}

func (d *hooked) WriteAt(p []byte, off int64) (int, error) {
	if err := d.hook("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	return d.Device.WriteAt(p, off)
}

func (d *hooked) Flush() error {
	if err := d.hook("flush", 0, 0); err != nil {
		return err
	}
	return d.Device.Flush()
}

func (d *hooked) Trim(off, n int64) error {
	if err := d.hook("trim", off, n); err != nil {
		return err
	}
	return d.Device.Trim(off, n)
}

func (d *hooked) WriteZeroes(off, n int64) error {
	if err := d.hook("zero", off, n); err != nil {
		return err
	}
	return d.Device.WriteZeroes(off, n)
}

// opLog records the calls a hooked device gets, as "op off+n".
type opLog struct {
	mu  sync.Mutex
	ops []string // guarded by mu
}

func (l *opLog) hook(op string, off, n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if op == "flush" {
		l.ops = append(l.ops, op)
	} else {
		l.ops = append(l.ops, fmt.Sprintf("%s %d+%d", op, off, n))
	}
	return nil
}

func (l *opLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ops...)
}

// wire encodes values as NBD sends them: integers big-endian, byte slices
// and strings as they are.
func wire(vals ...any) []byte {
	var b []byte
	for _, v := range vals {
		switch v := v.(type) {
		case uint16:
			b = binary.BigEndian.AppendUint16(b, v)
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case uint64:
			b = binary.BigEndian.AppendUint64(b, v)
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		default:
			panic(fmt.Sprintf("wire: %T", v))
		}
	}
	return b
}

// client is a minimal NBD client that sends exactly what a test tells it
// to, whether the protocol allows it or not. Every read and write fails the
// test after 10 s.
type client struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

// dial connects to sock and reads the server's greeting.
func dial(t testing.TB, sock string) *client {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := &client{t: t, c: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, want := cl.read(18), wire(uint64(magicInit), uint64(magicOpt), uint16(flagFixedNewstyle|flagNoZeroes)); string(got) != string(want) {
		t.Fatalf("greeting %x, want %x", got, want)
	}
	return cl
}

func (cl *client) write(vals ...any) {
	cl.t.Helper()
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := cl.c.Write(wire(vals...)); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

func (cl *client) read(n int) []byte {
	cl.t.Helper()
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(cl.r, b); err != nil {
		cl.t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// option sends an option with data.
func (cl *client) option(opt uint32, data []byte) {
	cl.t.Helper()
	cl.write(uint64(magicOpt), opt, uint32(len(data)), data)
}

// optReply reads one option reply and checks it answers opt.
func (cl *client) optReply(opt uint32) (typ uint32, data []byte) {
	cl.t.Helper()
	h := cl.read(20)
	if magic := binary.BigEndian.Uint64(h); magic != magicOptReply {
		cl.t.Fatalf("option reply magic %#x", magic)
	}
	if got := binary.BigEndian.Uint32(h[8:]); got != opt {
		cl.t.Fatalf("reply to option %d, want %d", got, opt)
	}
	return binary.BigEndian.Uint32(h[12:]), cl.read(int(binary.BigEndian.Uint32(h[16:])))
}

// negotiate sends the client flags and NBD_OPT_GO for name, and reads the
// replies up to the ACK.
func (cl *client) negotiate(name string) {
	cl.t.Helper()
	cl.write(uint32(clientFixedNewstyle | clientNoZeroes))
	cl.option(optGo, wire(uint32(len(name)), name, uint16(0)))
	for {
		typ, data := cl.optReply(optGo)
		switch typ {
		case repAck:
			return
		case repInfo:
		default:
			cl.t.Fatalf("NBD_OPT_GO: reply %#x %x", typ, data)
		}
	}
}

// request sends one request, with payload after it if any.
func (cl *client) request(typ, flags uint16, handle, off uint64, n uint32, payload []byte) {
	cl.t.Helper()
	cl.write(uint32(magicRequest), flags, typ, handle, off, n, payload)
}

// reply reads one simple reply's header.
func (cl *client) reply() (errno uint32, handle uint64) {
	cl.t.Helper()
	h := cl.read(replySize)
	if magic := binary.BigEndian.Uint32(h); magic != magicReply {
		cl.t.Fatalf("reply magic %#x", magic)
	}
	return binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint64(h[8:])
}

// do sends a request and reads its reply, with n bytes of data if it is a
// successful READ, and checks the reply's handle.
func (cl *client) do(typ, flags uint16, off uint64, n uint32, payload []byte) (uint32, []byte) {
	cl.t.Helper()
	cl.request(typ, flags, 42, off, n, payload)
	errno, handle := cl.reply()
	if handle != 42 {
		cl.t.Fatalf("reply to handle %d, want 42", handle)
	}
	if typ == cmdRead && errno == 0 {
		return 0, cl.read(int(n))
	}
	return errno, nil
}

// closed checks that the server closes the connection, sending nothing
// more: within 10 s, a read returns EOF (or a reset).
func (cl *client) closed() {
	cl.t.Helper()
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(cl.r)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		cl.t.Fatalf("connection not closed: %v", err)
	}
	if len(b) != 0 {
		cl.t.Fatalf("connection sent %x before closing", b)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// gate returns a channel that hooks wait on and a func that opens it; it
// may be called again. Tests defer it, so that one that fails does not
// leave requests stuck in the device while its server is stopped.
func gate() (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}
