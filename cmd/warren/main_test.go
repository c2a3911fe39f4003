package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// runCLI runs warren with args and stdin and returns its exit status and
// output.
func runCLI(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, bytes.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCreatePrintsIDAlone(t *testing.T) {
	f := newFake(t)
	code, stdout, stderr := runCLI(t, nil, "create", "--template", "py", "--runtime", "container", "--cpus", "1.5",
		"--memory", "512", "--pids", "64", "--disk", "2048", "--timeout", "30m", "--env", "A=1", "--env", "B=x=y", "--meta", "owner=me")
	if code != 0 || stdout != "sb-1\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the ID alone", code, stdout, stderr)
	}
	want := api.CreateSandboxRequest{Template: "py", DiskMB: 2048, SandboxSpec: api.SandboxSpec{
		Runtime: "container", CPUs: 1.5, MemoryMB: 512, Pids: 64, TimeoutSeconds: 1800,
		Env: map[string]string{"A": "1", "B": "x=y"}, Metadata: map[string]string{"owner": "me"}}}
	f.with(func() {
		if len(f.creates) != 1 || !reflect.DeepEqual(f.creates[0], want) {
			t.Errorf("requests %+v, want %+v", f.creates, want)
		}
	})
	// Defaults: nothing set, the server decides.
	if code, stdout, _ := runCLI(t, nil, "create"); code != 0 || stdout != "sb-2\n" {
		t.Errorf("bare create: exit %d stdout %q", code, stdout)
	}
	f.with(func() {
		if !reflect.DeepEqual(f.creates[1], api.CreateSandboxRequest{}) {
			t.Errorf("bare create sent %+v, want an empty request", f.creates[1])
		}
	})
}

func TestExecExitStatus(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	tests := []struct {
		name           string
		args           []string
		want           int
		stdout, stderr string
	}{
		{"success", []string{"--", "echo", "hello", "world"}, 0, "hello world\n", ""},
		{"without --", []string{"echo", "hi"}, 0, "hi\n", ""},
		{"exit 3", []string{"--", "exit", "3"}, 3, "", ""},
		{"not found", []string{"--", "nosuch"}, 127, "", "nosuch: not found\n"},
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

func TestExecExactBytes(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"exec", id, "--", "binary"}, strings.NewReader(""), &out, &errOut)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	if code != 0 || !bytes.Equal(out.Bytes(), all) || errOut.String() != "\xff\xfe\x00err" {
		t.Errorf("exit %d stdout %q stderr %q, want 0, every byte value, and the raw stderr", code, out.Bytes(), errOut.Bytes())
	}
}

func TestExecInteractiveForwardsStdin(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	in := make([]byte, 1<<20)
	rand.Read(in)
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"exec", "-i", id, "--", "cat"}, bytes.NewReader(in), &out, &errOut)
	if code != 0 || !bytes.Equal(out.Bytes(), in) {
		t.Errorf("exit %d, %d bytes out (equal %v), stderr %q; want 0 and stdin back", code, out.Len(), bytes.Equal(out.Bytes(), in), errOut.String())
	}
	f.with(func() {
		if !reflect.DeepEqual(f.replays, []string{"true"}) {
			t.Errorf("attach replay %q, want [true]", f.replays)
		}
	})
	// Without -i the command gets no stdin.
	code, stdout, _ := runCLI(t, []byte("ignored"), "exec", id, "--", "cat")
	if code != 0 || stdout != "" {
		t.Errorf("without -i: exit %d stdout %q, want 0 and nothing", code, stdout)
	}
}

// TestExecInteractiveInterruptKills: on Ctrl-C the background process is
// killed, not left running unattended.
func TestExecInteractiveInterruptKills(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdin, feed := io.Pipe() // stdin that never ends
	defer feed.Close()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"exec", "-i", id, "--", "forever"}, stdin, &out, &errOut) }()
	select {
	case <-f.attached:
	case <-time.After(10 * time.Second):
		t.Fatal("never attached")
	}
	cancel()
	if code := <-done; code != 130 || errOut.String() != "warren: interrupted\n" {
		t.Errorf("exit %d stderr %q, want 130 and interrupted", code, errOut.String())
	}
	f.with(func() {
		if !reflect.DeepEqual(f.signals, []string{"KILL"}) {
			t.Errorf("signals %q, want [KILL]", f.signals)
		}
	})
}

func TestFilesByteExact(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	data := make([]byte, 3<<20+7)
	rand.Read(data)
	if code, stdout, stderr := runCLI(t, data, "files", "write", "--mode", "0600", id, "/w/blob.bin"); code != 0 || stdout != "" {
		t.Fatalf("write: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	f.with(func() {
		if got := f.files[id+":/w/blob.bin"]; !bytes.Equal(got, data) || f.fileModes[id+":/w/blob.bin"] != "0600" {
			t.Errorf("server holds %d bytes (equal %v) mode %q, want %d and 0600", len(got), bytes.Equal(got, data), f.fileModes[id+":/w/blob.bin"], len(data))
		}
	})
	code, stdout, stderr := runCLI(t, nil, "files", "read", id, "/w/blob.bin")
	if code != 0 || stdout != string(data) {
		t.Errorf("read: exit %d, %d bytes (equal %v), stderr %q", code, len(stdout), stdout == string(data), stderr)
	}
	if code, _, stderr := runCLI(t, nil, "files", "read", id, "/nope"); code != 1 || stderr != "warren: read file: /nope not found\n" {
		t.Errorf("read of a missing file: exit %d stderr %q", code, stderr)
	}
}

