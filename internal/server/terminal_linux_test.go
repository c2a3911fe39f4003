//go:build linux

package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"warren/api"
)

// dialTerminal opens box's terminal with key as a subprotocol.
func dialTerminal(t *testing.T, e *testEnv, box, key, query string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+box+"/terminal?"+query,
		&websocket.DialOptions{Subprotocols: []string{terminalProtocol, terminalKeyPrefix + key}})
	if err != nil {
		t.Fatalf("dial the terminal: %v", err)
	}
	if got := resp.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != terminalProtocol {
		t.Errorf("answered subprotocols %q, want only %q", got, terminalProtocol)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// termReader reads a terminal's messages, keeping the output.
type termReader struct {
	t   *testing.T
	ws  *websocket.Conn
	out strings.Builder
}

// until reads output until it holds want.
func (r *termReader) until(want string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(r.out.String(), want) {
		typ, data, err := r.ws.Read(ctx)
		if err != nil || typ != websocket.MessageBinary {
			r.t.Fatalf("waiting for %q: message %v %q, err %v; output so far %q", want, typ, data, err, r.out.String())
		}
		r.out.Write(data)
	}
}

// send writes a message to the terminal.
func send(t *testing.T, ws *websocket.Conn, typ websocket.MessageType, msg string) {
	t.Helper()
	if err := ws.Write(context.Background(), typ, []byte(msg)); err != nil {
		t.Fatalf("send %q: %v", msg, err)
	}
}

func TestTerminal(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	ws := dialTerminal(t, e, box, e.keyA, "cols=80&rows=24")
	r := &termReader{t: t, ws: ws}
	send(t, ws, websocket.MessageBinary, "stty size; echo hi\n")
	r.until("\nhi\r\n")
	if !strings.Contains(r.out.String(), "24 80\r\n") {
		t.Errorf("output %q: want the size 24 80", r.out.String())
	}
	send(t, ws, websocket.MessageText, `{"resize":{"cols":100,"rows":30}}`)
	send(t, ws, websocket.MessageBinary, "stty size\n")
	r.until("30 100\r\n")
	send(t, ws, websocket.MessageBinary, "exit 3\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("read the end: %v (output %q)", err, r.out.String())
		}
		if typ == websocket.MessageText {
			if string(data) != `{"exit":3}` {
				t.Errorf("end message %q, want {\"exit\":3}", data)
			}
			break
		}
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the end: %v, want a close with status 1000", err)
	}
}

