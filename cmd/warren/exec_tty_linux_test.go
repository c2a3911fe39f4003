package main

import (
	"strings"
	"testing"

	"warren/api"
)

// TestExecTTY: with -t the command runs on a terminal; stdin that is no
// terminal is typed into it, then ^D; the exit status is the command's.
func TestExecTTY(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	code, stdout, stderr := runCLI(t, []byte("tty; stty size; exit 3\n"), "exec", "-t", id, "--", "sh")
	if code != 3 || !strings.Contains(stdout, "/dev/pts/") || !strings.Contains(stdout, "24 80\r\n") {
		t.Errorf("exit %d stdout %q stderr %q; want 3, a pts name and 24 80", code, stdout, stderr)
	}
	// ^D ends a command that reads to the end of its input.
	code, stdout, stderr = runCLI(t, []byte("abc\n"), "exec", "-t", id, "--", "cat")
	if code != 0 || strings.Count(stdout, "abc\r\n") != 2 {
		t.Errorf("cat: exit %d stdout %q stderr %q; want 0 and abc echoed, then written", code, stdout, stderr)
	}
}