func TestFilesCommands(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	f.with(func() { f.files[id+":/w/a"] = []byte("abc") })

	code, stdout, _ := runCLI(t, nil, "files", "stat", id, "/w/a")
	var fi api.FileInfo
	if code != 0 || json.Unmarshal([]byte(stdout), &fi) != nil || fi.Size != 3 || fi.Path != "/w/a" {
		t.Errorf("stat: exit %d stdout %q", code, stdout)
	}
	if code, stdout, _ := runCLI(t, nil, "files", "ls", id, "/w"); code != 0 || !strings.Contains(stdout, "-rw-r--r-- root root 3") || !strings.HasSuffix(stdout, " a\n") {
		t.Errorf("ls: exit %d stdout %q", code, stdout)
	}
	var entries []api.FileInfo
	if code, stdout, _ := runCLI(t, nil, "files", "ls", "--json", id, "/w"); code != 0 || json.Unmarshal([]byte(stdout), &entries) != nil || len(entries) != 1 {
		t.Errorf("ls --json: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "files", "mkdir", "--mode", "700", id, "/w/d"); code != 0 {
		t.Errorf("mkdir: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "files", "mv", id, "/w/a", "/w/b"); code != 0 {
		t.Errorf("mv: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "files", "rm", "-r", id, "/w/b"); code != 0 {
		t.Errorf("rm: exit %d stderr %q", code, stderr)
	}
	f.with(func() {
		if len(f.files) != 0 || !reflect.DeepEqual(f.removes, []string{"/w/b recursive=true"}) {
			t.Errorf("files %q removes %q, want none left after mv and rm -r of /w/b", f.files, f.removes)
		}
	})
}

func TestRemove(t *testing.T) {
	f := newFake(t)
	a := f.addSandbox(api.CreateSandboxRequest{}).ID
	b := f.addSandbox(api.CreateSandboxRequest{}).ID
	code, stdout, stderr := runCLI(t, nil, "rm", a, "sb-nope", b)
	if code != 1 || stdout != "" {
		t.Errorf("exit %d stdout %q, want 1 and nothing", code, stdout)
	}
	want := "warren: rm sb-nope: delete sandbox: sandbox sb-nope not found\nwarren: could not delete sb-nope\n"
	if stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	f.with(func() {
		if len(f.sandboxes) != 0 {
			t.Errorf("sandboxes left: %v", f.sandboxes)
		}
	})
}

func TestSandboxCommands(t *testing.T) {
	f := newFake(t)
	sb := f.addSandbox(api.CreateSandboxRequest{Template: "default", SandboxSpec: api.SandboxSpec{TimeoutSeconds: 60}})

	code, stdout, _ := runCLI(t, nil, "ls")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID TEMPLATE RUNTIME STATE CREATED EXPIRES" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), sb.ID+" default container running ") {
		t.Errorf("ls: exit %d stdout %q", code, stdout)
	}
	var list []api.Sandbox
	if code, stdout, _ := runCLI(t, nil, "ls", "--json"); code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("ls --json: exit %d stdout %q", code, stdout)
	}
	// An ended sandbox shows only with --all.
	gone := f.addSandbox(api.CreateSandboxRequest{Template: "default"})
	f.with(func() {
		s := f.sandboxes[gone.ID]
		s.State = api.StateStopped
		f.sandboxes[gone.ID] = s
	})
	if _, stdout, _ := runCLI(t, nil, "ls"); strings.Contains(stdout, gone.ID) {
		t.Errorf("ls lists a stopped sandbox: %q", stdout)
	}
	if _, stdout, _ := runCLI(t, nil, "ls", "--all"); !strings.Contains(stdout, gone.ID) || !strings.Contains(stdout, sb.ID) {
		t.Errorf("ls --all: %q, want both sandboxes", stdout)
	}
	f.with(func() { delete(f.sandboxes, gone.ID) })
	var got api.Sandbox
	if code, stdout, _ := runCLI(t, nil, "get", sb.ID); code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || !reflect.DeepEqual(got, sb) {
		t.Errorf("get: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "get", "sb-nope"); code != 1 || stderr != "warren: get sandbox: sandbox sb-nope not found\n" {
		t.Errorf("get unknown: exit %d stderr %q", code, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "timeout", sb.ID, "1h")
	expires, err := time.Parse(time.RFC3339, strings.TrimSpace(stdout))
	if code != 0 || err != nil || !expires.Equal(sb.CreatedAt.Add(time.Hour)) {
		t.Errorf("timeout: exit %d stdout %q", code, stdout)
	}
}

func TestInfoAndTemplates(t *testing.T) {
	newFake(t)
	code, stdout, _ := runCLI(t, nil, "info")
	for _, want := range []string{"container (shared host kernel)", "available", "unavailable: no usable KVM", "reflink (xfs loop image)", "v1"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("info: exit %d, stdout %q lacks %q", code, stdout, want)
		}
	}
	code, stdout, stderr := runCLI(t, nil, "template", "build", "py")
	if code != 0 || stdout != "py\n" || stderr != "debootstrap bookworm\nmkfs.ext4\n" {
		t.Errorf("template build: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, nil, "template", "ls"); code != 0 || !strings.Contains(stdout, "default") || !strings.Contains(stdout, "1024.0 MiB") {
		t.Errorf("template ls: exit %d stdout %q", code, stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	newFake(t)
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
