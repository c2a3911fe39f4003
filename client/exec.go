package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"warren/api"
)

// Exec runs a command in the sandbox id and returns its outcome and output
// once it has ended. The output is text (invalid UTF-8 shows as U+FFFD) and
// may be truncated by the server: use ExecStream for exact bytes. req's
// Stream and Background are ignored. Never retried.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (*api.ExecResult, error) {
	req.Stream, req.Background = false, false
	var res api.ExecResult
	cl := &call{op: "exec", method: http.MethodPost, path: sandboxPath(id, "exec"), in: req, retry: retryNever}
	if err := c.do(ctx, cl, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ExecStream runs a command in the sandbox id and returns its events as
// they happen: start, stdout and stderr data (exact bytes), then end. The
// caller must Close the stream; cancelling ctx cuts it. req's Stream and
// Background are ignored. Never retried.
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest) (*EventStream, error) {
	req.Stream, req.Background = true, false
	cl := &call{op: "exec", method: http.MethodPost, path: sandboxPath(id, "exec"), in: req, retry: retryNever}
	resp, err := c.send(ctx, cl)
	if err != nil {
		return nil, err
	}
	return newEventStream(resp.Body), nil
}

// StartProcess starts a command in the background in the sandbox id and
// returns its pid at once; AttachProcess, WriteStdin, SignalProcess and
// WaitProcess then deal with it. Its stdin stays open until WriteStdin
// closes it. req's Stream and Background are ignored. Never retried.
func (c *Client) StartProcess(ctx context.Context, id string, req api.ExecRequest) (*api.StartedProcess, error) {
	req.Stream, req.Background = false, true
	var p api.StartedProcess
	cl := &call{op: "start process", method: http.MethodPost, path: sandboxPath(id, "exec"), in: req, retry: retryNever}
	if err := c.do(ctx, cl, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// AttachProcess streams the events of process pid until it ends. With
// replay, the stream first repeats the output the process has written so
// far, so that nothing is lost between StartProcess and the attach. The
// caller must Close the stream.
func (c *Client) AttachProcess(ctx context.Context, id string, pid uint32, replay bool) (*EventStream, error) {
	q := url.Values{}
	if replay {
		q.Set("replay", "true")
	}
	cl := &call{op: "attach process", method: http.MethodGet, path: sandboxPath(id, "processes", pidString(pid), "stream"), query: q, retry: retryIdempotent}
	resp, err := c.send(ctx, cl)
	if err != nil {
		return nil, err
	}
	return newEventStream(resp.Body), nil
}

// WaitProcess waits for process pid to end and returns its exit code; the
// result carries no output (attach for it). A timeout > 0 bounds the wait on
// the server, which then answers an *api.Error with code timeout; 0 waits as
// long as the server allows.
func (c *Client) WaitProcess(ctx context.Context, id string, pid uint32, timeout time.Duration) (*api.ExecResult, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout_ms", strconv.FormatInt(max(timeout.Milliseconds(), 1), 10))
	}
	var res api.ExecResult
	cl := &call{op: "wait process", method: http.MethodPost, path: sandboxPath(id, "processes", pidString(pid), "wait"), query: q, retry: retryRefused}
	if err := c.do(ctx, cl, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// WriteStdin streams r to the stdin of process pid as the request body,
// without holding it in memory, until r ends; with close it then closes the
// process's stdin (EOF). A nil r sends nothing, which with close just closes
// stdin. WriteStdin does not close r. Never retried.
func (c *Client) WriteStdin(ctx context.Context, id string, pid uint32, r io.Reader, close bool) error {
	q := url.Values{}
	if close {
		q.Set("close", "true")
	}
	cl := &call{op: "write stdin", method: http.MethodPost, path: sandboxPath(id, "processes", pidString(pid), "stdin"), query: q, body: r, retry: retryNever}
	return c.do(ctx, cl, nil)
}

// SignalProcess sends a signal to process pid: TERM, KILL, INT, HUP, QUIT,
// USR1, USR2, STOP or CONT.
func (c *Client) SignalProcess(ctx context.Context, id string, pid uint32, signal string) error {
	cl := &call{op: "signal process", method: http.MethodPost, path: sandboxPath(id, "processes", pidString(pid), "signal"), in: api.SignalRequest{Signal: signal}, retry: retryRefused}
	return c.do(ctx, cl, nil)
}

// ResizeProcess sets the terminal size of process pid, started with
// ExecRequest.PTY (the process gets SIGWINCH). A process without a pty is
// a CodeConflict error.
func (c *Client) ResizeProcess(ctx context.Context, id string, pid uint32, cols, rows uint32) error {
	cl := &call{op: "resize process", method: http.MethodPost, path: sandboxPath(id, "processes", pidString(pid), "resize"), in: api.PTYSize{Cols: cols, Rows: rows}, retry: retryRefused}
	return c.do(ctx, cl, nil)
}

func pidString(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }

// EventStream reads the events of a streamed exec or of an attach, one JSON
// object a line. It is not safe for concurrent use.
type EventStream struct {
	body  io.ReadCloser
	dec   *json.Decoder
	ended bool // the end event was read
	// failed is set once an error event was read: the server may close the
	// stream after it without an end event.
	failed bool
	// err is the first error reading the stream; every later Next returns
	// it (a JSON decoder goes on after a type error, the stream must not).
	err error
}

func newEventStream(body io.ReadCloser) *EventStream {
	return &EventStream{body: body, dec: json.NewDecoder(body)}
}

// errStreamEnded is returned by Copy for a stream whose end was read.
var errStreamEnded = errors.New("stream already ended")

// Next returns the next event. After the end event, and at the end of a
// stream that carried an error event, it returns io.EOF. A stream cut before
// its end returns an error wrapping io.ErrUnexpectedEOF: the process's
// outcome is unknown.
func (s *EventStream) Next() (*api.ExecEvent, error) {
	if s.ended {
		return nil, io.EOF
	}
	if s.err != nil {
		return nil, s.err
	}
	var ev api.ExecEvent
	if err := s.dec.Decode(&ev); err != nil {
		if err == io.EOF {
			if s.failed {
				return nil, io.EOF
			}
			err = io.ErrUnexpectedEOF
		}
		s.err = fmt.Errorf("read event: %w", err)
		return nil, s.err
	}
	switch ev.Type {
	case api.EventEnd:
		s.ended = true
	case api.EventError:
		s.failed = true
	}
	return &ev, nil
}

// Copy writes the data of the stdout and stderr events to stdout and stderr
// (nil discards it), byte for byte as they come, until the end event; the
// output of a process on a pty (pty events) goes to stdout. It
// returns the outcome the end event reports: PID, ExitCode (-1 if it has
// none), Status, TimedOut and DurationMs; Stdout and Stderr are empty. An
// error event is returned as an error. Copy does not close the stream.
func (s *EventStream) Copy(stdout, stderr io.Writer) (*api.ExecResult, error) {
	var res api.ExecResult
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return nil, errStreamEnded
		}
		if err != nil {
			return nil, err
		}
		if ev.PID != 0 {
			res.PID = ev.PID
		}
		switch ev.Type {
		case api.EventStdout, api.EventPTY:
			err = write(stdout, ev.Data, "stdout")
		case api.EventStderr:
			err = write(stderr, ev.Data, "stderr")
		case api.EventError:
			return nil, fmt.Errorf("process: %s", ev.Error)
		case api.EventEnd:
			res.ExitCode = -1
			if ev.ExitCode != nil {
				res.ExitCode = *ev.ExitCode
			}
			res.Status, res.TimedOut, res.DurationMs = ev.Status, ev.TimedOut, ev.DurationMs
			return &res, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func write(w io.Writer, data []byte, name string) error {
	if w == nil || len(data) == 0 {
		return nil
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Close ends the stream; when the process has not ended, the server stops
// sending its events (for a streamed exec, the server decides whether the
// process goes on).
func (s *EventStream) Close() error {
	return s.body.Close()
}
