package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/metrics"
)

// maxExecTimeout bounds ExecRequest.TimeoutMs and the wait route's
// timeout_ms.
const maxExecTimeout = 24 * time.Hour

// killTimeout bounds the SIGKILL sent to a process whose caller left.
const killTimeout = 5 * time.Second

// exec answers POST /v1/sandboxes/{id}/exec: a foreground exec answers its
// result or streams its events; a background one answers once the process
// has started.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.ExecRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	start, err := startRequest(req)
	if err != nil {
		return err
	}
	switch req.OutputEncoding {
	case "", api.EncodingUTF8, api.EncodingBase64:
	default:
		return api.Errorf(api.CodeBadRequest, "output_encoding %q: want %q or %q", req.OutputEncoding, api.EncodingUTF8, api.EncodingBase64)
	}
	tenant := caller(r).Tenant
	conn, err := s.sb.Agent(r.Context(), tenant, id)
	if err != nil {
		return err
	}
	release, err := s.holdStream(id)
	if err != nil {
		return err
	}
	defer release()
	switch {
	case req.Background:
		return s.execBackground(w, r, id, conn, start)
	case req.Stream:
		return s.execStream(w, r, id, conn, start)
	}
	t0 := time.Now()
	err = s.execCollect(w, r, id, conn, start, tenant, req.OutputEncoding)
	if err == nil {
		s.opts.Metrics.Observe(metrics.OpExec, time.Since(t0))
	}
	return err
}

// holdStream takes one of sandbox id's concurrent streams.
func (s *Server) holdStream(id string) (release func(), err error) {
	return s.streams.acquire(id, s.opts.Limits.StreamsPerSandbox, "execs and process streams on sandbox "+id)
}

// startRequest checks an ExecRequest and translates it for the agent.
func startRequest(req api.ExecRequest) (*processpb.StartRequest, error) {
	bad := func(format string, args ...any) (*processpb.StartRequest, error) {
		return nil, api.Errorf(api.CodeBadRequest, format, args...)
	}
	cfg := &processpb.ProcessConfig{User: req.User}
	switch {
	case len(req.Cmd) > 0 && req.Shell != "":
		return bad("set one of cmd and shell, not both")
	case len(req.Cmd) > 0:
		if req.Cmd[0] == "" {
			return bad("cmd[0] is empty")
		}
		for i, a := range req.Cmd {
			if strings.IndexByte(a, 0) >= 0 {
				return bad("cmd[%d] contains a NUL byte", i)
			}
		}
		cfg.Cmd, cfg.Args = req.Cmd[0], req.Cmd[1:]
	case req.Shell != "":
		if strings.IndexByte(req.Shell, 0) >= 0 {
			return bad("shell contains a NUL byte")
		}
		cfg.Cmd, cfg.Args = "/bin/sh", []string{"-c", req.Shell}
	default:
		return bad("set cmd or shell")
	}
	if req.Background && req.Stream {
		return bad("set one of background and stream, not both")
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > maxExecTimeout.Milliseconds() {
		return bad("timeout_ms must be between 0 (none) and %d", maxExecTimeout.Milliseconds())
	}
	cfg.TimeoutMs = uint64(req.TimeoutMs)
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("bad env name %q: want a non-empty name without '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env %s: the value contains a NUL byte", k)
		}
	}
	cfg.Envs = req.Env
	if strings.IndexByte(req.User, 0) >= 0 {
		return bad("user contains a NUL byte")
	}
	if req.Cwd != "" {
		if strings.IndexByte(req.Cwd, 0) >= 0 {
			return bad("cwd contains a NUL byte")
		}
		cfg.Cwd = proto.String(req.Cwd)
	}
	start := &processpb.StartRequest{Process: cfg, StdinData: req.Stdin}
	if req.Tag != "" {
		start.Tag = proto.String(req.Tag)
	}
	if req.Background {
		// A background process's stdin stays open for the stdin route.
		start.Stdin = proto.Bool(true)
	}
	if req.PTY != nil {
		// A collected answer has nothing to type into the terminal with:
		// such a process could only end by its timeout.
		if !req.Background && !req.Stream {
			return bad("a pty exec must stream or run in the background")
		}
		if err := checkPTYSize(*req.PTY); err != nil {
			return nil, err
		}
		start.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: req.PTY.Cols, Rows: req.PTY.Rows}}
		// A terminal's input stays open: the stdin route types into it.
		start.Stdin = proto.Bool(true)
	}
	return start, nil
}

// startStream is the agent's stream of a started process's events.
type startStream = connect.ServerStreamForClient[processpb.StartResponse]

// startTimeout bounds how long the agent may take to report a started
// process.
const startTimeout = 30 * time.Second

// errStartTimeout cancels a start the agent did not report in time.
var errStartTimeout = errors.New("start timed out")

