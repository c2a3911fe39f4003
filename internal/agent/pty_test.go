//go:build linux

package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/wait"
)

// ptyReq builds a StartRequest running name on a pty of cols×rows.
func ptyReq(cols, rows uint32, name string, args ...string) *processpb.StartRequest {
	req := cmd(name, args...)
	req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: cols, Rows: rows}}
	return req
}

// ptyProc is a process started on a pty, its output gathered as it comes.
type ptyProc struct {
	t    *testing.T
	conn *agentconn.Conn
	sel  *processpb.ProcessSelector
	pid  uint32

	mu     sync.Mutex // guards the fields below
	out    strings.Builder
	other  int // stdout or stderr events: a pty process must have none
	end    *processpb.ProcessEvent_EndEvent
	closed chan struct{}
}

func startPTY(t *testing.T, conn *agentconn.Conn, req *processpb.StartRequest) *ptyProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	stream, err := conn.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	if !stream.Receive() {
		t.Fatalf("start: %v", stream.Err())
	}
	p := &ptyProc{t: t, conn: conn, pid: stream.Msg().GetEvent().GetStart().GetPid(), closed: make(chan struct{})}
	p.sel = &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: p.pid}}
	go func() {
		defer close(p.closed)
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			p.mu.Lock()
			if d := ev.GetData(); d != nil {
				p.out.Write(d.GetPty())
				if d.GetStdout() != nil || d.GetStderr() != nil {
					p.other++
				}
			}
			if e := ev.GetEnd(); e != nil {
				p.end = e
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *ptyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *ptyProc) input(s string) {
	p.t.Helper()
	_, err := p.conn.Process.SendInput(context.Background(), connect.NewRequest(&processpb.SendInputRequest{
		Process: p.sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte(s)}},
	}))
	if err != nil {
		p.t.Fatalf("input %q: %v", s, err)
	}
}

func (p *ptyProc) waitOutput(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	wait.For(p.t, 20*time.Second, "pty output matching "+re, func() bool {
		m = rx.FindStringSubmatch(p.output())
		return m != nil
	})
	return m
}

func (p *ptyProc) waitEnd() *processpb.ProcessEvent_EndEvent {
	p.t.Helper()
	select {
	case <-p.closed:
	case <-time.After(30 * time.Second):
		p.t.Fatal("no end event")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end == nil {
		p.t.Fatalf("stream ended without an end event; output %q", p.out.String())
	}
	if p.other > 0 {
		p.t.Errorf("%d stdout/stderr events from a pty process", p.other)
	}
	return p.end
}

// openMasters counts this process's open pty masters.
func openMasters(t *testing.T) int {
	t.Helper()
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && (l == "/dev/ptmx" || l == "/dev/pts/ptmx") {
			n++
		}
	}
	return n
}

