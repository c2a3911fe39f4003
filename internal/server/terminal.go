package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
)

// Terminals over a WebSocket: GET /v1/sandboxes/{id}/terminal runs a
// command on a pty in the sandbox, through the agent's process service as
// a pty exec does, and carries the terminal over an RFC 6455 WebSocket for
// a browser (docs/API.md, "Terminals (PTY)"):
//
//   - server to client, binary messages are the pty's output as it comes;
//     when the process ends, a text message {"exit": CODE} and a close
//     with status 1000;
//   - client to server, binary messages are typed into the pty, text
//     messages are {"resize": {"cols": N, "rows": N}}; anything else
//     closes with 1003;
//   - the client closing (or vanishing: pings go unanswered) hangs up the
//     process's group: SIGHUP, then SIGKILL after hangupGrace.
//
// A browser cannot set headers on a WebSocket, so the key may also come as
// the subprotocol "warren.key.KEY" next to "warren.terminal" (the answer
// names only "warren.terminal"). Any Origin is accepted: no cookie or
// ambient credential authenticates this route, so a cross-site page can
// open a terminal only with a key it already holds.
//
// Every error before the upgrade is the usual JSON error. The output side
// holds one message at a time: a browser that does not read stops the
// reading of the agent's stream (whose own bounds then apply), and one that
// takes no ping within Timeouts.WriteIdle is cut.

const (
	terminalProtocol  = "warren.terminal"
	terminalKeyPrefix = "warren.key."
	// terminalReadLimit bounds a client's message.
	terminalReadLimit = 64 << 10
	// terminalPing is how often a quiet client is pinged.
	terminalPing = 30 * time.Second
	// hangupGrace is how long a hung-up process has before SIGKILL.
	hangupGrace = 2 * time.Second
	// terminalShell runs bash as a login shell where there is one, sh
	// otherwise.
	terminalShell = "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l"
)

// authenticateSocket is Authenticate for the terminal route: a key in a
// header, else one offered as a subprotocol.
func (s *Server) authenticateSocket(r *http.Request) (Key, error) {
	if r.Header.Get("Authorization") == "" && r.Header.Get("X-API-Key") == "" {
		for _, p := range subprotocols(r) {
			if key, ok := strings.CutPrefix(p, terminalKeyPrefix); ok && key != "" {
				return s.lookupKey(r.Context(), key)
			}
		}
	}
	return s.Authenticate(r)
}

// subprotocols lists the WebSocket subprotocols a request offers.
func subprotocols(r *http.Request) []string {
	var ps []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// terminal answers GET /v1/sandboxes/{id}/terminal.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	start, err := terminalStart(r)
	if err != nil {
		return err
	}
	if err := checkHandshake(r); err != nil {
		return err
	}
	release, err := s.holdStream(id)
	if err != nil {
		return err
	}
	defer release()
	// The request's context lasts until the handler returns, hijacked or
	// not; cancelling ctx ends the agent's event stream.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, pid, stop, err := startProcess(ctx, id, conn, start)
	if err != nil {
		return err
	}
	defer stop()
	if pid == 0 {
		return s.notStarted(ctx, id, caller(r).Tenant, stream, start)
	}
	// The handshake was checked above, so Accept writes no error of its
	// own; it hijacks the connection through responseWriter.Hijack, which
	// clears the server's deadlines: pings time a quiet terminal instead.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{terminalProtocol}, InsecureSkipVerify: true,
	})
	if err != nil {
		s.kill(ctx, id, conn, pid)
		return fmt.Errorf("accept terminal: %w", err)
	}
	ws.SetReadLimit(terminalReadLimit)
	t := &terminalSession{s: s, id: id, pid: pid, conn: conn, ws: ws,
		log: s.log.With("request_id", requestID(ctx), "sandbox", id, "pid", pid)}
	t.run(ctx, cancel, stream)
	return nil
}

// terminalStart reads the terminal's query: cols and rows (required),
// cmd (a shell command line), user and cwd.
func terminalStart(r *http.Request) (*processpb.StartRequest, error) {
	q := r.URL.Query()
	var size api.PTYSize
	for _, f := range []struct {
		name string
		v    *uint32
	}{{"cols", &size.Cols}, {"rows", &size.Rows}} {
		n, err := strconv.ParseUint(q.Get(f.name), 10, 32)
		if err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "%s=%q: want the terminal's size, 1 to %d", f.name, q.Get(f.name), api.MaxPTYSize)
		}
		*f.v = uint32(n)
	}
	cmd := q.Get("cmd")
	if strings.IndexByte(cmd, 0) >= 0 {
		return nil, api.Errorf(api.CodeBadRequest, "cmd contains a NUL byte")
	}
	if cmd == "" {
		cmd = terminalShell
	}
	return startRequest(api.ExecRequest{Shell: cmd, User: q.Get("user"), Cwd: q.Get("cwd"), Stream: true, PTY: &size})
}

// checkHandshake refuses, in JSON, a request that is no WebSocket
// handshake for this route: websocket.Accept would answer in plain text.
func checkHandshake(r *http.Request) error {
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeBadRequest, "this route is a WebSocket (subprotocol %s): "+format, append([]any{terminalProtocol}, args...)...)
	}
	switch {
	case r.ProtoMajor != 1 || r.ProtoMinor < 1:
		return bad("it needs HTTP/1.1, not %s", r.Proto)
	case !hasToken(r.Header, "Connection", "upgrade") || !hasToken(r.Header, "Upgrade", "websocket"):
		return bad("want Connection: Upgrade and Upgrade: websocket")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return bad("want Sec-WebSocket-Version 13")
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return bad("want one Sec-WebSocket-Key")
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return bad("Sec-WebSocket-Key is not 16 bytes in base64")
	}
	for _, p := range subprotocols(r) {
		if p == terminalProtocol {
			return nil
		}
	}
	return bad("offer it in Sec-WebSocket-Protocol")
}