// startProcess asks the agent to start a process and reads the start event.
// A pid of 0 means the command could not be executed; the events that
// follow say why. The caller must call release when done with the stream.
//
// Until the start event is read, the stream does not end with ctx: a caller
// that leaves at that moment must not lose the pid, or its process could
// not be killed. From then on, ctx ending ends the stream.
func startProcess(ctx context.Context, id string, conn *agentconn.Conn, start *processpb.StartRequest) (stream *startStream, pid uint32, release func(), err error) {
	sctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	cancel := func() { cancelCause(nil) }
	timer := time.AfterFunc(startTimeout, func() { cancelCause(errStartTimeout) })
	fail := func(err error) (*startStream, uint32, func(), error) {
		timer.Stop()
		cancel()
		if context.Cause(sctx) == errStartTimeout {
			return nil, 0, nil, api.Errorf(api.CodeTimeout, "the agent of sandbox %s did not start the process within %v", id, startTimeout)
		}
		return nil, 0, nil, agentError(ctx, id, err)
	}
	stream, err = conn.Process.Start(sctx, connect.NewRequest(start))
	if err != nil {
		return fail(err)
	}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if st := ev.GetStart(); st != nil {
			timer.Stop()
			stop := context.AfterFunc(ctx, cancel)
			return stream, st.GetPid(), func() {
				stop()
				cancel()
				stream.Close()
			}, nil
		}
		if ev.GetKeepalive() == nil {
			stream.Close()
			return fail(fmt.Errorf("agent of %s sent %T before the start event", id, ev.GetEvent()))
		}
	}
	err = stream.Err()
	stream.Close()
	if err == nil {
		err = fmt.Errorf("agent of %s ended the stream before the start event", id)
	}
	return fail(err)
}

// execBackground starts the process and answers 202 with its pid; the
// process does not depend on the request.
func (s *Server) execBackground(w http.ResponseWriter, r *http.Request, id string, conn *agentconn.Conn, start *processpb.StartRequest) error {
	ctx := r.Context()
	stream, pid, release, err := startProcess(ctx, id, conn, start)
	if err != nil {
		return err
	}
	defer release()
	if pid == 0 {
		return s.notStarted(ctx, id, caller(r).Tenant, stream, start)
	}
	return writeJSON(w, http.StatusAccepted, api.StartedProcess{PID: pid, Tag: start.GetTag()})
}

// notStarted reads the events of a process the agent could not execute
// (pid 0) and answers why, as a 400.
func (s *Server) notStarted(ctx context.Context, id, tenant string, stream *startStream, start *processpb.StartRequest) error {
	res, stdout, stderr, err := s.collect(ctx, id, tenant, stream, 0)
	s.output.give(tenant, int64(len(stdout)+len(stderr)))
	if err != nil {
		return err
	}
	return api.Errorf(api.CodeBadRequest, "cannot start %s: %s (exit code %d)",
		start.GetProcess().GetCmd(), strings.TrimSpace(strings.ToValidUTF8(string(stderr), "\uFFFD")), res.ExitCode)
}

// execCollect runs a foreground process and answers its ExecResult. A caller
// that leaves before the end kills the process.
func (s *Server) execCollect(w http.ResponseWriter, r *http.Request, id string, conn *agentconn.Conn, start *processpb.StartRequest, tenant, encoding string) error {
	ctx := r.Context()
	stream, pid, release, err := startProcess(ctx, id, conn, start)
	if err != nil {
		return err
	}
	defer release()
	res, stdout, stderr, err := s.collect(ctx, id, tenant, stream, pid)
	defer s.output.give(tenant, int64(len(stdout)+len(stderr)))
	if err != nil {
		if ctx.Err() != nil {
			s.kill(ctx, id, conn, pid)
		}
		return err
	}
	return writeExecResult(w, res, stdout, stderr, encoding)
}

// collect reads a started process's events to its end, keeping up to
// MaxOutputBytes of each output stream, as far as tenant's output budget
// goes. The result's Stdout and Stderr are left empty: the output is
// returned as it came, and the caller gives its bytes back to the budget
// (s.output.give) once it no longer holds them.
func (s *Server) collect(ctx context.Context, id, tenant string, stream *startStream, pid uint32) (res api.ExecResult, stdout, stderr []byte, err error) {
	res = api.ExecResult{PID: pid}
	out := &capped{max: s.opts.MaxOutputBytes, take: func(n int64) int64 { return s.output.take(tenant, n) }}
	errOut := &capped{max: s.opts.MaxOutputBytes, take: out.take}

	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.write(d.GetStdout())
			errOut.write(d.GetStderr())
			continue
		}
		if end := ev.GetEnd(); end != nil {
			res.ExitCode = int(end.GetExitCode())
			res.Status = end.GetStatus()
			res.TimedOut = end.GetTimedOut()
			res.DurationMs = float64(end.GetDurationUs()) / 1000
			res.Truncated = out.truncated || errOut.truncated
			finish(stream)
			return res, out.buf, errOut.buf, nil
		}
	}
	s.output.give(tenant, int64(len(out.buf)+len(errOut.buf)))
	return api.ExecResult{}, nil, nil, agentError(ctx, id, streamEnd(id, stream.Err()))
}

