//go:build linux

package main

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/wait"
)

// buildAgent builds the static binary as shipped, once per test binary.
var buildAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "warren-agent-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "warren-agent")
	cmd := exec.Command("go", "build", "-ldflags", "-s -w -X main.version=test", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildAgent(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

func TestBinaryIsStatic(t *testing.T) {
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs %v", libs)
	}
	fi, _ := os.Stat(bin)
	t.Logf("warren-agent: %.1f MiB", float64(fi.Size())/(1<<20))
}

// agentAsInit runs the binary as PID 1 of new pid, mount (with its own
// /proc) and uts namespaces, serving on a unix socket.
func agentAsInit(t *testing.T) (*agentconn.Conn, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make pid and mount namespaces")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--uts", bin, "--listen", "unix:"+sock, "--mode", "container")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	conn := agentconn.DialUnix(sock)
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return conn, cmd, &logs
}

func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("agent did not exit within %v", timeout)
		return nil
	}
}

func sh(script string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

func TestAsPID1ReapsOrphansAndShutsDown(t *testing.T) {
	conn, cmd, _ := agentAsInit(t)
	ctx := context.Background()
	info, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if info.Msg.GetPid() != 1 || info.Msg.GetVersion() != "test" {
		t.Fatalf("info %v: want pid 1, version test", info.Msg)
	}
	if _, err := conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{Hostname: "warren-sb", SandboxId: "sb-t"})); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, _, err := conn.Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "hostname"}}, &out, nil); err != nil || out.String() != "warren-sb\n" {
		t.Errorf("hostname after Init: %q %v", out.String(), err)
	}

	// Orphans: the shells exit at once, their children are reparented to
	// the agent (PID 1), which must reap them.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			end, _, err := conn.Run(ctx, sh("sleep 0.1 & (sleep 0.2 &) ; exit 0"), nil, nil)
			if err != nil || end.GetExitCode() != 0 {
				t.Errorf("orphan maker: %v %v", end, err)
			}
		})
	}
	wg.Wait()
	wait.For(t, 10*time.Second, "no zombie and no sleep left in the namespace", func() bool {
		var ps bytes.Buffer
		_, _, err := conn.Run(ctx, sh(`for f in /proc/[0-9]*/stat; do cat "$f" 2>/dev/null; echo; done`), &ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		zombies, sleeps := 0, 0
		for line := range strings.Lines(ps.String()) {
			i := strings.LastIndexByte(line, ')')
			if i < 0 {
				continue
			}
			if fields := strings.Fields(line[i+1:]); len(fields) > 0 && fields[0] == "Z" {
				zombies++
			}
			if strings.Contains(line, "(sleep)") {
				sleeps++
			}
		}
		return zombies == 0 && sleeps == 0
	})

	// Shutdown terminates everything and the agent (PID 1) exits 0.
	bg, err := conn.Process.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close()
	if _, err := conn.Control.Shutdown(ctx, connect.NewRequest(&controlpb.ShutdownRequest{GraceMs: 1000})); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 15*time.Second); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}

func TestAsPID1SIGTERM(t *testing.T) {
	conn, cmd, _ := agentAsInit(t)
	ctx := context.Background()
	if _, _, err := conn.Run(ctx, sh("sleep 60 >/dev/null 2>&1 & exit 0"), nil, nil); err != nil {
		t.Fatal(err)
	}
	// The agent is unshare's child; signal it in its namespace, as a
	// container runtime stopping the container does.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var agentPID int
	if _, err := fmt.Sscan(string(data), &agentPID); err != nil {
		t.Fatalf("agent pid from %q: %v", data, err)
	}
	if err := syscall.Kill(agentPID, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Nothing to poll for when a signal is ignored: give it time to act.
	time.Sleep(200 * time.Millisecond)
	if _, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{})); err != nil {
		t.Fatalf("PID 1 did not ignore SIGINT: %v", err)
	}
	if err := syscall.Kill(agentPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 20*time.Second); err != nil {
		t.Errorf("agent exit after SIGTERM: %v", err)
	}
}

func TestListenFlags(t *testing.T) {
	for _, spec := range []string{"", "udp:x", "unix:", "nonsense"} {
		if _, err := listener(-1, spec); err == nil {
			t.Errorf("listener(%q) accepted", spec)
		}
	}
	if _, err := listener(3, "unix:/x"); err == nil {
		t.Error("both --listen-fd and --listen accepted")
	}
	if code := run([]string{"--mode", "bogus", "--listen", "tcp:127.0.0.1:0"}); code != 2 {
		t.Errorf("bad mode: exit %d", code)
	}
}

// TestReserveThreads: the spare threads exist once reserveThreads returns,
// and stay, idle, after the goroutines that made them are gone.
func TestReserveThreads(t *testing.T) {
	reserveThreads(16)
	time.Sleep(100 * time.Millisecond) // time for the threads to go, which they must not
	runtime.GC()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if n < 17 {
		t.Errorf("%d threads after reserving 16, want at least 17", n)
	}
}

// TestLogsInUTC: the agent never loads a local time zone, whose file is on
// a sandbox's cold disk when it starts; its log's times are UTC whatever
// TZ says.
func TestLogsInUTC(t *testing.T) {
	if _, err := os.Stat("/usr/share/zoneinfo/Asia/Tokyo"); err != nil {
		t.Skip("no tzdata to set another zone with:", err)
	}
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode", "bogus")
	cmd.Env = []string{"TZ=Asia/Tokyo"}
	out, _ := cmd.CombinedOutput()
	m := regexp.MustCompile(`time=(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no time in the agent's log:\n%s", out)
	}
	if !strings.HasSuffix(string(m[1]), "Z") {
		t.Errorf("log time %s is not UTC", m[1])
	}
}
