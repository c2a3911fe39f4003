package main

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/sandbox"
)

func TestCreatePrintsIDAlone(t *testing.T) {
	w := newWarren(t)
	code, stdout, stderr := runCLI(t, nil, "create", "--template", "default", "--runtime", "container", "--cpus", "1.5",
		"--memory", "512", "--pids", "64", "--timeout", "30m", "--env", "A=1", "--env", "B=x=y", "--meta", "owner=me")
	if code != 0 || !regexp.MustCompile(`^sb-[a-z0-9]+\n$`).MatchString(stdout) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the ID alone", code, stdout, stderr)
	}
	id := strings.TrimSpace(stdout)
	sb := w.get(id)
	if sb.Template != "default" || sb.Runtime != "container" || sb.CPUs != 1.5 || sb.MemoryMB != 512 || sb.Pids != 64 ||
		sb.ExpiresAt.Sub(sb.CreatedAt).Round(time.Minute) != 30*time.Minute ||
		!reflect.DeepEqual(sb.Metadata, map[string]string{"owner": "me"}) {
		t.Errorf("the sandbox made: %+v", sb)
	}
	if code, stdout, _ := runCLI(t, nil, "exec", id, "--", "sh", "-c", `echo "$A $B"`); code != 0 || stdout != "1 x=y\n" {
		t.Errorf("its environment: exit %d stdout %q, want A=1 and B=x=y", code, stdout)
	}
	// The template's disk is 64 MiB of zeros, which cannot grow: a disk
	// below it says the flag reached the server.
	if code, _, stderr := runCLI(t, nil, "create", "--disk", "32"); code != 1 || !strings.Contains(stderr, "disk_mb must be between 64 ") {
		t.Errorf("create --disk 32: exit %d stderr %q, want the server's refusal of 32 MiB", code, stderr)
	}
	// Defaults: nothing set, the server decides.
	code, stdout, _ = runCLI(t, nil, "create")
	if code != 0 || !regexp.MustCompile(`^sb-[a-z0-9]+\n$`).MatchString(stdout) {
		t.Fatalf("bare create: exit %d stdout %q", code, stdout)
	}
	sb = w.get(strings.TrimSpace(stdout))
	def := sandbox.DefaultConfig()
	if sb.Template != def.DefaultTemplate || sb.CPUs != def.DefaultCPUs || sb.MemoryMB != def.DefaultMemoryMB || sb.Pids != def.DefaultPids ||
		sb.ExpiresAt.Sub(sb.CreatedAt).Round(time.Minute) != def.DefaultTTL || sb.Env != nil || sb.Metadata != nil {
		t.Errorf("a bare create made %+v, want the server's defaults", sb)
	}
}

func TestRemove(t *testing.T) {
	w := newWarren(t)
	a := w.sandbox(api.CreateSandboxRequest{}).ID
	b := w.sandbox(api.CreateSandboxRequest{}).ID
	code, stdout, stderr := runCLI(t, nil, "rm", a, "sb-nope", b)
	if code != 1 || stdout != "" {
		t.Errorf("exit %d stdout %q, want 1 and nothing", code, stdout)
	}
	want := "warren: rm sb-nope: delete sandbox: sandbox sb-nope not found\nwarren: could not delete sb-nope\n"
	if stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	for _, id := range []string{a, b} {
		if st := w.get(id).State; st != api.StateStopped {
			t.Errorf("%s after rm: %s, want stopped", id, st)
		}
	}
}

func TestSandboxCommands(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	sb := w.sandbox(api.CreateSandboxRequest{Template: "default", SandboxSpec: api.SandboxSpec{TimeoutSeconds: 60}})

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
	gone := w.sandbox(api.CreateSandboxRequest{})
	if err := w.Manager.Delete(ctx, tenant, gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, stdout, _ := runCLI(t, nil, "ls"); strings.Contains(stdout, gone.ID) {
		t.Errorf("ls lists a stopped sandbox: %q", stdout)
	}
	if _, stdout, _ := runCLI(t, nil, "ls", "--all"); !strings.Contains(stdout, gone.ID+" ") || !strings.Contains(stdout, sb.ID+" ") {
		t.Errorf("ls --all: %q, want both sandboxes", stdout)
	}

	var got api.Sandbox
	if code, stdout, _ := runCLI(t, nil, "get", sb.ID); code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || !reflect.DeepEqual(got, viaJSON(t, w.get(sb.ID))) {
		t.Errorf("get: exit %d stdout %q, want the manager's %+v", code, stdout, w.get(sb.ID))
	}
	if code, _, stderr := runCLI(t, nil, "get", "sb-nope"); code != 1 || stderr != "warren: get sandbox: sandbox sb-nope not found\n" {
		t.Errorf("get unknown: exit %d stderr %q", code, stderr)
	}
	before := time.Now()
	code, stdout, _ = runCLI(t, nil, "timeout", sb.ID, "1h")
	expires, err := time.Parse(time.RFC3339, strings.TrimSpace(stdout))
	if code != 0 || err != nil || !expires.Equal(w.get(sb.ID).ExpiresAt.Truncate(time.Second)) ||
		expires.Before(before.Add(time.Hour).Truncate(time.Second)) || expires.After(time.Now().Add(time.Hour)) {
		t.Errorf("timeout: exit %d stdout %q, want an hour from now, as the manager has it (%v)", code, stdout, w.get(sb.ID).ExpiresAt)
	}
}

// viaJSON is v as a client decodes it.
func viaJSON[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInfoAndTemplates(t *testing.T) {
	w := newWarren(t)
	w.sandbox(api.CreateSandboxRequest{})
	code, stdout, _ := runCLI(t, nil, "info")
	for _, want := range []string{"sandboxes:   1\n", "  container  isolation: none (in-process, for tests)  available\n", "clone mode:  copy"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("info: exit %d, stdout %q lacks %q", code, stdout, want)
		}
	}
	if code, stdout, _ := runCLI(t, nil, "template", "ls"); code != 0 || !regexp.MustCompile(`\ndefault +- +ready +built in +64\.0 MiB `).MatchString(stdout) {
		t.Errorf("template ls: exit %d stdout %q", code, stdout)
	}
	// A build runs debootstrap as root: here, only the refusals.
	if code, stdout, stderr := runCLI(t, nil, "template", "build", "default"); code != 1 || stdout != "" || stderr != "warren: build template: this route needs an admin key\n" {
		t.Errorf("template build with a tenant's key: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	w.asAdmin()
	if code, stdout, stderr := runCLI(t, nil, "template", "build", "nosuch"); code != 1 || stdout != "" || !strings.Contains(stderr, `no recipe for template "nosuch"`) {
		t.Errorf("template build of no recipe: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}
