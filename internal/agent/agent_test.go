//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	"warren/internal/agent/agenttest"
	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/wait"
)

// startAgent serves a Server on a unix socket and returns a Conn to it;
// both are closed when the test ends.
func startAgent(t testing.TB, opts agent.Options) (*agentconn.Conn, *agent.Server) {
	t.Helper()
	sock, srv := agenttest.Listen(t, opts)
	conn := agentconn.DialUnix(sock)
	t.Cleanup(conn.Close)
	return conn, srv
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (switches users, chowns, mounts)")
	}
}

// cmd builds a StartRequest.
func cmd(name string, args ...string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: name, Args: args}}
}

// sh builds a StartRequest running script with sh -c.
func sh(script string) *processpb.StartRequest { return cmd("/bin/sh", "-c", script) }

type result struct {
	stdout, stderr string
	end            *processpb.ProcessEvent_EndEvent
	pid            uint32
}

func run(t testing.TB, conn *agentconn.Conn, req *processpb.StartRequest) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	end, pid, err := conn.Run(ctx, req, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run %v: %v", req.GetProcess().GetArgs(), err)
	}
	return result{stdout.String(), stderr.String(), end, pid}
}

func wantCode(t testing.TB, err error, code connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != code {
		t.Fatalf("error = %v (code %v), want code %v", err, got, code)
	}
}

// eventStream reads process events from a Start or Connect stream.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

type startStream struct {
	*connect.ServerStreamForClient[processpb.StartResponse]
}

func (s startStream) event() *processpb.ProcessEvent { return s.Msg().GetEvent() }

type connectStream struct {
	*connect.ServerStreamForClient[processpb.ConnectResponse]
}

func (s connectStream) event() *processpb.ProcessEvent { return s.Msg().GetEvent() }

// collect reads a stream to its end event.
func collect(t testing.TB, s interface {
	eventStream
	event() *processpb.ProcessEvent
}) result {
	t.Helper()
	var r result
	var stdout, stderr strings.Builder
	for s.Receive() {
		switch ev := s.event().GetEvent().(type) {
		case *processpb.ProcessEvent_Start:
			r.pid = ev.Start.GetPid()
		case *processpb.ProcessEvent_Data:
			stdout.Write(ev.Data.GetStdout())
			stderr.Write(ev.Data.GetStderr())
		case *processpb.ProcessEvent_End:
			r.end = ev.End
			r.stdout, r.stderr = stdout.String(), stderr.String()
			return r
		}
	}
	t.Fatalf("stream ended without end event: %v", s.Err())
	return r
}

func TestOutputSeparationAndOrder(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	r := run(t, conn, sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf tail"))
	if r.stdout != "out1\nout2\ntail" || r.stderr != "err1\nerr2\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r.pid == 0 || r.end.GetExitCode() != 0 || !r.end.GetExited() || r.end.GetStatus() != "exit status 0" || r.end.GetDurationUs() == 0 {
		t.Errorf("pid %d end %v", r.pid, r.end)
	}
}

