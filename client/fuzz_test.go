package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"warren/api"
)

// FuzzEventStream reads arbitrary bytes as an exec event stream. Next never
// panics and ends within one call per input byte; once it has returned an
// error it returns no more events; it ends with io.EOF only after an end
// event, or after an error event when the input then ends; an input that
// ends cleanly without either is an io.ErrUnexpectedEOF. Copy over the same
// bytes agrees with Next: the same output, the end event's outcome, or an
// error.
func FuzzEventStream(f *testing.F) {
	for _, s := range []string{
		`{"type":"start","pid":42}` + "\n" + `{"type":"stdout","data":"aGk="}` + "\n" + `{"type":"stderr","data":"/w=="}` + "\n" + `{"type":"end","exit_code":0,"status":"exit status 0","duration_ms":1.5}` + "\n",
		`{"type":"start","pid":1}` + "\n" + `{"type":"error","error":"agent gone"}` + "\n",
		`{"type":"start","pid":1}` + "\n" + `{"type":"error","error":"x"}` + "\n" + `{"type":"stdout","data":"eA=="}` + "\n",
		`{"type":"end"}` + "\n" + `{"type":"stdout","data":"eA=="}` + "\n",
		`{"type":"end","exit_code":null}`,
		`{"type":"start","pid":1}` + "\n",
		`{"type":"start","pid":1}` + "\n" + `{"type":"stdout","data":"aGk`,
		`{"type":"future-type"}` + "\n" + `{"type":"end","exit_code":3}`,
		`null` + "\n" + `{"type":"end"}`,
		`{"type":"end"}` + "\n" + `{"type":5}`,
		`{"type":"start"}` + "\n" + `[]`,
		`{"type":"end"}{"type":"end"}`,
		`{"type":"start"} garbage`,
		"",
		"\n\n",
		"\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newEventStream(io.NopCloser(bytes.NewReader(data)))
		var (
			events           []*api.ExecEvent
			err              error
			sawEnd, sawError bool
		)
		for {
			if len(events) > len(data) {
				t.Fatalf("stream %q: %d events from %d bytes", data, len(events), len(data))
			}
			var ev *api.ExecEvent
			ev, err = s.Next()
			if err != nil {
				if ev != nil {
					t.Fatalf("stream %q: Next returned event %+v with error %v", data, ev, err)
				}
				break
			}
			if ev == nil {
				t.Fatalf("stream %q: Next returned neither an event nor an error", data)
			}
			if sawEnd {
				t.Fatalf("stream %q: event %+v after the end event", data, ev)
			}
			sawEnd = sawEnd || ev.Type == api.EventEnd
			sawError = sawError || ev.Type == api.EventError
			events = append(events, ev)
		}
		for range 3 {
			if ev, err2 := s.Next(); err2 == nil || ev != nil {
				t.Fatalf("stream %q: after error %v, Next returned %+v, %v", data, err, ev, err2)
			}
		}
		if err == io.EOF && !sawEnd && !sawError {
			t.Fatalf("stream %q: io.EOF with neither an end nor an error event", data)
		}
		if err != io.EOF && sawEnd {
			t.Fatalf("stream %q: error %v after the end event, want io.EOF", data, err)
		}
		// Whole events, then nothing but space: a cut, not a bad stream.
		if !sawEnd && !sawError && wholeEvents(data) == len(events) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream %q ended after %d whole events: error %v, want io.ErrUnexpectedEOF", data, len(events), err)
		}

		var stdout, stderr bytes.Buffer
		res, cerr := newEventStream(io.NopCloser(bytes.NewReader(data))).Copy(&stdout, &stderr)
		var wantOut, wantErr []byte
		var want *api.ExecResult
		pid := uint32(0)
	replay:
		for _, ev := range events {
			if ev.PID != 0 {
				pid = ev.PID
			}
			switch ev.Type {
			case api.EventStdout:
				wantOut = append(wantOut, ev.Data...)
			case api.EventStderr:
				wantErr = append(wantErr, ev.Data...)
			case api.EventError:
				break replay
			case api.EventEnd:
				want = &api.ExecResult{PID: pid, ExitCode: -1, Status: ev.Status, TimedOut: ev.TimedOut, DurationMs: ev.DurationMs}
				if ev.ExitCode != nil {
					want.ExitCode = *ev.ExitCode
				}
				break replay
			}
		}
		if want == nil {
			if cerr == nil {
				t.Fatalf("stream %q: Copy = %+v, want an error (no end event before the first error)", data, res)
			}
			return
		}
		if cerr != nil || !reflect.DeepEqual(res, want) {
			t.Fatalf("stream %q: Copy = %+v, %v; want %+v", data, res, cerr, want)
		}
		if !bytes.Equal(stdout.Bytes(), wantOut) || !bytes.Equal(stderr.Bytes(), wantErr) {
			t.Fatalf("stream %q: Copy wrote %q, %q; Next read %q, %q", data, stdout.Bytes(), stderr.Bytes(), wantOut, wantErr)
		}
	})
}

// wholeEvents counts the JSON values that data holds one after another,
// separated by nothing but space, each decoding as an ExecEvent; -1 when
// anything else is in it.
func wholeEvents(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var ev api.ExecEvent
		err := dec.Decode(&ev)
		if err == io.EOF {
			return n
		}
		if err != nil {
			return -1
		}
		n++
	}
}