// finish reads what follows an event stream's end event: the agent's
// end-of-stream frame. A stream read to its end gives its connection back
// to the pool; one closed before would be closed with it, and the next call
// would dial the agent again. An agent that sends more is not waited for.
func finish[T any](stream *connect.ServerStreamForClient[T]) {
	stream.Receive()
}

// streamEnd is the error of an event stream that stopped before the
// process's end event.
func streamEnd(id string, err error) error {
	if err == nil {
		return fmt.Errorf("agent of %s ended the stream before the process ended", id)
	}
	return err
}

// capped keeps the first max bytes written to it, as far as take (when
// set) grants them.
type capped struct {
	max       int64
	take      func(n int64) int64
	buf       []byte
	truncated bool
}

// write keeps what fits of p and notes whether some did not.
func (c *capped) write(p []byte) {
	if len(p) == 0 || c.truncated {
		c.truncated = c.truncated || len(p) > 0
		return
	}
	room := min(c.max-int64(len(c.buf)), int64(len(p)))
	if room > 0 && c.take != nil {
		room = c.take(room)
	}
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		c.truncated = true
	}
	c.buf = append(c.buf, p...)
}

// execStream runs a foreground process and streams its events as ndjson. A
// caller that leaves before the end kills the process.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, id string, conn *agentconn.Conn, start *processpb.StartRequest) error {
	ctx := r.Context()
	stream, pid, release, err := startProcess(ctx, id, conn, start)
	if err != nil {
		return err
	}
	defer release()
	nd := newNDJSON(w)
	err = nd.send(api.ExecEvent{Type: api.EventStart, PID: pid})
	if err == nil {
		err = pipeEvents(r, id, nd, stream)
	}
	// A failed write means the caller left, even before its context says so.
	if err != nil && (ctx.Err() != nil || nd.broken()) {
		s.kill(ctx, id, conn, pid)
	}
	return err
}

// agentEvent is a message of an agent's event stream: a StartResponse or a
// ConnectResponse.
type agentEvent[T any] interface {
	*T
	GetEvent() *processpb.ProcessEvent
}

// pipeEvents sends the events of stream as ndjson ExecEvents until the end
// event. When the stream breaks first it sends an error event and returns
// the error (for the log).
func pipeEvents[T any, PT agentEvent[T]](r *http.Request, id string, nd *ndjson, stream *connect.ServerStreamForClient[T]) error {
	for stream.Receive() {
		out, ok := execEvent(PT(stream.Msg()).GetEvent())
		if !ok {
			continue
		}
		if err := nd.send(out); err != nil {
			return fmt.Errorf("stream to caller: %w", err)
		}
		if out.Type == api.EventEnd {
			finish(stream)
			return nil
		}
	}
	err := agentError(r.Context(), id, streamEnd(id, stream.Err()))
	msg := "internal error"
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status() != http.StatusInternalServerError {
		msg = ae.Message
	}
	nd.send(api.ExecEvent{Type: api.EventError, Error: msg})
	return err
}

// execEvent is the API's form of an agent event; keep-alives have none.
func execEvent(ev *processpb.ProcessEvent) (api.ExecEvent, bool) {
	switch e := ev.GetEvent().(type) {
	case *processpb.ProcessEvent_Start:
		return api.ExecEvent{Type: api.EventStart, PID: e.Start.GetPid()}, true
	case *processpb.ProcessEvent_Data:
		switch o := e.Data.GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Stdout:
			return api.ExecEvent{Type: api.EventStdout, Data: o.Stdout}, true
		case *processpb.ProcessEvent_DataEvent_Stderr:
			return api.ExecEvent{Type: api.EventStderr, Data: o.Stderr}, true
		case *processpb.ProcessEvent_DataEvent_Pty:
			return api.ExecEvent{Type: api.EventPTY, Data: o.Pty}, true
		}
	case *processpb.ProcessEvent_End:
		code := int(e.End.GetExitCode())
		return api.ExecEvent{
			Type: api.EventEnd, ExitCode: &code, Status: e.End.GetStatus(), TimedOut: e.End.GetTimedOut(),
			DurationMs: float64(e.End.GetDurationUs()) / 1000, Error: e.End.GetError(),
		}, true
	}
	return api.ExecEvent{}, false
}

// kill sends SIGKILL to a foreground process whose caller left, so that it
// does not linger. It runs on its own bounded context: the request's has
// ended.
func (s *Server) kill(ctx context.Context, id string, conn *agentconn.Conn, pid uint32) {
	if pid == 0 {
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	_, err := conn.Process.SendSignal(kctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: pidSelector(pid), Signal: processpb.Signal_SIGNAL_SIGKILL,
	}))
	if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
		s.log.Warn("kill process of a departed caller", "request_id", requestID(ctx), "sandbox", id, "pid", pid, "err", err)
		return
	}
	s.log.Debug("killed process of a departed caller", "request_id", requestID(ctx), "sandbox", id, "pid", pid)
}

// pidSelector selects a process by pid.
func pidSelector(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}
