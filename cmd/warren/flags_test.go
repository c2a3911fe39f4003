package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"warren/api"
)

// TestParseFlagsAnywhere pins parse: flags among the positional arguments
// parse as before them, and "--" ends the flags.
func TestParseFlagsAnywhere(t *testing.T) {
	tests := []struct {
		args []string
		want []string
		wait bool
		cwd  string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, false, ""},
		{[]string{"--wait", "a"}, []string{"a"}, true, ""},
		{[]string{"a", "--wait"}, []string{"a"}, true, ""},
		{[]string{"a", "-cwd", "/d", "b"}, []string{"a", "b"}, false, "/d"},
		{[]string{"a", "--cwd=/d", "b", "-wait"}, []string{"a", "b"}, true, "/d"},
		{[]string{"a", "--wait=false", "b"}, []string{"a", "b"}, false, ""},
		{[]string{"a", "--", "--wait", "-x", "--"}, []string{"a", "--wait", "-x", "--"}, false, ""},
		{[]string{"--", "-a"}, []string{"-a"}, false, ""},
		{[]string{"a", "--cwd", "--", "b"}, []string{"a", "b"}, false, "--"}, // a flag's value is no terminator
		{[]string{"-", "a"}, []string{"-", "a"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			wait := fs.Bool("wait", false, "")
			cwd := fs.String("cwd", "", "")
			got, err := parse(fs, tt.args, 0, -1)
			if err != nil || !reflect.DeepEqual(got, tt.want) || *wait != tt.wait || *cwd != tt.cwd {
				t.Errorf("got %q, -wait %v, -cwd %q, err %v; want %q, %v, %q", got, *wait, *cwd, err, tt.want, tt.wait, tt.cwd)
			}
		})
	}
}

func TestParseBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"a", "--bogus"},
		{"a", "--cwd"}, // no value
		{"a", "---cwd", "x"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("cwd", "", "")
		if got, err := parse(fs, args, 0, -1); err == nil {
			t.Errorf("parse %q = %q, want an error", args, got)
		}
	}
}

// TestFlagsAfterArguments is the bug where a flag after the first argument
// printed the usage and failed: the three examples.
func TestFlagsAfterArguments(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID

	code, stdout, stderr := runCLI(t, nil, "snapshot", id, "--wait", "--scope", "workspace")
	if code != 0 || stdout != "snap-1\n" {
		t.Fatalf("snapshot ID --wait: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	f.with(func() {
		want := api.CreateSnapshotRequest{Scope: "workspace", Wait: true}
		if !reflect.DeepEqual(f.snapshots, []api.CreateSnapshotRequest{want}) {
			t.Errorf("snapshot requests %+v, want %+v", f.snapshots, want)
		}
	})

	code, stdout, stderr = runCLI(t, nil, "restore", "snap-1", "--count", "3", "--timeout", "1m")
	if code != 0 || len(strings.Fields(stdout)) != 3 {
		t.Fatalf("restore SNAP --count 3: exit %d stdout %q stderr %q, want 3 IDs", code, stdout, stderr)
	}
	f.with(func() {
		want := api.RestoreRequest{Count: 3, SandboxSpec: api.SandboxSpec{TimeoutSeconds: 60}}
		if !reflect.DeepEqual(f.restores, []api.RestoreRequest{want}) {
			t.Errorf("restore requests %+v, want %+v", f.restores, want)
		}
	})

	// -timeout is warren's: the fake's sleep times out only when given one.
	code, stdout, stderr = runCLI(t, nil, "exec", id, "--timeout", "5s", "--", "sleep", "100")
	if code != 124 || stdout != "" || stderr != "warren: command timed out after 5s\n" {
		t.Errorf("exec ID --timeout 5s -- sleep: exit %d stdout %q stderr %q, want 124 and the timeout", code, stdout, stderr)
	}
}

// TestExecAfterDoubleDash: everything after "--" is the command's, flags,
// "--" and all.
func TestExecAfterDoubleDash(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	tests := []struct {
		args   []string
		stdout string
	}{
		{[]string{"exec", id, "--", "echo", "--timeout", "5s", "-i"}, "--timeout 5s -i\n"},
		{[]string{"exec", id, "--", "echo", "--", "x"}, "-- x\n"},
		{[]string{"exec", "--", id, "echo", "-n"}, "-n\n"},
		{[]string{"exec", id, "-i", "--", "echo", "-i"}, "-i\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != 0 || stdout != tt.stdout {
				t.Errorf("exit %d stdout %q stderr %q, want 0 and %q", code, stdout, stderr, tt.stdout)
			}
		})
	}
	// Without "--", the command's flags are taken for warren's: a clear
	// error and the usage, never a command run with flags missing.
	code, stdout, stderr := runCLI(t, nil, "exec", id, "echo", "-n", "x")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -n") || !strings.Contains(stderr, "usage: warren exec") {
		t.Errorf("exec ID echo -n x: exit %d stdout %q stderr %q, want 2, the bad flag and the usage", code, stdout, stderr)
	}
}
