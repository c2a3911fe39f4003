package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const greeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}` + "\r\n"

// fakeQEMU is the server end of a QMP connection, driven by the test.
type fakeQEMU struct {
	t    *testing.T
	conn *net.UnixConn
	r    *bufio.Reader
	mu   sync.Mutex // serializes writes
}

// request is a command as the fake reads it.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func socketPair(t *testing.T) (client, server *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "qmp")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// newPair returns a client that has completed its handshake with a fake.
func newPair(t *testing.T) (*Client, *fakeQEMU) {
	t.Helper()
	cc, sc := socketPair(t)
	f := &fakeQEMU{t: t, conn: sc, r: bufio.NewReader(sc)}
	t.Cleanup(func() { sc.Close() })
	go func() {
		f.send(greeting)
		req, err := f.next()
		if err != nil || req.Execute != "qmp_capabilities" {
			sc.Close()
			return
		}
		f.reply(req, `{}`)
	}()
	c, err := NewClient(context.Background(), cc, nil)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, f
}

func (f *fakeQEMU) send(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conn.Write([]byte(s))
}

func (f *fakeQEMU) next() (request, error) {
	line, err := f.r.ReadBytes('\n')
	if err != nil {
		return request{}, err
	}
	var req request
	err = json.Unmarshal(line, &req)
	return req, err
}

func (f *fakeQEMU) reply(req request, ret string) {
	f.send(fmt.Sprintf(`{"return": %s, "id": %s}`+"\r\n", ret, req.ID))
}

func (f *fakeQEMU) event(name, data string) {
	f.send(fmt.Sprintf(`{"timestamp": {"seconds": 1795970321, "microseconds": 663358}, "event": %q, "data": %s}`+"\r\n", name, data))
}

func TestHandshake(t *testing.T) {
	c, _ := newPair(t)
	g := c.Greeting()
	if g.Version.QEMU.Major != 7 || g.Version.QEMU.Minor != 2 || g.Version.Package != "Debian" {
		t.Errorf("greeting = %+v", g)
	}
}

func TestBadGreeting(t *testing.T) {
	for _, g := range []string{
		`{"return": {}}` + "\n",
		"not json\n",
		"",
	} {
		cc, sc := socketPair(t)
		go func() {
			sc.Write([]byte(g))
			sc.Close()
		}()
		if c, err := NewClient(context.Background(), cc, nil); err == nil {
			c.Close()
			t.Errorf("NewClient accepted greeting %q", g)
		}
	}
}

// A server that never greets must not hang the handshake past ctx.
func TestHandshakeBounded(t *testing.T) {
	cc, sc := socketPair(t)
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := NewClient(ctx, cc, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NewClient = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("handshake took %v", d)
	}
}

// Events arrive anywhere between replies; replies may answer calls in any
// order. Each reply must reach its call, each event every subscriber.
func TestInterleavedEventsAndReplies(t *testing.T) {
	c, f := newPair(t)
	events, unsub := c.Subscribe(16)
	defer unsub()

	firstRead := make(chan struct{})
	go func() {
		a, _ := f.next()
		close(firstRead)
		b, _ := f.next()
		f.event("STOP", `{}`)
		f.reply(b, `{"status": "paused", "running": false}`) // second call answered first
		f.event("MIGRATION", `{"status": "completed"}`)
		f.reply(a, `{"status": "running", "running": true}`)
		f.event("SHUTDOWN", `{"guest": false, "reason": "host-qmp-quit"}`)
	}()

	type st struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	var wg sync.WaitGroup
	results := make([]st, 2)
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = c.Execute(context.Background(), "query-status", nil, &results[0])
	}()
	<-firstRead // the first call is written first
	errs[1] = c.Execute(context.Background(), "query-status", nil, &results[1])
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if results[0].Status != "running" || results[1].Status != "paused" {
		t.Errorf("results = %+v, want running then paused", results)
	}
	var names []string
	for len(names) < 3 {
		select {
		case ev := <-events:
			names = append(names, ev.Name)
			if ev.Name == "MIGRATION" && string(ev.Data) != `{"status": "completed"}` {
				t.Errorf("MIGRATION data = %s", ev.Data)
			}
			if ev.Time.Unix() != 1795970321 {
				t.Errorf("event time = %v", ev.Time)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("events so far %v, want STOP MIGRATION SHUTDOWN", names)
		}
	}
	if got := strings.Join(names, " "); got != "STOP MIGRATION SHUTDOWN" {
		t.Errorf("events = %s", got)
	}
}

func TestErrorReply(t *testing.T) {
	c, f := newPair(t)
	go func() {
		req, _ := f.next()
		f.send(fmt.Sprintf(`{"error": {"class": "GenericError", "desc": "Failed to get \"write\" lock"}, "id": %s}`+"\n", req.ID))
	}()
	err := c.Execute(context.Background(), "cont", nil, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" || !strings.Contains(qe.Desc, "write") {
		t.Fatalf("Execute = %v, want a GenericError", err)
	}
	// The connection survives a command's error.
	go func() {
		req, _ := f.next()
		f.reply(req, `{}`)
	}()
	if err := c.Execute(context.Background(), "stop", nil, nil); err != nil {
		t.Errorf("Execute after an error reply: %v", err)
	}
}

// Whatever a compromised VMM sends ends the connection cleanly: calls in
// flight and later fail with ErrClosed, subscriptions close.
func TestHostileInput(t *testing.T) {
	for name, input := range map[string]string{
		"malformed":     "{\"return\": \n",
		"oversized":     `{"return": "` + strings.Repeat("x", maxMessage) + `"}` + "\n",
		"eof mid-line":  `{"return": {}`,
		"eof":           "",
		"not an object": "[1,2,3]\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, f := newPair(t)
			events, _ := c.Subscribe(1)
			go func() {
				f.next()
				f.send(input)
				f.conn.Close()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := c.Execute(ctx, "query-status", nil, nil)
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Execute = %v, want ErrClosed", err)
			}
			select {
			case <-c.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("client not done")
			}
			if _, ok := <-events; ok {
				t.Error("subscription still open")
			}
			if err := c.Execute(ctx, "query-status", nil, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Execute after close = %v, want ErrClosed", err)
			}
			if !errors.Is(c.Err(), ErrClosed) {
				t.Errorf("Err = %v", c.Err())
			}
		})
	}
}

// A call whose ctx ends returns; the late reply is dropped and the client
// goes on.
func TestExecuteContext(t *testing.T) {
	c, f := newPair(t)
	late := make(chan request, 1)
	go func() {
		req, _ := f.next()
		late <- req
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Execute(ctx, "query-migrate", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute = %v, want a deadline error", err)
	}
	f.reply(<-late, `{"status": "active"}`)
	go func() {
		req, _ := f.next()
		f.reply(req, `{"status": "running"}`)
	}()
	var r struct{ Status string }
	if err := c.Execute(context.Background(), "query-status", nil, &r); err != nil || r.Status != "running" {
		t.Errorf("next Execute = %v, %+v; want running", err, r)
	}
}

// A subscriber that does not read must not stall replies.
func TestSlowSubscriber(t *testing.T) {
	c, f := newPair(t)
	events, unsub := c.Subscribe(1)
	defer unsub()
	go func() {
		req, _ := f.next()
		for range 1000 {
			f.event("RTC_CHANGE", `{"offset": 1}`)
		}
		f.reply(req, `{}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Execute(ctx, "stop", nil, nil); err != nil {
		t.Fatalf("Execute behind 1000 unread events: %v", err)
	}
	if ev := <-events; ev.Name != "RTC_CHANGE" {
		t.Errorf("first event = %+v", ev)
	}
	unsub()
	unsub() // idempotent
}

// The file descriptor sent with a command reaches the server and is the
// same open file.
func TestExecuteWithFile(t *testing.T) {
	c, f := newPair(t)
	path := filepath.Join(t.TempDir(), "snap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		oob := make([]byte, syscall.CmsgSpace(4))
		n, oobn, _, _, err := f.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			got <- err
			return
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			got <- fmt.Errorf("control messages %v: %v", msgs, err)
			return
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			got <- fmt.Errorf("rights %v: %v", fds, err)
			return
		}
		rf := os.NewFile(uintptr(fds[0]), "received")
		rf.Write([]byte("via fd"))
		rf.Close()
		var req request
		if err := json.Unmarshal(buf[:n], &req); err != nil || req.Execute != "getfd" || string(req.Arguments) != `{"fdname":"snap"}` {
			got <- fmt.Errorf("request %q: %v", buf[:n], err)
			return
		}
		f.reply(req, `{}`)
		got <- nil
	}()
	if err := c.ExecuteWithFile(context.Background(), "getfd", map[string]string{"fdname": "snap"}, file, nil); err != nil {
		t.Fatalf("ExecuteWithFile: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "via fd" {
		t.Errorf("file holds %q, want what the server wrote through the fd", b)
	}
}
