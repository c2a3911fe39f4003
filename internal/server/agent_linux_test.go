//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/api"
	"warren/internal/agent"
	"warren/internal/agent/agenttest"
	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agentconn"
	"warren/internal/wait"
)

// startAgent runs the real guest agent in this process on a unix socket and
// returns a connection to it. Processes it starts run on this host as root:
// tests keep their files under t.TempDir().
func startAgent(t *testing.T) *agentconn.Conn {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs processes as other users and chowns the files it writes")
	}
	sock, _ := agenttest.Listen(t, agent.Options{Version: "test"})
	conn := agentconn.DialUnix(sock)
	t.Cleanup(conn.Close)
	return conn
}

// newAgentEnv is a test server whose sandboxes are served by a real agent,
// with one sandbox of tenant "a" created; it returns the sandbox's path.
func newAgentEnv(t *testing.T, opts Options) (*testEnv, string) {
	t.Helper()
	conn := startAgent(t)
	// The agent runs on the host here: a HOME of the test's own keeps a
	// login shell (the terminal's) from running the host user's profile,
	// which may hang (a stale pyenv rehash lock on a build machine did, for
	// 60 s each time, and a shell the test killed mid-rehash left it).
	init := &controlpb.InitRequest{Envs: map[string]string{"HOME": t.TempDir()}}
	if _, err := conn.Control.Init(context.Background(), connect.NewRequest(init)); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, conn, opts)
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	return e, "/v1/sandboxes/" + sb.ID
}

// Execs one after the other go over one connection to the agent: each
// reads its event stream to the end, so that its connection goes back to
// the pool rather than being closed and dialled again.
func TestExecsReuseTheAgentConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs processes as other users")
	}
	sock, _ := agenttest.Listen(t, agent.Options{Version: "test"})
	var dials atomic.Int32
	conn := agentconn.New(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(conn.Close)
	e := newTestEnv(t, conn, Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	for range 5 {
		var res api.ExecResult
		e.call("POST", "/v1/sandboxes/"+sb.ID+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"true"}}, http.StatusOK, &res)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("5 execs dialled the agent %d times, want 1", n)
	}
}

func TestExecForeground(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	dir := t.TempDir()
	for _, tc := range []struct {
		name           string
		req            api.ExecRequest
		stdout, stderr string
		code           int
		status         string
		timedOut       bool
	}{
		{name: "argv", req: api.ExecRequest{Cmd: []string{"echo", "hi", "there"}}, stdout: "hi there\n", status: "exit status 0"},
		{name: "shell", req: api.ExecRequest{Shell: "echo out; echo err >&2; exit 3"}, stdout: "out\n", stderr: "err\n", code: 3, status: "exit status 3"},
		{name: "stdin", req: api.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte("hello\x00bytes")}, stdout: "hello\x00bytes"},
		{name: "env", req: api.ExecRequest{Shell: `printf %s "$FOO"`, Env: map[string]string{"FOO": "bar baz"}}, stdout: "bar baz"},
		{name: "cwd", req: api.ExecRequest{Cmd: []string{"pwd"}, Cwd: dir}, stdout: dir + "\n"},
		{name: "user", req: api.ExecRequest{Cmd: []string{"id", "-un"}, User: "nobody"}, stdout: "nobody\n"},
		{name: "missing command", req: api.ExecRequest{Cmd: []string{"/nonexistent/warren-test"}}, code: 127},
		{name: "killed by signal", req: api.ExecRequest{Shell: "kill -TERM $$"}, code: 143, status: "signal: terminated"},
		{name: "timeout", req: api.ExecRequest{Shell: "sleep 30", TimeoutMs: 200}, code: 137, timedOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res api.ExecResult
			e.call("POST", box+"/exec", e.keyA, tc.req, http.StatusOK, &res)
			if res.ExitCode != tc.code || res.Stdout != tc.stdout || res.TimedOut != tc.timedOut || res.Truncated {
				t.Errorf("result %+v, want code %d stdout %q timed out %v", res, tc.code, tc.stdout, tc.timedOut)
			}
			if tc.stderr != "" && res.Stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", res.Stderr, tc.stderr)
			}
			if tc.code == 127 && res.Stderr == "" {
				t.Error("a missing command says nothing on stderr")
			}
			if tc.status != "" && res.Status != tc.status {
				t.Errorf("status %q, want %q", res.Status, tc.status)
			}
			if tc.code != 127 && res.PID == 0 {
				t.Error("no pid")
			}
			if tc.timedOut && res.DurationMs < 150 {
				t.Errorf("duration %v ms for a 200 ms timeout", res.DurationMs)
			}
		})
	}
	// A cwd that is no directory is the caller's mistake.
	apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"true"}, Cwd: dir + "/missing"}), http.StatusBadRequest, api.CodeBadRequest)
}

