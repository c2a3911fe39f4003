package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warren/internal/blockdev"
)

// connect serves dev and returns a client in transmission.
func connect(t *testing.T, dev blockdev.Device) *client {
	t.Helper()
	cl := dial(t, serve(t, dev, Options{}).sock)
	cl.negotiate("")
	return cl
}

func fill(t *testing.T, dev blockdev.Device, b byte) {
	t.Helper()
	if _, err := dev.WriteAt(bytes.Repeat([]byte{b}, testSize), 0); err != nil {
		t.Fatal(err)
	}
}

// checkBytes checks that dev holds want at off.
func checkBytes(t *testing.T, dev blockdev.Device, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := dev.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("at %d: byte %#x, want %#x", off+int64(i), got[i], want[i])
		}
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestReadWrite(t *testing.T) {
	dev, _ := newFile(t, testSize)
	cl := connect(t, dev)
	data := pattern(3*4096+123, 1)
	if errno, _ := cl.do(cmdWrite, 0, 4000, uint32(len(data)), data); errno != 0 {
		t.Fatalf("WRITE: error %d", errno)
	}
	errno, got := cl.do(cmdRead, 0, 4000, uint32(len(data)), nil)
	if errno != 0 || !bytes.Equal(got, data) {
		t.Fatalf("READ: error %d, data equal %v", errno, bytes.Equal(got, data))
	}
	checkBytes(t, dev, 4000, data)
	if errno, _ := cl.do(cmdRead, 0, testSize, 0, nil); errno != 0 {
		t.Fatalf("READ of 0 bytes at the end: error %d", errno)
	}
}

// Requests that must not reach the device get EINVAL, and the connection
// stays usable: the next request is answered.
func TestInvalidRequests(t *testing.T) {
	data4k := pattern(4096, 9)
	tests := []struct {
		name       string
		typ, flags uint16
		off        uint64
		n          uint32
		payload    []byte
	}{
		{name: "read beyond the end", typ: cmdRead, off: testSize - 4096, n: 8192},
		{name: "read after the end", typ: cmdRead, off: testSize + 1, n: 0},
		{name: "read at a huge offset", typ: cmdRead, off: 1<<64 - 4096, n: 8192},
		{name: "write beyond the end", typ: cmdWrite, off: testSize - 2048, n: 4096, payload: data4k},
		{name: "write at a huge offset", typ: cmdWrite, off: 1 << 63, n: 4096, payload: data4k},
		{name: "trim beyond the end", typ: cmdTrim, off: 0, n: testSize + 4096},
		{name: "write zeroes beyond the end", typ: cmdWriteZeroes, off: testSize, n: 1},
		{name: "NBD_CMD_CACHE", typ: 5, n: 4096},
		{name: "NBD_CMD_BLOCK_STATUS", typ: 7, n: 4096},
		{name: "unknown command", typ: 0x7fff},
		{name: "unknown flag on write", typ: cmdWrite, flags: 1 << 7, n: 4096, payload: data4k},
		{name: "NO_HOLE on trim", typ: cmdTrim, flags: cmdFlagNoHole, n: 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log opLog
			dev, _ := newFile(t, testSize)
			cl := connect(t, &hooked{Device: dev, hook: log.hook})
			if errno, _ := cl.do(tt.typ, tt.flags, tt.off, tt.n, tt.payload); errno != errInvalid {
				t.Fatalf("error %d, want EINVAL (%d)", errno, errInvalid)
			}
			if errno, got := cl.do(cmdRead, 0, 0, 4096, nil); errno != 0 || !bytes.Equal(got, make([]byte, 4096)) {
				t.Fatalf("READ after: error %d, zeros %v", errno, bytes.Equal(got, make([]byte, 4096)))
			}
			if ops := log.get(); !slices.Equal(ops, []string{"read 0+4096"}) {
				t.Fatalf("device calls %q, want only the READ after", ops)
			}
		})
	}
}