func TestExitCodes(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        *processpb.StartRequest
		code       int32
		exited     bool
		status     string
		stderr     string
		timedOut   bool
		maxSeconds float64
	}{
		{name: "true", req: cmd("true"), code: 0, exited: true, status: "exit status 0"},
		{name: "false", req: cmd("false"), code: 1, exited: true, status: "exit status 1"},
		{name: "exit 3", req: sh("exit 3"), code: 3, exited: true, status: "exit status 3"},
		{name: "not found", req: cmd("no-such-command-here"), code: 127, exited: true, status: "exit status 127", stderr: "warren-agent: no-such-command-here: command not found\n"},
		{name: "path not found", req: cmd("/no/such/file"), code: 127, exited: true, stderr: "command not found"},
		{name: "not executable", req: cmd(noexec), code: 126, exited: true, stderr: "Permission denied"},
		{name: "directory", req: cmd(dir), code: 126, exited: true, stderr: "Is a directory"},
		{name: "killed", req: sh("kill -9 $$"), code: 137, status: "signal: killed"},
		{name: "terminated", req: sh("kill -TERM $$"), code: 143, status: "signal: terminated"},
	}
	timeout := sh("sleep 30")
	timeout.Process.TimeoutMs = 200
	tests = append(tests, struct {
		name       string
		req        *processpb.StartRequest
		code       int32
		exited     bool
		status     string
		stderr     string
		timedOut   bool
		maxSeconds float64
	}{name: "timeout", req: timeout, code: 137, status: "signal: killed", timedOut: true, maxSeconds: 5})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := run(t, conn, tt.req)
			if got := r.end.GetExitCode(); got != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", got, tt.code, r.stderr)
			}
			if r.end.GetExited() != tt.exited || r.end.GetTimedOut() != tt.timedOut {
				t.Errorf("end %v, want exited %v timed out %v", r.end, tt.exited, tt.timedOut)
			}
			if tt.status != "" && r.end.GetStatus() != tt.status {
				t.Errorf("status %q, want %q", r.end.GetStatus(), tt.status)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tt.stderr)
			}
			if tt.maxSeconds > 0 && time.Since(start).Seconds() > tt.maxSeconds {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	badCwd := cmd("true")
	badCwd.Process.Cwd = ptr("/no/such/dir")
	escCwd := cmd("true")
	escCwd.Process.Cwd = ptr("/../x")
	badUser := cmd("true")
	badUser.Process.User = "no-such-user"
	nul := cmd("echo", "a\x00b")
	pty := cmd("true")
	pty.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: 0, Rows: 24}}
	for _, tt := range []struct {
		name string
		req  *processpb.StartRequest
		code connect.Code
	}{
		{"empty", &processpb.StartRequest{}, connect.CodeInvalidArgument},
		{"bad cwd", badCwd, connect.CodeInvalidArgument},
		{"escaping cwd", escCwd, connect.CodeInvalidArgument},
		{"bad user", badUser, connect.CodeInvalidArgument},
		{"nul", nul, connect.CodeInvalidArgument},
		{"pty size", pty, connect.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := conn.Run(ctx, tt.req, nil, nil)
			wantCode(t, err, tt.code)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestStdinData(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	req := cmd("cat")
	req.StdinData = []byte("hello stdin")
	if r := run(t, conn, req); r.stdout != "hello stdin" {
		t.Errorf("stdout %q", r.stdout)
	}
	// Without stdin_data and stdin unset, stdin is at end of file: cat
	// ends at once.
	if r := run(t, conn, cmd("cat")); r.stdout != "" || r.end.GetExitCode() != 0 {
		t.Errorf("cat without stdin: %q %v", r.stdout, r.end)
	}
}

func TestSendInputAndCloseStdin(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := cmd("cat")
	req.Stdin = ptr(true)
	req.StdinData = []byte("first ")
	stream, err := conn.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	send := func(s string) {
		_, err := conn.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte(s)}},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	send("second ")
	// StreamInput goes over HTTP/2.
	in := conn.Process.StreamInput(ctx)
	if err := in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: sel}}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"third ", "fourth "} {
		if err := in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{
			Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte(s)}},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
	send("fifth")
	if _, err := conn.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, startStream{stream})
	if want := "first second third fourth fifth"; r.stdout != want || r.end.GetExitCode() != 0 {
		t.Errorf("stdout %q (want %q), end %v", r.stdout, want, r.end)
	}
	_, err = conn.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("late")}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func TestEnvAndCwd(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{Env: map[string]string{"OPT": "from-options"}})
	req := sh(`echo "$PATH|$HOME|$USER|$LOGNAME|$OPT|$FOO|$(pwd)"`)
	req.Process.Envs = map[string]string{"FOO": "bar"}
	req.Process.Cwd = ptr("/tmp")
	want := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|/root|root|root|from-options|bar|/tmp\n"
	if os.Geteuid() != 0 {
		want = ""
	}
	if r := run(t, conn, req); want != "" && r.stdout != want {
		t.Errorf("got  %q\nwant %q", r.stdout, want)
	}
	// Init replaces the default envs; the request's win over them.
	ctx := context.Background()
	if _, err := conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{Envs: map[string]string{"A": "init", "B": "init"}})); err != nil {
		t.Fatal(err)
	}
	req = sh(`echo "$A|$B|$OPT"`)
	req.Process.Envs = map[string]string{"B": "request"}
	if r := run(t, conn, req); r.stdout != "init|request|\n" {
		t.Errorf("after Init: %q", r.stdout)
	}
	// PATH of the process's env is where the command is looked up.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mytool"), []byte("#!/bin/sh\necho mytool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	req = cmd("mytool")
	req.Process.Envs = map[string]string{"PATH": dir + ":/bin"}
	if r := run(t, conn, req); r.stdout != "mytool ran\n" {
		t.Errorf("PATH lookup: %q %q", r.stdout, r.stderr)
	}
}

