package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
)

// processTarget resolves the sandbox, pid and agent of a process route.
func (s *Server) processTarget(r *http.Request) (string, uint32, *agentconn.Conn, error) {
	id, err := sandboxID(r)
	if err != nil {
		return "", 0, nil, err
	}
	pid, err := pidParam(r)
	if err != nil {
		return "", 0, nil, err
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return "", 0, nil, err
	}
	return id, pid, conn, nil
}

// listProcesses answers GET /v1/sandboxes/{id}/processes: a page of the
// processes the agent knows (it keeps a bounded number), by pid.
func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	lr, err := parseList(r, "processes", id, api.DefaultListLimit, api.MaxListLimit, processStates)
	if err != nil {
		return err
	}
	var after uint64
	if lr.after != nil {
		if after, err = strconv.ParseUint(lr.after.Key, 10, 32); err != nil {
			return api.Errorf(api.CodeBadRequest, "bad page_token: pass the next_page_token of an answer unchanged")
		}
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	resp, err := conn.Process.List(r.Context(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	var list []api.Process
	for _, p := range resp.Msg.GetProcesses() {
		state := api.ProcessExited
		if p.GetRunning() {
			state = api.ProcessRunning
		}
		if uint64(p.GetPid()) <= after || (len(lr.states) > 0 && !slices.Contains(lr.states, state)) {
			continue
		}
		ap := api.Process{
			PID: p.GetPid(), Tag: p.GetTag(), Cmd: p.GetConfig().GetCmd(), Args: p.GetConfig().GetArgs(),
			Running: p.GetRunning(),
		}
		if end := p.GetEnd(); end != nil {
			code := int(end.GetExitCode())
			ap.ExitCode = &code
		}
		list = append(list, ap)
	}
	slices.SortFunc(list, func(a, b api.Process) int { return cmp.Compare(a.PID, b.PID) })
	var out api.ProcessList
	out.Processes, out.NextPageToken = page(lr, list[:min(len(list), lr.limit+1)], func(p api.Process) pageToken {
		return pageToken{Key: strconv.FormatUint(uint64(p.PID), 10)}
	})
	return writeJSON(w, http.StatusOK, out)
}

// streamProcess answers GET /v1/sandboxes/{id}/processes/{pid}/stream:
// the process's events as ndjson until it ends. Leaving does not kill it.
func (s *Server) streamProcess(w http.ResponseWriter, r *http.Request) error {
	replay, err := boolQuery(r, "replay")
	if err != nil {
		return err
	}
	id, pid, conn, err := s.processTarget(r)
	if err != nil {
		return err
	}
	release, err := s.holdStream(id)
	if err != nil {
		return err
	}
	defer release()
	stream, err := conn.Process.Connect(r.Context(), connect.NewRequest(&processpb.ConnectRequest{
		Process: pidSelector(pid), Replay: replay,
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	defer stream.Close()
	// The first event (start) is read before answering, so that a missing
	// process is a plain 404 rather than a stream with an error in it.
	if !stream.Receive() {
		return agentError(r.Context(), id, streamEnd(id, stream.Err()))
	}
	nd := newNDJSON(w)
	if out, ok := execEvent(stream.Msg().GetEvent()); ok {
		if err := nd.send(out); err != nil {
			return err
		}
		if out.Type == api.EventEnd {
			return nil
		}
	}
	return pipeEvents(r, id, nd, stream)
}

// waitProcess answers POST /v1/sandboxes/{id}/processes/{pid}/wait: the
// process's end as an ExecResult without output, or 504 when timeout_ms
// passes first.
func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request) error {
	var timeout time.Duration
	if v := r.URL.Query().Get("timeout_ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 || ms > maxExecTimeout.Milliseconds() {
			return api.Errorf(api.CodeBadRequest, "bad timeout_ms %q: want 0 (none) to %d", v, maxExecTimeout.Milliseconds())
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	id, pid, conn, err := s.processTarget(r)
	if err != nil {
		return err
	}
	release, err := s.holdStream(id)
	if err != nil {
		return err
	}
	defer release()
	// The timeout is a cancellation with a cause, not a deadline: a deadline
	// would travel to the agent, whose answer to it could arrive before this
	// side's context noticed.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if timeout > 0 {
		timer := time.AfterFunc(timeout, func() { cancel(errWaitTimeout) })
		defer timer.Stop()
	}
	stream, err := conn.Process.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSelector(pid)}))
	if err != nil {
		return waitError(ctx, id, pid, timeout, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			finish(stream)
			return writeJSON(w, http.StatusOK, api.ExecResult{
				PID: pid, ExitCode: int(end.GetExitCode()), Status: end.GetStatus(), TimedOut: end.GetTimedOut(),
				DurationMs: float64(end.GetDurationUs()) / 1000,
			})
		}
	}
	return waitError(ctx, id, pid, timeout, streamEnd(id, stream.Err()))
}

// errWaitTimeout cancels a wait whose timeout_ms passed.
var errWaitTimeout = errors.New("wait timed out")

// waitError reports a wait that ended without the process's end: its own
// timeout is a 504; anything else is the agent's error.
func waitError(ctx context.Context, id string, pid uint32, timeout time.Duration, err error) error {
	if context.Cause(ctx) == errWaitTimeout {
		return api.Errorf(api.CodeTimeout, "process %d has not ended after %v", pid, timeout)
	}
	return agentError(ctx, id, err)
}

// stdinChunk is the most stdin sent to the agent in one message.
const stdinChunk = 64 << 10

// processStdin answers POST /v1/sandboxes/{id}/processes/{pid}/stdin: the
// body is streamed to the process's stdin in order; close=true then sends
// EOF.
func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) error {
	streamBody(r)
	closeAfter, err := boolQuery(r, "close")
	if err != nil {
		return err
	}
	id, pid, conn, err := s.processTarget(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	in := conn.Process.StreamInput(ctx)
	sendErr := in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Start{
		Start: &processpb.StreamInputRequest_StartEvent{Process: pidSelector(pid)},
	}})
	var readErr error
	buf := make([]byte, stdinChunk)
	for sendErr == nil {
		n, err := r.Body.Read(buf)
		if n > 0 {
			// Send encodes the message before it returns, so buf can be reused.
			sendErr = in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Data{
				Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{
					Input: &processpb.ProcessInput_Stdin{Stdin: buf[:n]},
				}},
			}})
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
	}
	// A failed Send says only io.EOF; the agent's reason comes back here.
	_, err = in.CloseAndReceive()
	if err != nil {
		return agentError(ctx, id, err)
	}
	if sendErr != nil {
		return agentError(ctx, id, sendErr)
	}
	if readErr != nil {
		return api.Errorf(api.CodeBadRequest, "read request body: %v", readErr)
	}
	if closeAfter {
		_, err := conn.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSelector(pid)}))
		if err != nil {
			return agentError(ctx, id, err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resizeProcess answers POST /v1/sandboxes/{id}/processes/{pid}/resize:
// the new size of a pty process's terminal (409 for a process without one).
func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request) error {
	var req api.PTYSize
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := checkPTYSize(req); err != nil {
		return err
	}
	id, pid, conn, err := s.processTarget(r)
	if err != nil {
		return err
	}
	_, err = conn.Process.Update(r.Context(), connect.NewRequest(&processpb.UpdateRequest{
		Process: pidSelector(pid), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: req.Cols, Rows: req.Rows}},
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkPTYSize checks a terminal's size.
func checkPTYSize(size api.PTYSize) error {
	if size.Cols < 1 || size.Cols > api.MaxPTYSize || size.Rows < 1 || size.Rows > api.MaxPTYSize {
		return api.Errorf(api.CodeBadRequest, "pty size %dx%d: cols and rows must be 1 to %d", size.Cols, size.Rows, api.MaxPTYSize)
	}
	return nil
}

// signals are the signals SignalRequest accepts, by name.
var signals = map[string]processpb.Signal{
	"HUP":  processpb.Signal_SIGNAL_SIGHUP,
	"INT":  processpb.Signal_SIGNAL_SIGINT,
	"QUIT": processpb.Signal_SIGNAL_SIGQUIT,
	"KILL": processpb.Signal_SIGNAL_SIGKILL,
	"USR1": processpb.Signal_SIGNAL_SIGUSR1,
	"USR2": processpb.Signal_SIGNAL_SIGUSR2,
	"TERM": processpb.Signal_SIGNAL_SIGTERM,
	"CONT": processpb.Signal_SIGNAL_SIGCONT,
	"STOP": processpb.Signal_SIGNAL_SIGSTOP,
}

// signalProcess answers POST /v1/sandboxes/{id}/processes/{pid}/signal.
// Signal names may carry the SIG prefix and any case.
func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) error {
	var req api.SignalRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG")]
	if !ok {
		return api.Errorf(api.CodeBadRequest, "unknown signal %q: want one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", req.Signal)
	}
	id, pid, conn, err := s.processTarget(r)
	if err != nil {
		return err
	}
	_, err = conn.Process.SendSignal(r.Context(), connect.NewRequest(&processpb.SendSignalRequest{Process: pidSelector(pid), Signal: sig}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