// A client that breaks the framing of the request stream is disconnected.
func TestBrokenRequests(t *testing.T) {
	tests := []struct {
		name string
		send func(*client)
	}{
		{"bad magic", func(cl *client) {
			cl.write(uint32(0x25609514), uint16(0), uint16(cmdRead), uint64(1), uint64(0), uint32(512))
		}},
		{"read too big", func(cl *client) { cl.request(cmdRead, 0, 1, 0, maxPayload+1, nil) }},
		// The payload is not sent: the server must not wait for it.
		{"write too big", func(cl *client) { cl.request(cmdWrite, 0, 1, 0, maxPayload+1, nil) }},
		{"write too big beyond the end", func(cl *client) { cl.request(cmdWrite, 0, 1, 1<<40, 0xffffffff, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log opLog
			dev, _ := newFile(t, testSize)
			cl := connect(t, &hooked{Device: dev, hook: log.hook})
			tt.send(cl)
			cl.closed()
			if ops := log.get(); len(ops) != 0 {
				t.Fatalf("device calls %q, want none", ops)
			}
		})
	}
}

// TRIM and WRITE_ZEROES pass whole blocks to the device; WRITE_ZEROES
// writes zeros over the partial blocks at either end, TRIM leaves them be.
func TestZeroes(t *testing.T) {
	const bs = blockdev.BlockSize
	tests := []struct {
		name      string
		typ       uint16
		off, n    int64
		zeroed    [][2]int64 // ranges that read as zeros after
		wantCalls []string
	}{
		{name: "aligned write zeroes", typ: cmdWriteZeroes, off: bs, n: 2 * bs,
			zeroed: [][2]int64{{bs, 3 * bs}}, wantCalls: []string{"zero 4096+8192"}},
		{name: "unaligned write zeroes", typ: cmdWriteZeroes, off: 100, n: 3*bs + 50,
			zeroed:    [][2]int64{{100, 3*bs + 150}},
			wantCalls: []string{"write 100+3996", "write 12288+150", "zero 4096+8192"}},
		{name: "write zeroes inside two blocks", typ: cmdWriteZeroes, off: 100, n: 2*bs - 200,
			zeroed: [][2]int64{{100, 2*bs - 100}}, wantCalls: []string{"write 100+7992"}},
		{name: "aligned trim", typ: cmdTrim, off: 0, n: testSize,
			zeroed: [][2]int64{{0, testSize}}, wantCalls: []string{"trim 0+1048576"}},
		{name: "unaligned trim", typ: cmdTrim, off: 100, n: 3*bs + 50,
			zeroed: [][2]int64{{bs, 3 * bs}}, wantCalls: []string{"trim 4096+8192"}},
		{name: "trim inside a block", typ: cmdTrim, off: 100, n: 200},
		{name: "empty trim", typ: cmdTrim, off: testSize, n: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log opLog
			dev, _ := newFile(t, testSize)
			fill(t, dev, 0xff)
			cl := connect(t, &hooked{Device: dev, hook: log.hook})
			if errno, _ := cl.do(tt.typ, 0, uint64(tt.off), uint32(tt.n), nil); errno != 0 {
				t.Fatalf("error %d", errno)
			}
			want := bytes.Repeat([]byte{0xff}, testSize)
			for _, r := range tt.zeroed {
				clear(want[r[0]:r[1]])
			}
			checkBytes(t, dev, 0, want)
			got := log.get()
			slices.Sort(got)
			slices.Sort(tt.wantCalls)
			if !slices.Equal(got, tt.wantCalls) {
				t.Fatalf("device calls %q, want %q", got, tt.wantCalls)
			}
		})
	}
}