func TestExecTruncatesAndDrains(t *testing.T) {
	e, box := newAgentEnv(t, Options{MaxOutputBytes: 1000})
	var res api.ExecResult
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{
		Shell: "head -c 3000000 /dev/zero | tr '\\0' a; printf 12345 >&2; exit 4",
	}, http.StatusOK, &res)
	if len(res.Stdout) != 1000 || strings.Trim(res.Stdout, "a") != "" || res.Stderr != "12345" || !res.Truncated || res.ExitCode != 4 {
		t.Errorf("got %d bytes of stdout, stderr %q, truncated %v, code %d", len(res.Stdout), res.Stderr, res.Truncated, res.ExitCode)
	}
}

func TestExecInvalidUTF8(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	var res api.ExecResult
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Shell: `printf 'a\377b'`}, http.StatusOK, &res)
	if res.Stdout != "a\uFFFDb" {
		t.Errorf("stdout %q, want the bad byte as U+FFFD", res.Stdout)
	}
	resp := e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Shell: `printf 'a\377\000b'`, Stream: true})
	defer resp.Body.Close()
	var out []byte
	for _, ev := range readEvents[api.ExecEvent](t, resp.Body) {
		if ev.Type == api.EventStdout {
			out = append(out, ev.Data...)
		}
	}
	if string(out) != "a\xff\x00b" {
		t.Errorf("streamed stdout %q, want the exact bytes", out)
	}
}

func TestExecStreamFlushesEachEvent(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	gate := filepath.Join(t.TempDir(), "go")
	resp := e.do("POST", box+"/exec", e.keyA, api.ExecRequest{
		Shell:  fmt.Sprintf("echo one; while [ ! -e %s ]; do sleep 0.01; done; echo two >&2; exit 5", gate),
		Stream: true,
	})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	br := bufio.NewReader(resp.Body)
	next := func() api.ExecEvent {
		t.Helper()
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		var ev api.ExecEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		return ev
	}
	if ev := next(); ev.Type != api.EventStart || ev.PID == 0 {
		t.Fatalf("first event %+v, want start with a pid", ev)
	}
	// "one" arrives while the process still waits for the gate: the line
	// was flushed, not held until the end.
	if ev := next(); ev.Type != api.EventStdout || string(ev.Data) != "one\n" {
		t.Fatalf("second event %+v, want stdout one", ev)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != api.EventStderr || string(ev.Data) != "two\n" {
		t.Fatalf("third event %+v, want stderr two", ev)
	}
	if ev := next(); ev.Type != api.EventEnd || ev.ExitCode == nil || *ev.ExitCode != 5 || ev.Status != "exit status 5" {
		t.Fatalf("last event %+v, want end with code 5", ev)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("stream goes on after the end: %v", err)
	}
}

// processByTag returns the process of the sandbox with tag, if any.
func processByTag(t *testing.T, e *testEnv, box, tag string) (api.Process, bool) {
	t.Helper()
	var list struct{ Processes []api.Process }
	e.call("GET", box+"/processes", e.keyA, nil, http.StatusOK, &list)
	for _, p := range list.Processes {
		if p.Tag == tag {
			return p, true
		}
	}
	return api.Process{}, false
}

func TestBackgroundProcess(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	var started api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"cat"}, Background: true, Tag: "job", Stdin: []byte("0")}, http.StatusAccepted, &started)
	if started.PID == 0 || started.Tag != "job" {
		t.Fatalf("started %+v", started)
	}
	pidPath := fmt.Sprintf("%s/processes/%d", box, started.PID)
	p, ok := processByTag(t, e, box, "job")
	if !ok || p.PID != started.PID || !p.Running || p.Cmd != "cat" || p.ExitCode != nil {
		t.Fatalf("listed %+v, %v", p, ok)
	}
	// A second running process cannot take the tag.
	apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"cat"}, Background: true, Tag: "job"}), http.StatusConflict, api.CodeConflict)

	// Attach before any more input: the live stream sees what comes next.
	attach := e.do("GET", pidPath+"/stream", e.keyA, nil)
	defer attach.Body.Close()
	if attach.StatusCode != http.StatusOK {
		t.Fatalf("attach: status %d", attach.StatusCode)
	}
	e.call("POST", pidPath+"/stdin", e.keyA, "abc", http.StatusNoContent, nil)
	e.call("POST", pidPath+"/stdin?close=true", e.keyA, "def", http.StatusNoContent, nil)

	var res api.ExecResult
	e.call("POST", pidPath+"/wait", e.keyA, nil, http.StatusOK, &res)
	if res.PID != started.PID || res.ExitCode != 0 || res.Status != "exit status 0" || res.Stdout != "" {
		t.Errorf("wait = %+v", res)
	}
	live := readEvents[api.ExecEvent](t, attach.Body)
	// The echo of the start's stdin may come before or after the attach.
	if got := strings.TrimPrefix(stdoutOf(live), "0"); got != "abcdef" {
		t.Errorf("live stream stdout %q, want [0]abcdef (events %+v)", got, live)
	}
	if last := live[len(live)-1]; last.Type != api.EventEnd || last.ExitCode == nil || *last.ExitCode != 0 {
		t.Errorf("live stream ends with %+v", last)
	}

	// After the end, a replay still has everything.
	resp := e.do("GET", pidPath+"/stream?replay=true", e.keyA, nil)
	replay := readEvents[api.ExecEvent](t, resp.Body)
	resp.Body.Close()
	if got := stdoutOf(replay); got != "0abcdef" || replay[0].Type != api.EventStart || replay[0].PID != started.PID {
		t.Errorf("replay %+v", replay)
	}
	p, _ = processByTag(t, e, box, "job")
	if p.Running || p.ExitCode == nil || *p.ExitCode != 0 {
		t.Errorf("after the end, listed %+v", p)
	}
	// Its stdin is closed now.
	apiError(t, e.do("POST", pidPath+"/stdin", e.keyA, "more"), http.StatusConflict, api.CodeConflict)
}