func TestPTYShell(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	before := openMasters(t)
	p := startPTY(t, conn, ptyReq(80, 24, "/bin/sh"))
	p.input("tty; [ -t 0 ] && [ -t 1 ] && echo IS-A-TTY; echo TERM=$TERM\n")
	p.waitOutput(`/dev/pts/\d+`)
	p.waitOutput(`IS-A-TTY\r\n`)
	p.waitOutput(`TERM=xterm-256color`)
	p.input("stty size\n")
	p.waitOutput(`24 80\r\n`)
	p.input("echo typed-in\n")
	// The terminal echoes input as typed, before the shell runs it.
	p.waitOutput(`echo typed-in\r\n`)

	_, err := conn.Process.Update(context.Background(), connect.NewRequest(&processpb.UpdateRequest{
		Process: p.sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 132, Rows: 43}},
	}))
	if err != nil {
		t.Fatalf("resize: %v", err)
	}
	p.input("stty size\n")
	p.waitOutput(`43 132\r\n`)
	if masters := openMasters(t); masters != before+1 {
		t.Errorf("open masters while running = %d, want %d", masters, before+1)
	}

	// Stdin input to a pty process goes to the master as well.
	_, err = conn.Process.SendInput(context.Background(), connect.NewRequest(&processpb.SendInputRequest{
		Process: p.sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("exit 7\n")}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if end := p.waitEnd(); end.GetExitCode() != 7 || !end.GetExited() {
		t.Errorf("end = %v, want exit code 7", end)
	}
	if masters := openMasters(t); masters != before {
		t.Errorf("open masters after the end = %d, want %d", masters, before)
	}

	// Connect with replay sends the pty's output again.
	stream, err := conn.Process.Connect(context.Background(), connect.NewRequest(&processpb.ConnectRequest{Process: p.sel, Replay: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var replay strings.Builder
	for stream.Receive() {
		replay.Write(stream.Msg().GetEvent().GetData().GetPty())
	}
	if !strings.Contains(replay.String(), "IS-A-TTY") {
		t.Errorf("replay %q lacks the pty output", replay.String())
	}
}

func TestPTYErrors(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	for _, size := range [][2]uint32{{0, 24}, {80, 0}, {1001, 24}, {80, 1001}} {
		stream, err := conn.Process.Start(ctx, connect.NewRequest(ptyReq(size[0], size[1], "/bin/true")))
		if err == nil {
			stream.Receive()
			err = stream.Err()
			stream.Close()
		}
		wantCode(t, err, connect.CodeInvalidArgument)
	}

	plain := cmd("/bin/sleep", "30")
	plain.Stdin = ptr(true)
	sp := startPTY(t, conn, plain)
	_, err := conn.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: sp.sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("x")}},
	}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = conn.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
		Process: sp.sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 80, Rows: 24}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition)

	tp := startPTY(t, conn, ptyReq(80, 24, "/bin/cat"))
	_, err = conn.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: tp.sel}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = conn.Process.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
		Process: tp.sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 2000, Rows: 24}},
	}))
	wantCode(t, err, connect.CodeInvalidArgument)
	// ^D is the terminal's end of file.
	tp.input("\x04")
	if end := tp.waitEnd(); end.GetExitCode() != 0 {
		t.Errorf("cat after ^D: end %v", end)
	}
	if _, err := conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sp.sel, Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
}

// TestPTYCap: the agent holds at most 64 ptys at once; a killed pty
// process gives its pty back.
func TestPTYCap(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	before := openMasters(t)
	var procs []*ptyProc
	for range 64 {
		procs = append(procs, startPTY(t, conn, ptyReq(80, 24, "/bin/sleep", "60")))
	}
	stream, err := conn.Process.Start(ctx, connect.NewRequest(ptyReq(80, 24, "/bin/sleep", "60")))
	if err == nil {
		stream.Receive()
		err = stream.Err()
		stream.Close()
	}
	wantCode(t, err, connect.CodeResourceExhausted)
	for _, p := range procs {
		if _, err := conn.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: p.sel, Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if end := p.waitEnd(); end.GetExitCode() != 128+9 {
			t.Errorf("pid %d: end %v, want killed", p.pid, end)
		}
	}
	if masters := openMasters(t); masters != before {
		t.Errorf("open masters after the kills = %d, want %d", masters, before)
	}
	p := startPTY(t, conn, ptyReq(80, 24, "/bin/sh", "-c", "exit 3"))
	if end := p.waitEnd(); end.GetExitCode() != 3 {
		t.Errorf("end %v, want exit code 3", end)
	}
}

// TestPTYTimeoutKillsForegroundJob: a pty's timeout kills the job an
// interactive shell runs in a process group of its own, not only the
// shell.
func TestPTYTimeoutKillsForegroundJob(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	req := ptyReq(80, 24, "/bin/sh", "-i")
	req.Process.TimeoutMs = 1500
	p := startPTY(t, conn, req)
	p.input("sleep 600; echo after\n")
	end := p.waitEnd()
	if !end.GetTimedOut() {
		t.Errorf("end %v, want timed out", end)
	}
	wait.For(t, 10*time.Second, "no sleep left", func() bool {
		for _, st := range procStats(t) {
			if data, _ := os.ReadFile("/proc/" + st.pid + "/cmdline"); st.comm == "sleep" && string(data) == "sleep\x00600\x00" {
				return false
			}
		}
		return true
	})
}
