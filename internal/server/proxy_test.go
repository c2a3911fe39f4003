package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"warren/api"
	"warren/internal/ident"
	"warren/internal/wait"
)

// The exposed-port proxy against real local backends behind the fake's
// DialPort.

// seen is what an echo backend saw of a request; it answers it as JSON.
type seen struct {
	Method, Path, Query, Host string
	Header                    http.Header
	Body                      string
}

// echoBackend answers every request with what it saw, after a header of
// its own and a status the path may ask for ("/status/201").
func echoBackend() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", "yes")
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		fmt.Sscanf(r.URL.Path, "/status/%d", &status)
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Host, r.Header, string(body)})
	})
}

// newPortEnv is a test server whose tenant a has a running sandbox, with a
// real-looking id, whose port 8080 is backend (none if nil).
func newPortEnv(t *testing.T, opts Options, backend http.Handler) (*testEnv, string) {
	t.Helper()
	e := newTestEnv(t, deadAgent(t), opts)
	id := ident.New("sb-")
	e.fake.addBox("a", id)
	if backend != nil {
		hs := httptest.NewServer(backend)
		t.Cleanup(hs.Close)
		e.fake.exposePort(id, 8080, hs.Listener.Addr().String())
	}
	return e, id
}

// send sends req with the key of tenant a (unless it has credentials).
func (e *testEnv) send(req *http.Request) *http.Response {
	e.t.Helper()
	if req.Header.Get("Authorization") == "" && req.Header.Get("X-API-Key") == "" {
		req.Header.Set("Authorization", "Bearer "+e.keyA)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp
}

// readSeen decodes an echo backend's answer.
func readSeen(t *testing.T, resp *http.Response) seen {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var s seen
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("status %d, answer %q is not the backend's: %v", resp.StatusCode, data, err)
	}
	return s
}

