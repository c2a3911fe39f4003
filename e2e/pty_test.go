package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// TestPTY runs a shell on a terminal in a container sandbox through the
// real daemon: input, resize, the terminal's output and exit code, and the
// CLI's exec -t.
func TestPTY(t *testing.T) {
	need(t)
	id := shared.newSandbox(t, "--runtime", "container")
	c := shared.client()
	ctx := context.Background()
	p, err := c.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"/bin/sh"}, PTY: &api.PTYSize{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, id, p.PID, strings.NewReader("tty; stty size; echo TERM=$TERM\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.ResizeProcess(ctx, id, p.PID, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, id, p.PID, strings.NewReader("stty size; exit 6\n"), false); err != nil {
		t.Fatal(err)
	}
	res, err := c.WaitProcess(ctx, id, p.PID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 6 {
		t.Errorf("exit code %d, want 6", res.ExitCode)
	}
	s, err := c.AttachProcess(ctx, id, p.PID, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	if _, err := s.Copy(&out, nil); err != nil {
		t.Fatal(err)
	}
	// The resize may land before the first stty runs: either size first.
	for _, want := range []string{"/dev/pts/", "TERM=xterm-256color\r\n", "40 120\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("terminal output %q lacks %q", out.String(), want)
		}
	}

	stdout, stderr, code := shared.cli(t, strings.NewReader("stty size; exit 3\n"), "exec", "-t", id, "--", "sh")
	if code != 3 || !strings.Contains(stdout, "24 80\r\n") {
		t.Errorf("exec -t: exit %d stdout %q stderr %q, want 3 and 24 80", code, stdout, stderr)
	}
}