// hasToken says whether header name lists token, in any case.
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// terminalSession carries one terminal between its WebSocket and its
// process. run owns it and the goroutines it starts.
type terminalSession struct {
	s    *Server
	id   string
	pid  uint32
	conn *agentconn.Conn
	ws   *websocket.Conn
	log  *slog.Logger
}

// ended is how the process's event stream ended: the exit code, or err
// when the stream broke first.
type ended struct {
	code int
	err  error
}

// run carries the terminal until the process ends or the client leaves,
// and returns once every goroutine it started has.
func (t *terminalSession) run(ctx context.Context, cancel context.CancelFunc, stream *startStream) {
	left := make(chan error, 1)
	done := make(chan ended, 1)
	var wg sync.WaitGroup
	wg.Go(func() { left <- t.readInput(ctx) })
	wg.Go(func() { t.keepAlive(ctx) })
	wg.Go(func() { done <- t.pumpOutput(ctx, stream) })
	select {
	case end := <-done:
		if end.err != nil {
			t.log.Debug("terminal stream broke", "err", end.err)
			t.ws.Close(websocket.StatusInternalError, "the sandbox's agent stopped the terminal")
			t.s.kill(ctx, t.id, t.conn, t.pid)
			break
		}
		msg, _ := json.Marshal(struct {
			Exit int `json:"exit"`
		}{end.code})
		if err := t.ws.Write(ctx, websocket.MessageText, msg); err == nil {
			t.ws.Close(websocket.StatusNormalClosure, "")
		}
	case err := <-left:
		t.log.Debug("terminal client left", "err", err)
		t.ws.CloseNow()
		t.hangup(ctx, done)
	}
	t.ws.CloseNow()
	cancel()
	wg.Wait()
}

// hangup ends the process of a terminal whose client left: SIGHUP to its
// group, and SIGKILL when it has not ended within hangupGrace.
func (t *terminalSession) hangup(ctx context.Context, done <-chan ended) {
	t.signal(ctx, processpb.Signal_SIGNAL_SIGHUP)
	timer := time.NewTimer(hangupGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.signal(ctx, processpb.Signal_SIGNAL_SIGKILL)
	}
}

// signal sends sig to the process's group, on a bounded context of its own.
func (t *terminalSession) signal(ctx context.Context, sig processpb.Signal) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	_, err := t.conn.Process.SendSignal(sctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSelector(t.pid), Signal: sig}))
	if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition && connect.CodeOf(err) != connect.CodeNotFound {
		t.s.log.Warn("signal a terminal's process", "request_id", requestID(ctx), "sandbox", t.id, "pid", t.pid, "signal", sig, "err", err)
	}
}

// pumpOutput sends the pty's output to the client, one message at a time,
// until the process's end event. Once a write fails (the client left) it
// reads on without writing, so that the end is still seen.
func (t *terminalSession) pumpOutput(ctx context.Context, stream *startStream) ended {
	writing := true
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if out := ev.GetData().GetPty(); len(out) > 0 && writing {
			writing = t.ws.Write(ctx, websocket.MessageBinary, out) == nil
		}
		if end := ev.GetEnd(); end != nil {
			finish(stream)
			return ended{code: int(end.GetExitCode())}
		}
	}
	return ended{err: streamEnd(t.id, stream.Err())}
}

// readInput types the client's binary messages into the pty and applies
// its resizes, until the client leaves or breaks the protocol (closed with
// 1003). A failed input or resize is only logged: the process has ended
// or its agent is gone, which pumpOutput reports.
func (t *terminalSession) readInput(ctx context.Context) error {
	for {
		typ, data, err := t.ws.Read(ctx)
		if err != nil {
			return err
		}
		sel := pidSelector(t.pid)
		if typ == websocket.MessageBinary {
			_, err = t.conn.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
				Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: data}},
			}))
		} else {
			size, cerr := parseControl(data)
			if cerr != nil {
				t.ws.Close(websocket.StatusUnsupportedData, cerr.Error())
				return cerr
			}
			_, err = t.conn.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
				Process: sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
			}))
		}
		if err != nil {
			t.log.Debug("terminal input", "err", err)
		}
	}
}

// errControl is the close reason of a text message that is no control
// message.
var errControl = errors.New(`want binary input or {"resize":{"cols":N,"rows":N}}`)

// parseControl reads a text message: {"resize": {"cols": N, "rows": N}}.
func parseControl(data []byte) (api.PTYSize, error) {
	var msg struct {
		Resize *api.PTYSize `json:"resize"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil || msg.Resize == nil {
		return api.PTYSize{}, errControl
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.PTYSize{}, errControl
	}
	// Its message, the close reason, is short: "pty size 0x0: ...".
	return *msg.Resize, checkPTYSize(*msg.Resize)
}

// keepAlive pings the client every terminalPing and cuts a client that
// does not answer within Timeouts.WriteIdle (a dead browser, or one that
// does not read: the ping waits behind the output).
func (t *terminalSession) keepAlive(ctx context.Context) {
	tick := time.NewTicker(terminalPing)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, t.s.opts.Timeouts.WriteIdle)
		err := t.ws.Ping(pctx)
		cancel()
		if err != nil {
			t.log.Debug("terminal client took no ping", "err", err)
			t.ws.CloseNow()
			return
		}
	}
}