func stdoutOf(evs []api.ExecEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == api.EventStdout {
			b.Write(ev.Data)
		}
	}
	return b.String()
}

func TestStdinIsStreamed(t *testing.T) {
	e, box := newAgentEnv(t, Options{MaxBodyBytes: 1024})
	var started api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"wc", "-c"}, Background: true}, http.StatusAccepted, &started)
	pidPath := fmt.Sprintf("%s/processes/%d", box, started.PID)
	// Far beyond the JSON body limit, sent with no length, in pieces.
	const size = 5 << 20
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte("z"), 1<<16)
		for sent := 0; sent < size; sent += len(chunk) {
			pw.Write(chunk)
		}
		pw.Close()
	}()
	e.call("POST", pidPath+"/stdin?close=true", e.keyA, pr, http.StatusNoContent, nil)
	e.call("POST", pidPath+"/wait?timeout_ms=10000", e.keyA, nil, http.StatusOK, nil)
	resp := e.do("GET", pidPath+"/stream?replay=true", e.keyA, nil)
	defer resp.Body.Close()
	if got := strings.TrimSpace(stdoutOf(readEvents[api.ExecEvent](t, resp.Body))); got != strconv.Itoa(size) {
		t.Errorf("wc -c counted %s bytes, want %d", got, size)
	}
}

func TestSignalAndWait(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	var started api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Shell: "exec sleep 300", Background: true}, http.StatusAccepted, &started)
	pidPath := fmt.Sprintf("%s/processes/%d", box, started.PID)

	got := apiError(t, e.do("POST", pidPath+"/wait?timeout_ms=100", e.keyA, nil), http.StatusGatewayTimeout, api.CodeTimeout)
	if !strings.Contains(got.Message, "has not ended") {
		t.Errorf("wait timeout message %q", got.Message)
	}
	e.call("POST", pidPath+"/signal", e.keyA, api.SignalRequest{Signal: "sigterm"}, http.StatusNoContent, nil)
	var res api.ExecResult
	e.call("POST", pidPath+"/wait", e.keyA, nil, http.StatusOK, &res)
	if res.ExitCode != 143 || res.Status != "signal: terminated" {
		t.Errorf("after TERM: %+v", res)
	}
	apiError(t, e.do("POST", pidPath+"/signal", e.keyA, api.SignalRequest{Signal: "KILL"}), http.StatusConflict, api.CodeConflict)

	missing := box + "/processes/4000000"
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/stream", ""},
		{"POST", "/wait", ""},
		{"POST", "/signal", `{"signal":"TERM"}`},
		{"POST", "/stdin?close=true", "x"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		apiError(t, e.do(tc.method, missing+tc.path, e.keyA, body), http.StatusNotFound, api.CodeNotFound)
	}
}