func TestPortProxyForwardsTheRequest(t *testing.T) {
	e, id := newPortEnv(t, Options{}, echoBackend())
	base := e.url + "/v1/sandboxes/" + id + "/ports/8080"
	req, _ := http.NewRequest("POST", base+"/status/201/a%2Fb/c?x=1&warren_token=t0k&y=%20", strings.NewReader("payload"))
	req.Header.Set("X-API-Key", e.keyA)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	req.Header.Set(tokenHeader, "t0k")
	req.Header.Add("Cookie", "a=1; warren_token=t0k")
	req.Header.Add("Cookie", "b=2")
	req.Header.Set("X-Custom", "kept")
	resp := e.send(req)
	if resp.StatusCode != 201 || resp.Header.Get("X-Backend") != "yes" || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("status %d, headers %v: want the backend's 201 and header, and warren's request id", resp.StatusCode, resp.Header)
	}
	got := readSeen(t, resp)
	host := strings.TrimPrefix(e.url, "http://")
	for _, c := range []struct{ what, got, want string }{
		{"method", got.Method, "POST"},
		{"path", got.Path, "/status/201/a%2Fb/c"},
		{"query", got.Query, "x=1&y=%20"},
		{"Host", got.Host, host},
		{"body", got.Body, "payload"},
		{"X-Custom", got.Header.Get("X-Custom"), "kept"},
		{"Cookie", strings.Join(got.Header.Values("Cookie"), "|"), "a=1; b=2"},
		{"X-Forwarded-Host", got.Header.Get("X-Forwarded-Host"), host},
		{"X-Forwarded-Proto", got.Header.Get("X-Forwarded-Proto"), "http"},
		{"X-Forwarded-For", got.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"X-Forwarded-Prefix", got.Header.Get("X-Forwarded-Prefix"), "/v1/sandboxes/" + id + "/ports/8080"},
	} {
		if c.got != c.want {
			t.Errorf("%s: the sandbox saw %q, want %q", c.what, c.got, c.want)
		}
	}
	for _, h := range []string{"Authorization", "X-Api-Key", tokenHeader} {
		if v := got.Header.Values(h); len(v) > 0 {
			t.Errorf("the sandbox saw the caller's %s: %q", h, v)
		}
	}

	// Every method, and the root of the port.
	for _, m := range []string{"GET", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"} {
		req, _ := http.NewRequest(m, base+"/", nil)
		if got := readSeen(t, e.send(req)); got.Method != m || got.Path != "/" {
			t.Errorf("%s /: the sandbox saw %s %s", m, got.Method, got.Path)
		}
	}
	req, _ = http.NewRequest("HEAD", base+"/x", nil)
	resp = e.send(req)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "yes" {
		t.Errorf("HEAD: status %d, headers %v", resp.StatusCode, resp.Header)
	}
	// Without the slash after the port: redirected to it, method kept.
	req, _ = http.NewRequest("POST", base, nil)
	resp = e.send(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/v1/sandboxes/"+id+"/ports/8080/" {
		t.Errorf("no slash: status %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestPortProxyErrors(t *testing.T) {
	e, id := newPortEnv(t, Options{}, echoBackend())
	// A port nothing listens on: a listener closed again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.fake.exposePort(id, 9999, ln.Addr().String())
	ln.Close()
	// A port that answers something that is not HTTP.
	junk, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { junk.Close() })
	go func() {
		for {
			c, err := junk.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n")
			c.Close()
		}
	}()
	e.fake.exposePort(id, 2222, junk.Addr().String())
	stopped := ident.New("sb-")
	e.fake.addBox("a", stopped)
	e.fake.setState(stopped, api.StateStopped)

	box := "/v1/sandboxes/" + id
	for _, tc := range []struct {
		name, key, path string
		status          int
		code, msg       string
	}{
		{"port 0", e.keyA, box + "/ports/0/", 400, api.CodeBadRequest, "bad port"},
		{"port 65536", e.keyA, box + "/ports/65536/", 400, api.CodeBadRequest, "bad port"},
		{"leading zero", e.keyA, box + "/ports/08080/", 400, api.CodeBadRequest, "bad port"},
		{"negative", e.keyA, box + "/ports/-1/", 400, api.CodeBadRequest, "bad port"},
		{"not a number", e.keyA, box + "/ports/http/", 400, api.CodeBadRequest, "bad port"},
		{"another tenant's", e.keyB, box + "/ports/8080/", 404, api.CodeNotFound, id},
		{"unknown sandbox", e.keyA, "/v1/sandboxes/" + ident.New("sb-") + "/ports/8080/", 404, api.CodeNotFound, "not found"},
		{"not running", e.keyA, "/v1/sandboxes/" + stopped + "/ports/8080/", 409, api.CodeConflict, "not running"},
		{"no network", e.keyA, box + "/ports/7000/", 409, api.CodeConflict, "no network"},
		{"connection refused", e.keyA, box + "/ports/9999/", 502, api.CodeBadGateway, "nothing listens on port 9999 of sandbox " + id},
		{"not HTTP", e.keyA, box + "/ports/2222/", 502, api.CodeBadGateway, "did not answer with HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := apiError(t, e.do("GET", tc.path, tc.key, nil), tc.status, tc.code)
			if !strings.Contains(got.Message, tc.msg) {
				t.Errorf("message %q, want it to contain %q", got.Message, tc.msg)
			}
		})
	}
	if !strings.Contains(e.logs.String(), "status=502") {
		t.Error("the access log lacks the 502s")
	}
}

// Server-sent events arrive as they are written: the first before the
// backend writes the second.
func TestPortProxyStreamsAnswers(t *testing.T) {
	release := make(chan struct{})
	e, id := newPortEnv(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two\n\n")
	}))
	req, _ := http.NewRequest("GET", e.url+"/v1/sandboxes/"+id+"/ports/8080/events", nil)
	resp := e.send(req)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
}

// A request body reaches the sandbox while the caller is still sending it.
func TestPortProxyStreamsRequestBodies(t *testing.T) {
	firstArrived := make(chan struct{})
	total := make(chan int64, 1)
	e, id := newPortEnv(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("backend: first 64 KiB: %v", err)
			return
		}
		close(firstArrived)
		n, _ := io.Copy(io.Discard, r.Body)
		total <- n + int64(len(buf))
		w.WriteHeader(http.StatusNoContent)
	}))
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 64<<10))
		select {
		case <-firstArrived:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(fmt.Errorf("the first 64 KiB did not reach the sandbox before the rest was sent"))
			return
		}
		pw.Write(make([]byte, 1<<20))
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", e.url+"/v1/sandboxes/"+id+"/ports/8080/upload", pr)
	resp := e.send(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := <-total; n != 64<<10+1<<20 {
		t.Errorf("the sandbox got %d bytes", n)
	}
}

// pattern is an endless reader of a fixed pattern that allocates nothing.
type pattern struct{ off int }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(p.off*7 + p.off>>9)
		p.off++
	}
	return len(b), nil
}

