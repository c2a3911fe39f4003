package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"warren/api"
)

// eventWriter writes ExecEvent lines, flushing each so that the client sees
// it at once.
type eventWriter struct {
	w http.ResponseWriter
}

func (e eventWriter) send(ev api.ExecEvent) {
	e.w.Write([]byte(mustJSON(ev) + "\n"))
	http.NewResponseController(e.w).Flush()
}

// signalWriter records what is written and closes first on the first write.
type signalWriter struct {
	bytes.Buffer
	first chan struct{}
}

func (s *signalWriter) Write(p []byte) (int, error) {
	if s.Len() == 0 {
		close(s.first)
	}
	return s.Buffer.Write(p)
}

// TestCopyStreamsExactBytes checks that Copy writes each event's bytes as
// they come (the server sends the rest only once the client has written the
// first chunk) and byte for byte, including invalid UTF-8 and NULs.
func TestCopyStreamsExactBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	stdout := &signalWriter{first: make(chan struct{})}
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		ev := eventWriter{w}
		ev.send(api.ExecEvent{Type: api.EventStart, PID: 42})
		ev.send(api.ExecEvent{Type: api.EventStdout, Data: all[:100]})
		select {
		case <-stdout.first:
		case <-r.Context().Done():
			return
		}
		ev.send(api.ExecEvent{Type: api.EventStderr, Data: []byte("\xff\xfeerr\n")})
		ev.send(api.ExecEvent{Type: api.EventStdout, Data: all[100:]})
		ev.send(api.ExecEvent{Type: "future-type"})
		ev.send(api.ExecEvent{Type: api.EventEnd, ExitCode: ptr(3), Status: "exit status 3", DurationMs: 12})
	}))
	s, err := c.ExecStream(t.Context(), "sb-1", api.ExecRequest{Cmd: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stderr bytes.Buffer
	res, err := s.Copy(stdout, &stderr)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if !bytes.Equal(stdout.Bytes(), all) || stderr.String() != "\xff\xfeerr\n" {
		t.Errorf("stdout %q stderr %q, want all 256 bytes and the raw stderr", stdout.Bytes(), stderr.Bytes())
	}
	want := api.ExecResult{PID: 42, ExitCode: 3, Status: "exit status 3", DurationMs: 12}
	if *res != want {
		t.Errorf("result %+v, want %+v", *res, want)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after the end: %v, want io.EOF", err)
	}
	if _, err := s.Copy(nil, nil); !errors.Is(err, errStreamEnded) {
		t.Errorf("Copy after the end: %v, want errStreamEnded", err)
	}
}

func TestEventStreamEnds(t *testing.T) {
	tests := []struct {
		name     string
		events   []api.ExecEvent
		tail     string // written after the events
		wantRes  *api.ExecResult
		wantErr  string
		wantNext error // what Next says after Copy
	}{
		{name: "end without exit code", events: []api.ExecEvent{{Type: api.EventEnd, PID: 5, Status: "signal: killed", TimedOut: true}},
			wantRes: &api.ExecResult{PID: 5, ExitCode: -1, Status: "signal: killed", TimedOut: true}, wantNext: io.EOF},
		{name: "cut before the end", events: []api.ExecEvent{{Type: api.EventStdout, Data: []byte("x")}},
			wantErr: "read event: unexpected EOF", wantNext: io.EOF},
		{name: "cut inside a line", events: []api.ExecEvent{{Type: api.EventStdout, Data: []byte("x")}}, tail: `{"type":"std`,
			wantErr: "read event: unexpected EOF", wantNext: io.EOF},
		{name: "error event", events: []api.ExecEvent{{Type: api.EventError, Error: "agent lost"}},
			wantErr: "process: agent lost", wantNext: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, ev := range tt.events {
					eventWriter{w}.send(ev)
				}
				io.WriteString(w, tt.tail)
			}))
			s, err := c.AttachProcess(t.Context(), "sb-1", 5, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := s.Copy(io.Discard, io.Discard)
			switch {
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("Copy error %v, want %q", err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Errorf("Copy: %v", err)
			case tt.wantRes != nil && *res != *tt.wantRes:
				t.Errorf("result %+v, want %+v", *res, *tt.wantRes)
			}
			if tt.name == "cut before the end" || tt.name == "cut inside a line" {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("error %v does not wrap io.ErrUnexpectedEOF", err)
				}
				return
			}
			if _, err := s.Next(); err != tt.wantNext {
				t.Errorf("Next after Copy: %v, want %v", err, tt.wantNext)
			}
		})
	}
}

func TestStreamErrorAnswer(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":{"code":"conflict","message":"sandbox sb-1 is not running"}}`)
	}))
	_, err := c.ExecStream(t.Context(), "sb-1", api.ExecRequest{Cmd: []string{"x"}})
	if !api.IsCode(err, api.CodeConflict) || err.Error() != "exec: sandbox sb-1 is not running" {
		t.Errorf("error %v, want the conflict", err)
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestCopyWriteError(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eventWriter{w}.send(api.ExecEvent{Type: api.EventStdout, Data: []byte("x")})
	}))
	s, err := c.AttachProcess(t.Context(), "sb-1", 5, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Copy(failWriter{}, nil); err == nil || err.Error() != "write stdout: broken pipe" {
		t.Errorf("Copy error %v, want the write error", err)
	}
}

// A pty process's output (pty events) goes to Copy's stdout, and
// ResizeProcess posts the size to the resize route.
func TestPTYCopyAndResize(t *testing.T) {
	var got api.PTYSize
	var path string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			path = r.URL.Path
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				t.Errorf("decode resize: %v", err)
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		ev := eventWriter{w}
		ev.send(api.ExecEvent{Type: api.EventStart, PID: 42})
		ev.send(api.ExecEvent{Type: api.EventPTY, Data: []byte("$ ls\r\n")})
		ev.send(api.ExecEvent{Type: api.EventEnd, ExitCode: ptr(0)})
	}))
	s, err := c.AttachProcess(t.Context(), "sb-1", 42, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout bytes.Buffer
	if _, err := s.Copy(&stdout, nil); err != nil || stdout.String() != "$ ls\r\n" {
		t.Errorf("Copy: stdout %q, err %v", stdout.String(), err)
	}
	if err := c.ResizeProcess(t.Context(), "sb-1", 42, 120, 40); err != nil {
		t.Fatal(err)
	}
	if want := (api.PTYSize{Cols: 120, Rows: 40}); got != want || path != "/v1/sandboxes/sb-1/processes/42/resize" {
		t.Errorf("resize posted %+v to %s, want %+v to the resize route", got, path, want)
	}
}
