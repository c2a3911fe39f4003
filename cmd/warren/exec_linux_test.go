package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

func TestExecExitStatus(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	tests := []struct {
		name           string
		args           []string
		want           int
		stdout, stderr string
	}{
		{"success", []string{"--", "echo", "hello", "world"}, 0, "hello world\n", ""},
		{"without --", []string{"echo", "hi"}, 0, "hi\n", ""},
		{"exit 3", []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, 3, "out\n", "err\n"},
		{"timeout", []string{"--", "sleep", "100"}, 124, "", "warren: command timed out after 1s\n"},
	}
	for _, tt := range tests {
		for _, interactive := range []bool{false, true} {
			name := tt.name
			args := append([]string{"exec", "--timeout", "1s"}, id)
			if interactive {
				name += " -i"
				args = append([]string{"exec", "-i", "--timeout", "1s"}, id)
			}
			t.Run(name, func(t *testing.T) {
				code, stdout, stderr := runCLI(t, nil, append(args, tt.args...)...)
				if code != tt.want || stdout != tt.stdout || stderr != tt.stderr {
					t.Errorf("exit %d stdout %q stderr %q, want %d %q %q", code, stdout, stderr, tt.want, tt.stdout, tt.stderr)
				}
			})
		}
	}
}

// TestExecNotFound: a command that is not there exits 127 with the agent's
// word for it, as a shell does. With -i the server refuses to start it in
// the background (400, the code in its message only): warren exits 1.
func TestExecNotFound(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	code, stdout, stderr := runCLI(t, nil, "exec", id, "--", "nosuch")
	if code != 127 || stdout != "" || stderr != "warren-agent: nosuch: command not found\n" {
		t.Errorf("exec: exit %d stdout %q stderr %q, want 127 and not found", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, nil, "exec", "-i", id, "--", "nosuch")
	if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "warren: start process: cannot start nosuch: ") {
		t.Errorf("exec -i: exit %d stdout %q stderr %q, want 1 and cannot start", code, stdout, stderr)
	}
}

func TestExecExactBytes(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	dir := t.TempDir()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	rawErr := []byte("\xff\xfe\x00err")
	if err := os.WriteFile(filepath.Join(dir, "all"), all, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "err"), rawErr, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"exec", id, "--", "sh", "-c", `cat "$1"; cat "$2" >&2`, "sh", filepath.Join(dir, "all"), filepath.Join(dir, "err")},
		strings.NewReader(""), &out, &errOut)
	if code != 0 || !bytes.Equal(out.Bytes(), all) || !bytes.Equal(errOut.Bytes(), rawErr) {
		t.Errorf("exit %d stdout %q stderr %q, want 0, every byte value, and the raw stderr", code, out.Bytes(), errOut.Bytes())
	}
}

func TestExecInteractiveForwardsStdin(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	in := make([]byte, 1<<20)
	rand.Read(in)
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"exec", "-i", id, "--", "cat"}, bytes.NewReader(in), &out, &errOut)
	if code != 0 || !bytes.Equal(out.Bytes(), in) {
		t.Errorf("exit %d, %d bytes out (equal %v), stderr %q; want 0 and stdin back", code, out.Len(), bytes.Equal(out.Bytes(), in), errOut.String())
	}
	// Without -i the command gets no stdin.
	code, stdout, _ := runCLI(t, []byte("ignored"), "exec", id, "--", "cat")
	if code != 0 || stdout != "" {
		t.Errorf("without -i: exit %d stdout %q, want 0 and nothing", code, stdout)
	}
}

// TestExecInteractiveInterruptKills: on Ctrl-C the background process is
// killed, not left running unattended.
func TestExecInteractiveInterruptKills(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	cl, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdin, feed := io.Pipe() // stdin that never ends
	defer feed.Close()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"exec", "-i", id, "--", "sleep", "1000"}, stdin, &out, &errOut) }()
	var pid uint32
	wait.For(t, 10*time.Second, "sleep to run", func() bool {
		ps, _ := cl.ListProcesses(t.Context(), id)
		for _, p := range ps {
			if p.Cmd == "sleep" && p.Running {
				pid = p.PID
			}
		}
		return pid != 0
	})
	cancel()
	if code := <-done; code != 130 || errOut.String() != "warren: interrupted\n" {
		t.Errorf("exit %d stderr %q, want 130 and interrupted", code, errOut.String())
	}
	res, err := cl.WaitProcess(t.Context(), id, pid, 10*time.Second)
	if err != nil || res.Status != "signal: killed" {
		t.Errorf("the process after the interrupt: %+v, %v; want it killed", res, err)
	}
}