// 100 MiB each way go through without the server holding them: the
// memory allocated meanwhile, by client, proxy and backend together, stays
// far below the size.
func TestPortProxyLargeBodiesAreNotBuffered(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MiB")
	}
	const size = 100 << 20
	want := sha256.New()
	io.CopyN(want, &pattern{}, size)
	var gotSum []byte
	var mu sync.Mutex
	e, id := newPortEnv(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
			io.CopyN(w, &pattern{}, size)
			return
		}
		h := sha256.New()
		io.Copy(h, r.Body)
		mu.Lock()
		gotSum = h.Sum(nil)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	url := e.url + "/v1/sandboxes/" + id + "/ports/8080/big"

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequest("PUT", url, io.LimitReader(&pattern{}, size))
	req.ContentLength = size
	resp := e.send(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: status %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", url, nil)
	resp = e.send(req)
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Errorf("download: %d bytes, %v; or they differ", n, err)
	}
	mu.Lock()
	if !bytes.Equal(gotSum, want.Sum(nil)) {
		t.Error("the sandbox got other bytes than were sent")
	}
	mu.Unlock()
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB to move %d MiB each way", allocated>>10, size>>20)
	if allocated > 32<<20 {
		t.Errorf("allocated %d MiB to move %d MiB each way: something buffers", allocated>>20, size>>20)
	}
}

// A WebSocket through the proxy: the handshake with the API key, messages
// both ways, and the key never reaches the sandbox.
func TestPortProxyWebSocket(t *testing.T) {
	headers := make(chan http.Header, 1)
	e, id := newPortEnv(t, Options{}, websocket.Handler(func(ws *websocket.Conn) {
		headers <- ws.Request().Header
		for {
			var msg string
			if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
				return
			}
		}
	}))
	host := strings.TrimPrefix(e.url, "http://")
	cfg, err := websocket.NewConfig("ws://"+host+"/v1/sandboxes/"+id+"/ports/8080/echo", "http://"+host+"/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header = http.Header{"Authorization": {"Bearer " + e.keyA}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	defer ws.Close()
	big := strings.Repeat("x", 1<<20)
	for _, msg := range []string{"hello", big, "bye"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	if h := <-headers; h.Get("Authorization") != "" {
		t.Errorf("the sandbox saw Authorization %q", h.Get("Authorization"))
	}

	// Without a key there is no upgrade.
	cfg.Header = nil
	if ws, err := websocket.DialConfig(cfg); err == nil {
		ws.Close()
		t.Error("a WebSocket without the API key was let through")
	}
}

// upgradeBackend is a raw server of a made-up protocol, "shout": it takes
// one HTTP request, switches protocols, upper-cases what it reads until its
// EOF, then writes "BYE" and closes: a half close must come through.
func upgradeBackend(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Header.Get("Upgrade") != "shout" {
					io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
					return
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: shout\r\nConnection: Upgrade\r\n\r\n")
				buf := make([]byte, 4096)
				for {
					n, err := br.Read(buf)
					c.Write(bytes.ToUpper(buf[:n]))
					if err != nil {
						break
					}
				}
				io.WriteString(c, "BYE")
			}()
		}
	}()
	return ln.Addr().String()
}

func TestPortProxyAnyUpgradeWithHalfClose(t *testing.T) {
	e, id := newPortEnv(t, Options{}, nil)
	e.fake.exposePort(id, 8080, upgradeBackend(t))
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Bytes right behind the request, in the same write: the proxy must
	// not lose what the server read ahead.
	fmt.Fprintf(c, "GET /v1/sandboxes/%s/ports/8080/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Connection: Upgrade\r\nUpgrade: shout\r\n\r\nearly ", id, e.keyA)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "shout" {
		t.Fatalf("answer %v, %v; want 101 to shout", resp, err)
	}
	readN := func(n int) string {
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		return string(b)
	}
	if got := readN(6); got != "EARLY " {
		t.Fatalf("echo of the early bytes %q", got)
	}
	io.WriteString(c, "later")
	if got := readN(5); got != "LATER" {
		t.Fatalf("echo %q", got)
	}
	// Half close: the backend sees EOF, and its last words still come back.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "BYE" {
		t.Errorf("after the half close: %q, %v; want BYE then EOF", rest, err)
	}
	wait.For(t, 10*time.Second, "the access log line of the upgrade", func() bool { return strings.Contains(e.logs.String(), "status=101") })
}