func TestUser(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	for _, tt := range []struct{ user, want string }{
		{"", "0 0"},
		{"root", "0 0"},
		{"nobody", "65534 65534"},
		{"65534", "65534 65534"},
		{"12345", "12345 12345"},
	} {
		req := sh(`echo "$(id -u) $(id -g)"`)
		req.Process.User = tt.user
		r := run(t, conn, req)
		if got := strings.TrimSpace(r.stdout); got != tt.want {
			t.Errorf("user %q: id %q, want %q (stderr %q)", tt.user, got, tt.want, r.stderr)
		}
	}
	// The default cwd is the user's home, "/" when it does not exist.
	req := cmd("pwd")
	req.Process.User = "nobody"
	if r := run(t, conn, req); r.stdout != "/\n" && r.stdout != "/nonexistent\n" {
		t.Errorf("nobody's cwd: %q", r.stdout)
	}
	// Files of root are out of reach.
	req = cmd("cat", "/etc/shadow")
	req.Process.User = "nobody"
	if r := run(t, conn, req); r.end.GetExitCode() == 0 {
		t.Errorf("nobody read /etc/shadow")
	}
}

func TestBackgroundConnectReplay(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	req := sh("echo first; echo err >&2; sleep 0.3; echo second")
	req.Tag = ptr("bg")
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := conn.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	cancel() // the caller goes away; the process must not
	stream.Close()

	byTag := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "bg"}}
	byPID := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	connectTo := func(sel *processpb.ProcessSelector, replay bool) result {
		cs, err := conn.Process.Connect(context.Background(), connect.NewRequest(&processpb.ConnectRequest{Process: sel, Replay: replay}))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		return collect(t, connectStream{cs})
	}
	r := connectTo(byTag, true)
	if r.pid != pid || r.stdout != "first\nsecond\n" || r.stderr != "err\n" || r.end.GetExitCode() != 0 {
		t.Errorf("replay while running: pid %d/%d %q %q %v", r.pid, pid, r.stdout, r.stderr, r.end)
	}
	// Ended processes can still be connected to.
	r = connectTo(byPID, true)
	if r.stdout != "first\nsecond\n" || r.end.GetExitCode() != 0 {
		t.Errorf("replay after end: %q %v", r.stdout, r.end)
	}
	r = connectTo(byPID, false)
	if r.stdout != "" || r.end.GetExitCode() != 0 {
		t.Errorf("connect after end without replay: %q %v", r.stdout, r.end)
	}
	_, err = conn.Process.Connect(context.Background(), connect.NewRequest(&processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 1 << 30}},
	}))
	if err == nil {
		// The error of a server stream may come with the first Receive.
		cs, _ := conn.Process.Connect(context.Background(), connect.NewRequest(&processpb.ConnectRequest{
			Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: 1 << 30}},
		}))
		cs.Receive()
		err = cs.Err()
		cs.Close()
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestSendSignalAndList(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	streams := map[string]*connect.ServerStreamForClient[processpb.StartResponse]{}
	for _, tag := range []string{"a", "b"} {
		req := cmd("sleep", "30")
		req.Tag = ptr(tag)
		s, err := conn.Process.Start(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() {
			t.Fatal(s.Err())
		}
		streams[tag] = s
	}
	// A running process's tag cannot be taken.
	dup := cmd("true")
	dup.Tag = ptr("a")
	_, _, err := conn.Run(ctx, dup, nil, nil)
	wantCode(t, err, connect.CodeAlreadyExists)

	list := func() map[string]*processpb.ProcessInfo {
		resp, err := conn.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*processpb.ProcessInfo{}
		for _, p := range resp.Msg.GetProcesses() {
			m[p.GetTag()] = p
		}
		return m
	}
	l := list()
	if !l["a"].GetRunning() || !l["b"].GetRunning() || l["a"].GetConfig().GetCmd() != "sleep" {
		t.Fatalf("list: %v", l)
	}
	byTag := func(tag string) *processpb.ProcessSelector {
		return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}
	}
	if _, err := conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byTag("a"), Signal: processpb.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, startStream{streams["a"]}); r.end.GetExitCode() != 143 || r.end.GetStatus() != "signal: terminated" {
		t.Errorf("a after TERM: %v", r.end)
	}
	l = list()
	if l["a"].GetRunning() || l["a"].GetEnd().GetExitCode() != 143 || !l["b"].GetRunning() {
		t.Errorf("list after TERM: %v", l)
	}
	_, err = conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byTag("a"), Signal: processpb.Signal_SIGNAL_SIGKILL}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byTag("b")}))
	wantCode(t, err, connect.CodeInvalidArgument)
	if _, err := conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byTag("b"), Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, startStream{streams["b"]}); r.end.GetExitCode() != 137 {
		t.Errorf("b after KILL: %v", r.end)
	}
	_, err = conn.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: byTag("b"), Pty: &processpb.PTY{}}))
	wantCode(t, err, connect.CodeFailedPrecondition)
}