func TestBackgroundCommandThatCannotStart(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	got := apiError(t, e.do("POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"/nonexistent/warren-test"}, Background: true}), http.StatusBadRequest, api.CodeBadRequest)
	if !strings.Contains(got.Message, "exit code 127") {
		t.Errorf("message %q", got.Message)
	}
}

func TestCallerLeavingKillsForegroundExec(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	// An attached stream of a background process does not own it.
	var bg api.StartedProcess
	e.call("POST", box+"/exec", e.keyA, api.ExecRequest{Shell: "exec sleep 300", Background: true, Tag: "bg"}, http.StatusAccepted, &bg)
	actx, acancel := context.WithCancel(context.Background())
	attach := e.doCtx(actx, "GET", fmt.Sprintf("%s/processes/%d/stream", box, bg.PID), e.keyA, nil)
	acancel()
	attach.Body.Close()

	for _, stream := range []bool{false, true} {
		tag := fmt.Sprintf("fg-stream-%v", stream)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			body, _ := json.Marshal(api.ExecRequest{Shell: "exec sleep 300", Tag: tag, Stream: stream})
			req, _ := http.NewRequestWithContext(ctx, "POST", e.url+box+"/exec", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+e.keyA)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		wait.For(t, 10*time.Second, tag+" running", func() bool {
			p, ok := processByTag(t, e, box, tag)
			return ok && p.Running
		})
		cancel()
		<-done
		wait.For(t, 10*time.Second, tag+" killed", func() bool {
			p, _ := processByTag(t, e, box, tag)
			return !p.Running
		})
		p, _ := processByTag(t, e, box, tag)
		if p.ExitCode == nil || *p.ExitCode != 137 {
			t.Errorf("%s ended with %v, want 137 (SIGKILL)", tag, p.ExitCode)
		}
	}
	if p, ok := processByTag(t, e, box, "bg"); !ok || !p.Running {
		t.Errorf("the background process died with its attached stream: %+v", p)
	}
}

func TestFiles(t *testing.T) {
	e, box := newAgentEnv(t, Options{MaxBodyBytes: 1024})
	dir := t.TempDir()
	files := box + "/files"
	q := func(path string, extra ...string) string {
		v := url.Values{"path": {path}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return "?" + v.Encode()
	}

	// Upload more than the JSON limit, with no length, into a missing
	// directory.
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	target := filepath.Join(dir, "sub", "a.bin")
	pr, pw := io.Pipe()
	go func() {
		for b := data; len(b) > 0; {
			n := min(len(b), 100_000)
			pw.Write(b[:n])
			b = b[n:]
		}
		pw.Close()
	}()
	var fi api.FileInfo
	e.call("PUT", files+q(target, "mode", "0600"), e.keyA, pr, http.StatusOK, &fi)
	if fi.Name != "a.bin" || fi.Path != target || fi.Type != "file" || fi.Size != int64(len(data)) || fi.Mode != 0o600 || fi.Owner == "" || fi.ModifiedAt.IsZero() {
		t.Errorf("uploaded %+v", fi)
	}
	if onDisk, err := os.ReadFile(target); err != nil || !bytes.Equal(onDisk, data) {
		t.Errorf("file on disk differs: %v", err)
	}

	resp := e.do("GET", files+q(target), e.keyA, nil)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(data)) || !bytes.Equal(got, data) {
		t.Errorf("download: status %d, length %d, %d bytes, equal %v", resp.StatusCode, resp.ContentLength, len(got), bytes.Equal(got, data))
	}

	for _, tc := range []struct{ mode, want string }{{"", "644"}, {"755", "755"}, {"4755", "4755"}} {
		path := filepath.Join(dir, "m"+tc.mode)
		extra := []string{}
		if tc.mode != "" {
			extra = []string{"mode", tc.mode}
		}
		e.call("PUT", files+q(path, extra...), e.keyA, "#!/bin/sh\n", http.StatusOK, &fi)
		if strconv.FormatUint(uint64(fi.Mode), 8) != tc.want {
			t.Errorf("mode %q: got %o, want %s", tc.mode, fi.Mode, tc.want)
		}
	}

	e.call("GET", files+"/stat"+q(target), e.keyA, nil, http.StatusOK, &fi)
	if fi.Size != int64(len(data)) || fi.Type != "file" {
		t.Errorf("stat %+v", fi)
	}
	if err := os.Symlink("sub/a.bin", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	e.call("GET", files+"/stat"+q(filepath.Join(dir, "link")), e.keyA, nil, http.StatusOK, &fi)
	if fi.Type != "symlink" || fi.SymlinkTarget != "sub/a.bin" {
		t.Errorf("stat of a symlink %+v", fi)
	}

	e.call("POST", files+"/mkdir", e.keyA, api.MkdirRequest{Path: filepath.Join(dir, "x", "y"), Mode: 0o700}, http.StatusOK, &fi)
	if fi.Type != "dir" || fi.Mode != 0o700 || fi.Name != "y" {
		t.Errorf("mkdir %+v", fi)
	}
	apiError(t, e.do("POST", files+"/mkdir", e.keyA, api.MkdirRequest{Path: filepath.Join(dir, "x", "y")}), http.StatusConflict, api.CodeConflict)

	var list struct{ Entries []api.FileInfo }
	e.call("GET", files+"/list"+q(dir), e.keyA, nil, http.StatusOK, &list)
	names := map[string]string{}
	for _, en := range list.Entries {
		names[en.Name] = en.Type
	}
	if names["sub"] != "dir" || names["x"] != "dir" || names["link"] != "symlink" || names["a.bin"] != "" {
		t.Errorf("list depth 1: %v", names)
	}
	e.call("GET", files+"/list"+q(dir, "depth", "3"), e.keyA, nil, http.StatusOK, &list)
	paths := map[string]bool{}
	for _, en := range list.Entries {
		paths[en.Path] = true
	}
	if !paths[target] || !paths[filepath.Join(dir, "x", "y")] {
		t.Errorf("list depth 3 lacks nested entries: %v", paths)
	}

	moved := filepath.Join(dir, "sub", "b.bin")
	e.call("POST", files+"/move", e.keyA, api.MoveRequest{Source: target, Destination: moved}, http.StatusOK, &fi)
	if fi.Path != moved || fi.Size != int64(len(data)) {
		t.Errorf("move %+v", fi)
	}
	apiError(t, e.do("GET", files+q(target), e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, e.do("GET", files+"/stat"+q(target), e.keyA, nil), http.StatusNotFound, api.CodeNotFound)

	sub := filepath.Join(dir, "sub")
	apiError(t, e.do("DELETE", files+q(sub), e.keyA, nil), http.StatusConflict, api.CodeConflict)
	e.call("DELETE", files+q(sub, "recursive", "true"), e.keyA, nil, http.StatusNoContent, nil)
	if _, err := os.Stat(sub); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", sub, err)
	}
	apiError(t, e.do("DELETE", files+q(sub), e.keyA, nil), http.StatusNotFound, api.CodeNotFound)

	for _, bad := range []string{"/../etc/passwd", "/tmp/../../etc"} {
		got := apiError(t, e.do("GET", files+q(bad), e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)
		if !strings.Contains(got.Message, "escapes") {
			t.Errorf("GET %s: message %q", bad, got.Message)
		}
	}
	apiError(t, e.do("GET", files+q(dir), e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)
	apiError(t, e.do("PUT", files+q(dir), e.keyA, "x"), http.StatusConflict, api.CodeConflict)
	apiError(t, e.do("PUT", files+q(filepath.Join(dir, "u"), "user", "no-such-user"), e.keyA, "x"), http.StatusBadRequest, api.CodeBadRequest)
}

// An exec answered whole is timed in the metrics; a streamed one is not.
func TestExecIsTimed(t *testing.T) {
	e, path := newAgentEnv(t, Options{})
	e.call("POST", path+"/exec", e.keyA, `{"cmd":["true"]}`, http.StatusOK, nil)
	e.do("POST", path+"/exec", e.keyA, `{"cmd":["true"],"stream":true}`).Body.Close()
	if text := e.scrape(); !strings.Contains(text, `warren_operation_duration_seconds_count{op="exec"} 1`) {
		t.Errorf("scrape after one exec answered whole:\n%s", grepLines(text, "warren_operation"))
	}
}

// grepLines is text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