// FLUSH, and FUA on every command that writes, reach Device.Flush before
// the reply is sent: while Flush is held, no reply comes.
func TestFlushBeforeReply(t *testing.T) {
	tests := []struct {
		name      string
		typ       uint16
		flags     uint16
		payload   []byte
		wantCalls []string
	}{
		{"flush", cmdFlush, 0, nil, []string{"flush"}},
		{"write FUA", cmdWrite, cmdFlagFUA, pattern(4096, 3), []string{"write 0+4096", "flush"}},
		{"trim FUA", cmdTrim, cmdFlagFUA, nil, []string{"trim 0+4096", "flush"}},
		{"write zeroes FUA", cmdWriteZeroes, cmdFlagFUA | cmdFlagNoHole, nil, []string{"zero 0+4096", "flush"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				log     opLog
				flushes atomic.Int32
			)
			release, open := gate()
			defer open()
			dev, _ := newFile(t, testSize)
			cl := connect(t, &hooked{Device: dev, hook: func(op string, off, n int64) error {
				log.hook(op, off, n)
				if op == "flush" {
					flushes.Add(1)
					<-release
				}
				return nil
			}})
			n := uint32(4096)
			if tt.typ == cmdFlush {
				n = 0
			}
			cl.request(tt.typ, tt.flags, 7, 0, n, tt.payload)
			waitFor(t, "Device.Flush", func() bool { return flushes.Load() == 1 })
			cl.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := cl.r.Peek(1); err == nil {
				t.Fatal("reply sent while Device.Flush had not returned")
			}
			open()
			if errno, handle := cl.reply(); errno != 0 || handle != 7 {
				t.Fatalf("reply: error %d, handle %d", errno, handle)
			}
			if got := log.get(); !slices.Equal(got, tt.wantCalls) {
				t.Fatalf("device calls %q, want %q", got, tt.wantCalls)
			}
		})
	}
}

// READ and FLUSH ignore FUA, as the spec allows.
func TestFUAIgnoredOnRead(t *testing.T) {
	var log opLog
	dev, _ := newFile(t, testSize)
	cl := connect(t, &hooked{Device: dev, hook: log.hook})
	if errno, _ := cl.do(cmdRead, cmdFlagFUA, 0, 512, nil); errno != 0 {
		t.Fatalf("READ with FUA: error %d", errno)
	}
	if got := log.get(); !slices.Equal(got, []string{"read 0+512"}) {
		t.Fatalf("device calls %q", got)
	}
}

// Device errors reach the client as errno values only; the connection
// goes on.
func TestDeviceErrors(t *testing.T) {
	tests := []struct {
		err  error
		want uint32
	}{
		{fmt.Errorf("write chunk: %w", syscall.ENOSPC), errNoSpace},
		{fmt.Errorf("fault in chunk: %w", blockdev.ErrRange), errInvalid},
		{errors.New("s3: access denied for bucket tenant-secrets"), errIO},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			dev, _ := newFile(t, testSize)
			var fail atomic.Bool
			cl := connect(t, &hooked{Device: dev, hook: func(op string, off, n int64) error {
				if fail.Load() {
					return tt.err
				}
				return nil
			}})
			fail.Store(true)
			for _, typ := range []uint16{cmdRead, cmdWrite, cmdFlush, cmdTrim, cmdWriteZeroes} {
				var payload []byte
				if typ == cmdWrite {
					payload = make([]byte, 4096)
				}
				if errno, _ := cl.do(typ, 0, 0, 4096, payload); errno != tt.want {
					t.Fatalf("command %d: error %d, want %d", typ, errno, tt.want)
				}
			}
			fail.Store(false)
			if errno, _ := cl.do(cmdRead, 0, 0, 4096, nil); errno != 0 {
				t.Fatalf("READ after: error %d", errno)
			}
		})
	}
}

