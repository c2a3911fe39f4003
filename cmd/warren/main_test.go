package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI runs warren with args and stdin and returns its exit status and
// output.
func runCLI(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, bytes.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestUsageErrors: a command line that does not parse exits 2 with the
// usage, before any request (the server is nowhere).
func TestUsageErrors(t *testing.T) {
	t.Setenv("WARREN_URL", "http://127.0.0.1:1")
	t.Setenv("WARREN_API_KEY", "unused")
	tests := [][]string{
		{},
		{"nosuch"},
		{"create", "extra"},
		{"create", "--cpus", "many"},
		{"create", "--env", "novalue"},
		{"create", "--timeout", "-1s"},
		{"get"},
		{"get", "a", "b"},
		{"exec", "sb-1"},
		{"exec", "sb-1", "--"},
		{"exec", "--bogus", "sb-1", "--", "true"},
		{"files"},
		{"files", "nosuch"},
		{"files", "write", "sb-1"},
		{"files", "write", "--mode", "999", "sb-1", "/f"},
		{"files", "mv", "sb-1", "/a"},
		{"template", "build"},
		{"timeout", "sb-1", "soon"},
		{"rm"},
		{"secret"},
		{"secret", "set"},
		{"secret", "set", "a", "value"},
		{"create", "--rule", "a.org"},
		{"network", "sb-1", "--rule", "a.org:X"},
		{"help", "nosuch"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, "usage: warren") {
				t.Errorf("exit %d stdout %q stderr %q, want 2 and the usage on stderr", code, stdout, stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args           []string
		stdout, stderr string // what the usage printed must contain
	}{
		{[]string{"help"}, "usage: warren <command>", ""},
		{[]string{"--help"}, "usage: warren <command>", ""},
		{[]string{"help", "exec"}, "usage: warren exec [flags] ID -- CMD", ""},
		{[]string{"help", "files", "write"}, "usage: warren files write", ""},
		{[]string{"help", "files"}, "usage: warren files <command>", ""},
		{[]string{"create", "-h"}, "", "usage: warren create"},
		{[]string{"files", "rm", "-h"}, "", "usage: warren files rm"},
		{[]string{"template", "-h"}, "", "usage: warren template <command>"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != 0 || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) ||
				(tt.stdout == "" && stdout != "") || (tt.stderr == "" && stderr != "") {
				t.Errorf("exit %d stdout %q stderr %q, want 0, %q on stdout, %q on stderr", code, stdout, stderr, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestNoAPIKey(t *testing.T) {
	t.Setenv("WARREN_URL", "http://127.0.0.1:1")
	t.Setenv("WARREN_API_KEY", "")
	t.Setenv("WARREN_DATA_DIR", t.TempDir())
	code, _, stderr := runCLI(t, nil, "ls")
	if code != 1 || !strings.HasPrefix(stderr, "warren: no API key: set WARREN_API_KEY") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}
