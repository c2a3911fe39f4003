//go:build linux

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"warren/api"
)

func ptyOf(evs []api.ExecEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == api.EventPTY {
			b.Write(ev.Data)
		}
	}
	return b.String()
}

// A pty exec runs on a terminal through the real agent: stdin types into
// it, resize changes its size, its output comes as pty events.
func TestPTYExec(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	var started api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{
		Cmd: []string{"/bin/sh"}, Background: true, PTY: &api.PTYSize{Cols: 80, Rows: 24},
	}, http.StatusAccepted, &started)
	pidPath := fmt.Sprintf("%s/processes/%d", box, started.PID)
	attach := e.do("GET", pidPath+"/stream", e.keyA, nil)
	defer attach.Body.Close()
	if attach.StatusCode != http.StatusOK {
		t.Fatalf("attach: status %d", attach.StatusCode)
	}
	e.call("POST", pidPath+"/stdin", e.keyA, "stty size; echo $TERM\n", http.StatusNoContent, nil)
	// Resize once the shell has answered, for a size of each.
	dec := json.NewDecoder(attach.Body)
	var evs []api.ExecEvent
	for !strings.Contains(ptyOf(evs), "xterm-256color\r\n") {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("read the stream: %v (so far %+v)", err, evs)
		}
		evs = append(evs, ev)
	}
	e.call("POST", pidPath+"/resize", e.keyA, api.PTYSize{Cols: 100, Rows: 30}, http.StatusNoContent, nil)
	e.call("POST", pidPath+"/stdin", e.keyA, "stty size; [ -t 0 ] && echo TTY; exit 5\n", http.StatusNoContent, nil)
	var res api.ExecResult
	e.call("POST", pidPath+"/wait", e.keyA, nil, http.StatusOK, &res)
	if res.ExitCode != 5 {
		t.Errorf("wait = %+v, want exit code 5", res)
	}
	for len(evs) == 0 || evs[len(evs)-1].Type != api.EventEnd {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("read the stream: %v (so far %+v)", err, evs)
		}
		evs = append(evs, ev)
	}
	out := ptyOf(evs)
	for _, want := range []string{"24 80\r\n", "xterm-256color\r\n", "30 100\r\n", "TTY\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("pty output %q lacks %q", out, want)
		}
	}
	if so := stdoutOf(evs); so != "" {
		t.Errorf("stdout events %q from a pty process", so)
	}
	apiError(t, e.do("POST", pidPath+"/resize", e.keyA, api.PTYSize{Cols: 80, Rows: 24}), http.StatusConflict, api.CodeConflict)
}

func TestPTYExecRefusals(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	size := &api.PTYSize{Cols: 80, Rows: 24}
	// A collected pty exec could only end by its timeout.
	apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"true"}, PTY: size}), http.StatusBadRequest, api.CodeBadRequest)
	apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"true"}, Stream: true, PTY: &api.PTYSize{Cols: 0, Rows: 24}}), http.StatusBadRequest, api.CodeBadRequest)
	apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"true"}, Stream: true, PTY: &api.PTYSize{Cols: 80, Rows: 1001}}), http.StatusBadRequest, api.CodeBadRequest)

	var plain api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"cat"}, Background: true}, http.StatusAccepted, &plain)
	plainPath := fmt.Sprintf("%s/processes/%d", box, plain.PID)
	apiError(t, e.do("POST", plainPath+"/resize", e.keyA, *size), http.StatusConflict, api.CodeConflict)
	apiError(t, e.do("POST", plainPath+"/resize", e.keyA, api.PTYSize{Cols: 2000, Rows: 24}), http.StatusBadRequest, api.CodeBadRequest)
	e.call("POST", plainPath+"/stdin?close=true", e.keyA, "", http.StatusNoContent, nil)

	var term api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"cat"}, Background: true, PTY: size}, http.StatusAccepted, &term)
	termPath := fmt.Sprintf("%s/processes/%d", box, term.PID)
	// A terminal's stdin cannot be closed; ^D is its end of file.
	apiError(t, e.do("POST", termPath+"/stdin?close=true", e.keyA, ""), http.StatusConflict, api.CodeConflict)
	e.call("POST", termPath+"/stdin", e.keyA, "\x04", http.StatusNoContent, nil)
	var res api.ExecResult
	e.call("POST", termPath+"/wait?timeout_ms=10000", e.keyA, nil, http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Errorf("cat after ^D: %+v", res)
	}
}

// A streamed pty exec sends its output as pty events.
func TestPTYExecStream(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	resp := e.do("POST", box+"/exec", e.keyA, api.ExecRequest{
		Shell: "tty; exit 2", Stream: true, PTY: &api.PTYSize{Cols: 80, Rows: 24},
	})
	defer resp.Body.Close()
	evs := readEvents[api.ExecEvent](t, resp.Body)
	if out := ptyOf(evs); !strings.HasPrefix(out, "/dev/pts/") {
		t.Errorf("pty output %q, want the terminal's name", out)
	}
	if last := evs[len(evs)-1]; last.Type != api.EventEnd || last.ExitCode == nil || *last.ExitCode != 2 {
		t.Errorf("last event %+v, want the end with exit code 2", last)
	}
}