// Requests on one connection run concurrently, at most maxInFlight at once,
// and their replies come back whole, in any order.
func TestConcurrentRequests(t *testing.T) {
	var (
		mu     sync.Mutex
		inside int // reads in the device, guarded by mu
		most   int // guarded by mu
	)
	release, open := gate()
	defer open()
	dev, _ := newFile(t, testSize)
	if _, err := dev.WriteAt(pattern(testSize, 5), 0); err != nil {
		t.Fatal(err)
	}
	cl := connect(t, &hooked{Device: dev, hook: func(op string, off, n int64) error {
		mu.Lock()
		inside++
		most = max(most, inside)
		mu.Unlock()
		<-release
		mu.Lock()
		inside--
		mu.Unlock()
		return nil
	}})
	const n = 3 * maxInFlight
	for i := range n {
		cl.request(cmdRead, 0, uint64(i), uint64(i)*4096, 4096, nil)
	}
	waitFor(t, "maxInFlight reads in the device", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inside == maxInFlight
	})
	time.Sleep(50 * time.Millisecond) // time for a 17th to enter, were it let in
	open()
	seen := make(map[uint64]bool)
	want := pattern(testSize, 5)
	for range n {
		errno, handle := cl.reply()
		if errno != 0 || handle >= n || seen[handle] {
			t.Fatalf("reply: error %d, handle %d (seen: %v)", errno, handle, seen[handle])
		}
		seen[handle] = true
		if got := cl.read(4096); !bytes.Equal(got, want[handle*4096:][:4096]) {
			t.Fatalf("READ %d: wrong data", handle)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most != maxInFlight {
		t.Fatalf("%d requests in the device at once, want %d", most, maxInFlight)
	}
}

// serveOne serves a single connection with ServeConn and returns the
// client's end and ServeConn's result.
func serveOne(t *testing.T, ctx context.Context, dev blockdev.Device) (*client, <-chan error) {
	t.Helper()
	sock := filepath.Join(sockDir(t), "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		done <- NewServer(dev, Options{Log: testLog(t)}).ServeConn(ctx, c)
	}()
	cl := dial(t, sock)
	cl.negotiate("")
	return cl, done
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return")
		return nil
	}
}

// A client that hangs up mid-request ends its connection with an error,
// and the half-sent WRITE never reaches the device.
func TestClientVanishes(t *testing.T) {
	var log opLog
	dev, _ := newFile(t, testSize)
	cl, done := serveOne(t, context.Background(), &hooked{Device: dev, hook: log.hook})
	cl.request(cmdWrite, 0, 1, 0, 65536, pattern(1000, 1))
	cl.c.Close()
	if err := result(t, done); err == nil {
		t.Fatal("ServeConn returned nil for a client gone mid-request")
	}
	if ops := log.get(); len(ops) != 0 {
		t.Fatalf("device calls %q, want none", ops)
	}
}

// A client that hangs up with a READ in flight: the request finishes, its
// reply fails, and ServeConn returns.
func TestClientVanishesInFlight(t *testing.T) {
	var entered atomic.Bool
	release, open := gate()
	defer open()
	dev, _ := newFile(t, testSize)
	cl, done := serveOne(t, context.Background(), &hooked{Device: dev, hook: func(string, int64, int64) error {
		entered.Store(true)
		<-release
		return nil
	}})
	cl.request(cmdRead, 0, 1, 0, 1<<20, nil)
	waitFor(t, "the READ in the device", entered.Load)
	cl.c.Close()
	open()
	result(t, done)
}

// A client that ends the session cleanly: ServeConn returns nil.
func TestDisconnect(t *testing.T) {
	dev, _ := newFile(t, testSize)
	for _, end := range []string{"NBD_CMD_DISC", "close"} {
		t.Run(end, func(t *testing.T) {
			cl, done := serveOne(t, context.Background(), dev)
			if errno, _ := cl.do(cmdRead, 0, 0, 512, nil); errno != 0 {
				t.Fatalf("READ: error %d", errno)
			}
			if end == "close" {
				cl.c.Close()
			} else {
				cl.request(cmdDisc, 0, 2, 0, 0, nil)
			}
			if err := result(t, done); err != nil {
				t.Fatalf("ServeConn: %v", err)
			}
		})
	}
}