// patternWriter checks that what it is given is the repetition of pattern.
type patternWriter struct {
	pattern string
	n       int64
	bad     bool
}

func (w *patternWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if !w.bad && c != w.pattern[w.n%int64(len(w.pattern))] {
			w.bad = true
		}
		w.n++
	}
	return len(p), nil
}

func TestLargeOutput(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	const size = 50 << 20
	out := &patternWriter{pattern: "abcdefghij\n"}
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	end, _, err := conn.Run(ctx, sh(fmt.Sprintf("yes abcdefghij | head -c %d; echo done >&2", size)), out, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if out.n != size || out.bad || stderr.String() != "done\n" || end.GetExitCode() != 0 {
		t.Errorf("got %d bytes (corrupt: %v), stderr %q, end %v", out.n, out.bad, stderr.String(), end)
	}
}

func TestConcurrentExec(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			end, _, err := conn.Run(ctx, cmd("echo", fmt.Sprint(i)), &out, nil)
			if err != nil {
				errs <- err
				return
			}
			if out.String() != fmt.Sprintf("%d\n", i) || end.GetExitCode() != 0 {
				errs <- fmt.Errorf("exec %d: %q %v", i, out.String(), end)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestKeepAlive(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{KeepAlive: 50 * time.Millisecond})
	stream, err := conn.Process.Start(context.Background(), connect.NewRequest(cmd("sleep", "0.4")))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	keepalives := 0
	for stream.Receive() {
		if stream.Msg().GetEvent().GetKeepalive() != nil {
			keepalives++
		}
		if stream.Msg().GetEvent().GetEnd() != nil {
			break
		}
	}
	if keepalives < 2 {
		t.Errorf("%d keep-alives in 0.4 s at 50 ms", keepalives)
	}
}

// TestOrphansReaped: as a subreaper, the agent reaps the orphans of the
// processes it starts, so none stays a zombie.
func TestOrphansReaped(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	for range 5 {
		run(t, conn, sh("sleep 0.1 & (sleep 0.1 &) ; exit 0"))
	}
	me := fmt.Sprint(os.Getpid())
	wait.For(t, 10*time.Second, "no zombie or sleeping child", func() bool {
		for _, st := range procStats(t) {
			if st.ppid == me && (st.state == "Z" || st.comm == "sleep") {
				return false
			}
		}
		return true
	})
}

type procStat struct{ pid, comm, state, ppid string }

// procStats reads /proc/*/stat.
func procStats(t testing.TB) []procStat {
	t.Helper()
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []procStat
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		s := string(data)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		rest := strings.Fields(s[closing+1:])
		if len(rest) < 2 {
			continue
		}
		out = append(out, procStat{pid: strings.TrimSpace(s[:open]), comm: s[open+1 : closing], state: rest[0], ppid: rest[1]})
	}
	return out
}

func TestShutdownHook(t *testing.T) {
	called := make(chan struct{})
	conn, _ := startAgent(t, agent.Options{OnShutdown: func() { close(called) }})
	ctx := context.Background()
	stream, err := conn.Process.Start(ctx, connect.NewRequest(sh("trap 'exit 7' TERM; echo trapped; sleep 30 & wait")))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for !strings.Contains(string(stream.Msg().GetEvent().GetData().GetStdout()), "trapped") { // sh has installed its trap
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
	}
	if _, err := conn.Control.Shutdown(ctx, connect.NewRequest(&controlpb.ShutdownRequest{GraceMs: 2000})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, startStream{stream})
	if r.end.GetExitCode() != 7 {
		t.Errorf("process after shutdown: %v (want the TERM trap's exit 7)", r.end)
	}
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatal("OnShutdown not called")
	}
}

func TestInfo(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{Version: "v-test", SandboxID: "sb-1"})
	ctx := context.Background()
	resp, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if m := resp.Msg; m.GetVersion() != "v-test" || m.GetSandboxId() != "sb-1" || m.GetPid() != uint32(os.Getpid()) || m.GetKernel() == "" || m.GetHostname() != host {
		t.Errorf("info %v", m)
	}
	if _, err := conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{SandboxId: "sb-2"})); err != nil {
		t.Fatal(err)
	}
	resp, err = conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil || resp.Msg.GetSandboxId() != "sb-2" {
		t.Errorf("after Init: %v %v", resp, err)
	}
	_, err = conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{Envs: map[string]string{"A=B": "x"}}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