// A caller that leaves mid-stream ends the backend's request too, and is
// not logged as an error.
func TestPortProxyCallerLeaves(t *testing.T) {
	backendDone := make(chan struct{})
	e, id := newPortEnv(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(backendDone)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/sandboxes/"+id+"/ports/8080/wait", nil)
	resp := e.send(req)
	cancel()
	resp.Body.Close()
	select {
	case <-backendDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox's request outlived the caller")
	}
	wait.For(t, 10*time.Second, "the access log line", func() bool { return strings.Contains(e.logs.String(), "path=/v1/sandboxes/"+id+"/ports/8080/wait") })
	if strings.Contains(e.logs.String(), "level=ERROR") {
		t.Errorf("a departed caller was logged as an error:\n%s", e.logs)
	}
}

func TestWithoutParamAndCookie(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a=1", "a=1"},
		{"warren_token=x", ""},
		{"a=1&warren_token=x&b=%20&warren_token=y", "a=1&b=%20"},
		{"warren%5Ftoken=x&a", "a"},
		{"warren_tokens=x&warren_token", "warren_tokens=x"},
		{"a=%zz&warren_token=1", "a=%zz"},
	} {
		if got := withoutParam(tc.in, tokenParam); got != tc.want {
			t.Errorf("withoutParam(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	h := http.Header{"Cookie": {"a=1; warren_token=x;b=2", "warren_token=y"}}
	withoutCookie(h, tokenCookie)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=2" {
		t.Errorf("cookies left: %q", got)
	}
	h = http.Header{"Cookie": {"warren_token=y"}}
	if withoutCookie(h, tokenCookie); len(h.Values("Cookie")) != 0 {
		t.Errorf("cookies left: %q", h.Values("Cookie"))
	}
}

// What the caller sees of each way a dial fails; the detail of an
// unexpected one stays in the log.
func TestDialError(t *testing.T) {
	logs := &syncBuffer{}
	s := &Server{log: slog.New(slog.NewTextHandler(logs, nil))}
	r := httptest.NewRequest("GET", "/", nil)
	tgt := portTarget{id: "sb-x", port: 8080}
	for _, tc := range []struct {
		err       error
		code, msg string
	}{
		{api.Errorf(api.CodeConflict, "sandbox sb-x is paused"), api.CodeConflict, "paused"},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}),
			api.CodeBadGateway, "connection refused"},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), api.CodeBadGateway, "within 10s"},
		{fmt.Errorf("dial: %w", syscall.ETIMEDOUT), api.CodeBadGateway, "within 10s"},
		{errors.New("dial tcp 10.201.0.6:8080: no route to host"), api.CodeBadGateway, "is unreachable"},
	} {
		var ae *api.Error
		if err := s.dialError(r, tgt, tc.err); !errors.As(err, &ae) || ae.Code != tc.code || !strings.Contains(ae.Message, tc.msg) {
			t.Errorf("dialError(%v) = %v, want %s containing %q", tc.err, err, tc.code, tc.msg)
		} else if strings.Contains(ae.Message, "10.201") {
			t.Errorf("dialError(%v) shows the node's address: %q", tc.err, ae.Message)
		}
	}
	if !strings.Contains(logs.String(), "no route to host") {
		t.Errorf("the unexpected error is not in the log:\n%s", logs)
	}
}

// TestPortThatNeverAnswers is the regression test of issue 13, item 12: a
// port that takes the request and never answers was waited for forever.
// Now it is a 502 after Timeouts.PortAnswer, and such requests hold one
// of the sandbox's streams each (429 beyond them).
func TestPortThatNeverAnswers(t *testing.T) {
	hang := make(chan struct{})
	arrived := make(chan struct{}, 16)
	defer close(hang) // before the backends' cleanups, which wait for their handlers
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-hang
	})
	e, id := newPortEnv(t, Options{Timeouts: Timeouts{PortAnswer: 300 * time.Millisecond}}, backend)
	start := time.Now()
	apiError(t, e.do("GET", "/v1/sandboxes/"+id+"/ports/8080/", e.keyA, nil), http.StatusBadGateway, api.CodeBadGateway)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("502 after %v, want about 300ms", took)
	}
	<-arrived
	// Two hung requests hold the sandbox's two streams; a third is refused.
	e2, id2 := newPortEnv(t, Options{Limits: Limits{StreamsPerSandbox: 2}}, backend)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", e2.url+"/v1/sandboxes/"+id2+"/ports/8080/", nil)
			req.Header.Set("Authorization", "Bearer "+e2.keyA)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	<-arrived
	<-arrived
	apiError(t, e2.do("GET", "/v1/sandboxes/"+id2+"/ports/8080/", e2.keyA, nil), http.StatusTooManyRequests, api.CodeTooMany)
}