// A text message that is no resize closes the terminal with 1003, one
// beyond the read limit with 1009.
func TestTerminalUnsupportedMessage(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	for _, tc := range []struct {
		typ  websocket.MessageType
		msg  string
		want websocket.StatusCode
	}{
		{websocket.MessageText, `{"resize":{"cols":0,"rows":24}}`, websocket.StatusUnsupportedData},
		{websocket.MessageText, `{"paste":"x"}`, websocket.StatusUnsupportedData},
		{websocket.MessageText, `hello`, websocket.StatusUnsupportedData},
		{websocket.MessageBinary, strings.Repeat("x", terminalReadLimit+1), websocket.StatusMessageTooBig},
	} {
		ws := dialTerminal(t, e, box, e.keyA, "cols=80&rows=24&cmd=cat")
		send(t, ws, tc.typ, tc.msg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		for err == nil {
			_, _, err = ws.Read(ctx)
		}
		cancel()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != tc.want || ce.Reason == "" {
			t.Errorf("after %.40q: %v, want a close with status %d and a reason", tc.msg, err, tc.want)
		}
	}
}

// The connection timeouts do not cut a quiet terminal: the hijacked
// connection has no deadline.
func TestTerminalQuiet(t *testing.T) {
	const short = 200 * time.Millisecond
	e, box := newAgentEnv(t, Options{Timeouts: Timeouts{Idle: short, BodyIdle: short, JSONBody: short, WriteIdle: short}})
	ws := dialTerminal(t, e, box, e.keyA, "cols=80&rows=24&cmd=cat")
	r := &termReader{t: t, ws: ws}
	send(t, ws, websocket.MessageBinary, "one\n")
	r.until("one\r\n")
	// The quiet itself is what is tested: several times every timeout.
	time.Sleep(5 * short)
	send(t, ws, websocket.MessageBinary, "two\n")
	r.until("two\r\n")
}

// Closing the socket hangs up the terminal's process, and the job it runs.
func TestTerminalCloseKillsProcess(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	ws := dialTerminal(t, e, box, e.keyA, "cols=80&rows=24&cmd="+url.QueryEscape("trap '' HUP; echo ready; sleep 1234.5"))
	(&termReader{t: t, ws: ws}).until("ready")
	running := func() (procs []api.Process, sleeping bool) {
		var list api.ProcessList
		e.call("GET", box+"/processes?state=running", e.keyA, nil, http.StatusOK, &list)
		var res api.ExecResult
		e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"pgrep", "-f", "sleep 1234[.]5"}}, http.StatusOK, &res)
		return list.Processes, res.ExitCode == 0
	}
	if procs, sleeping := running(); len(procs) != 1 || !sleeping {
		t.Fatalf("before the close: running %+v, sleep running %v; want the terminal's shell and its sleep", procs, sleeping)
	}
	ws.Close(websocket.StatusGoingAway, "")
	// The shell ignores SIGHUP: only the SIGKILL 2 s later ends it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		procs, sleeping := running()
		if len(procs) == 0 && !sleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the close: running %+v, sleep running %v", procs, sleeping)
		}
	}
}

func TestTerminalRefusals(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	handshake := func(path string, header http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Header = header
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	offer := func(protocols string) http.Header {
		return http.Header{"Sec-Websocket-Protocol": {protocols}}
	}
	path := box + "/terminal?cols=80&rows=24"
	for _, tc := range []struct {
		name   string
		path   string
		header http.Header
		status int
		code   string
	}{
		{"no key", path, offer(terminalProtocol), http.StatusUnauthorized, api.CodeUnauthorized},
		{"wrong key", path, offer(terminalProtocol + ", " + terminalKeyPrefix + "wk_nope"), http.StatusUnauthorized, api.CodeUnauthorized},
		{"key without warren.terminal", path, offer(terminalKeyPrefix + e.keyA), http.StatusBadRequest, api.CodeBadRequest},
		{"header key without warren.terminal", path, http.Header{"Authorization": {"Bearer " + e.keyA}}, http.StatusBadRequest, api.CodeBadRequest},
		{"another tenant's sandbox", path, offer(terminalProtocol + ", " + terminalKeyPrefix + e.keyB), http.StatusNotFound, api.CodeNotFound},
		{"no size", box + "/terminal", offer(terminalProtocol + ", " + terminalKeyPrefix + e.keyA), http.StatusBadRequest, api.CodeBadRequest},
		{"bad cols", box + "/terminal?cols=0&rows=24", offer(terminalProtocol + ", " + terminalKeyPrefix + e.keyA), http.StatusBadRequest, api.CodeBadRequest},
		{"cmd with NUL", path + "&cmd=a%00b", offer(terminalProtocol + ", " + terminalKeyPrefix + e.keyA), http.StatusBadRequest, api.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apiError(t, handshake(tc.path, tc.header), tc.status, tc.code)
		})
	}
	// The key may also come in a header; the subprotocol answered is
	// warren.terminal alone.
	resp := handshake(path, http.Header{"X-Api-Key": {e.keyA}, "Sec-Websocket-Protocol": {terminalProtocol}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Protocol") != terminalProtocol {
		t.Errorf("header key: status %d, subprotocol %q; want 101 and %s", resp.StatusCode, resp.Header.Get("Sec-WebSocket-Protocol"), terminalProtocol)
	}
}