// TestInitRefusesBadIdentity: a malformed identity is refused before any
// of it is applied, and an agent that is not a VM's PID 1 refuses to set
// the clock or reseed the kernel (a container's kernel is the host's).
func TestInitRefusesBadIdentity(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{SandboxID: "sb-1"})
	ctx := context.Background()
	seed := make([]byte, agent.MinRandomSeed)
	for _, c := range []struct {
		name string
		req  *controlpb.InitRequest
		want connect.Code
	}{
		{"short machine id", &controlpb.InitRequest{SandboxId: "sb-2", MachineId: "abc"}, connect.CodeInvalidArgument},
		{"upper-case machine id", &controlpb.InitRequest{SandboxId: "sb-2", MachineId: strings.Repeat("A", 32)}, connect.CodeInvalidArgument},
		{"hostname with a slash", &controlpb.InitRequest{SandboxId: "sb-2", Hostname: "a/b"}, connect.CodeInvalidArgument},
		{"hostname with a newline", &controlpb.InitRequest{SandboxId: "sb-2", Hostname: "a\nb"}, connect.CodeInvalidArgument},
		{"short seed", &controlpb.InitRequest{SandboxId: "sb-2", RandomSeed: seed[:16]}, connect.CodeInvalidArgument},
		{"seed outside a vm", &controlpb.InitRequest{SandboxId: "sb-2", RandomSeed: seed}, connect.CodeFailedPrecondition},
		{"clock outside a vm", &controlpb.InitRequest{SandboxId: "sb-2", ClockUnixNano: time.Now().UnixNano()}, connect.CodeFailedPrecondition},
	} {
		_, err := conn.Control.Init(ctx, connect.NewRequest(c.req))
		if connect.CodeOf(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	resp, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil || resp.Msg.GetSandboxId() != "sb-1" {
		t.Errorf("after refused Inits: %v %v, want the sandbox ID unchanged", resp, err)
	}
}

// TestEndNotHeldByBackgroundChild: a background child that inherited the
// output pipes does not hold back the end of the process that started it.
func TestEndNotHeldByBackgroundChild(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	start := time.Now()
	r := run(t, conn, sh("sleep 3 & echo $!; echo done"))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("end came after %v", took)
	}
	var pid int
	var rest string
	if _, err := fmt.Sscanf(r.stdout, "%d\n%s", &pid, &rest); err != nil || rest != "done" || r.end.GetExitCode() != 0 {
		t.Fatalf("stdout %q end %v", r.stdout, r.end)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// Warm serves one request to itself and must leave nothing behind: its
// abstract socket is gone and the server still serves real callers.
func TestWarmLeavesNoListener(t *testing.T) {
	conn, srv := startAgent(t, agent.Options{})
	srv.Warm()
	prefix := fmt.Sprintf("@warren-agent-warm-%d-", os.Getpid())
	wait.For(t, 5*time.Second, fmt.Sprintf("the warm-up socket %s* to close", prefix), func() bool {
		b, err := os.ReadFile("/proc/net/unix")
		return err == nil && !strings.Contains(string(b), prefix)
	})
	if _, err := conn.Control.Info(context.Background(), connect.NewRequest(&controlpb.InfoRequest{})); err != nil {
		t.Fatalf("Info after Warm: %v", err)
	}
}

// TestMetrics: Metrics answers sane figures, and its CPU share rises while
// busy loops the agent started run on every CPU.
func TestMetrics(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	metrics := func() *controlpb.MetricsResponse {
		t.Helper()
		resp, err := conn.Control.Metrics(ctx, connect.NewRequest(&controlpb.MetricsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	m := metrics()
	if m.GetMemTotalBytes() == 0 || m.GetMemUsedBytes() > m.GetMemTotalBytes() || m.GetDiskTotalBytes() == 0 ||
		m.GetDiskUsedBytes() > m.GetDiskTotalBytes() || m.GetCpuCount() == 0 || m.GetPids() == 0 ||
		m.GetCpuUsedPct() < 0 || m.GetCpuUsedPct() > 100 {
		t.Fatalf("metrics %v", m)
	}
	loops := int(m.GetCpuCount())
	for range loops {
		stream, err := conn.Process.Start(ctx, connect.NewRequest(sh("while :; do :; done")))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		defer syscall.Kill(int(stream.Msg().GetEvent().GetStart().GetPid()), syscall.SIGKILL)
	}
	metrics()
	time.Sleep(300 * time.Millisecond)
	if m := metrics(); m.GetCpuUsedPct() < 50 || m.GetCpuUsedPct() > 100 {
		t.Errorf("cpu_used_pct %v with %d busy loops on %d CPUs, want 50..100", m.GetCpuUsedPct(), loops, m.GetCpuCount())
	}
}
