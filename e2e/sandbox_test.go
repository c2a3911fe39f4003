//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// The two questions the whole field starts from, answered by running code in
// the default template, through the CLI contract.
func TestTwoQuestions(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	for _, c := range []struct{ code, want string }{
		{"print(3 + 3)", "6\n"},
		{`print("strawberry".count("r"))`, "3\n"},
	} {
		out, errOut, code := shared.cli(t, nil, "exec", id, "--", "python3", "-c", c.code)
		if code != 0 || out != c.want {
			t.Errorf("python3 -c %q: stdout %q (exit %d, stderr %q), want %q", c.code, out, code, errOut, c.want)
		}
	}
}

// execContract checks the CLI's exec contract in sandbox id of daemon d,
// whatever its runtime (TestConformance runs it on each).
func execContract(t *testing.T, d *daemon, id string) {
	cases := []struct {
		name             string
		args             []string
		stdout, stderr   string
		code             int
		stderrHasNotJust bool
	}{
		{"streams separate", []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, "out\n", "err\n", 3, false},
		{"not found is 127", []string{"no-such-command"}, "", "command not found", 127, true},
		{"tools of the template", []string{"sh", "-c", "git --version >/dev/null && curl --version >/dev/null && ps -p 1 -o comm= && echo ok"}, "warren-agent\nok\n", "", 0, false},
		{"runs as user", []string{"--user", "user", "id", "-un"}, "user\n", "", 0, false},
		{"cwd and env", []string{"--cwd", "/tmp", "--env", "A=b c", "sh", "-c", `echo "$PWD $A"`}, "/tmp b c\n", "", 0, false},
		{"timeout is 124", []string{"--timeout", "500ms", "sleep", "30"}, "", "", 124, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"exec"}
			flags, cmd := splitFlags(c.args)
			args = append(args, flags...)
			args = append(args, id, "--")
			args = append(args, cmd...)
			out, errOut, code := d.cli(t, nil, args...)
			if code != c.code || out != c.stdout {
				t.Errorf("exit %d stdout %q (stderr %q), want exit %d stdout %q", code, out, errOut, c.code, c.stdout)
			}
			if c.stderrHasNotJust {
				if !strings.Contains(errOut, c.stderr) {
					t.Errorf("stderr %q lacks %q", errOut, c.stderr)
				}
			} else if errOut != c.stderr {
				t.Errorf("stderr %q, want %q", errOut, c.stderr)
			}
		})
	}
}

// splitFlags separates leading --flag value pairs from the command.
func splitFlags(args []string) (flags, cmd []string) {
	for len(args) >= 2 && strings.HasPrefix(args[0], "--") {
		flags = append(flags, args[0], args[1])
		args = args[2:]
	}
	return flags, args
}

func TestExecStdin(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	out, errOut, code := shared.cli(t, strings.NewReader("line one\nline two\n"), "exec", "-i", id, "--", "wc", "-l")
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Errorf("wc -l with stdin: %q exit %d (%s)", out, code, errOut)
	}
}

// filesContract writes and reads back a file through the CLI in sandbox id
// of daemon d, whatever its runtime (TestConformance runs it on each).
func filesContract(t *testing.T, d *daemon, id string) {
	t.Helper()
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, errOut, code := d.cli(t, bytes.NewReader(data), "files", "write", "--mode", "0600", id, "/root/blob.bin"); code != 0 {
		t.Fatalf("files write: exit %d: %s", code, errOut)
	}
	out, errOut, code := d.cli(t, nil, "files", "read", id, "/root/blob.bin")
	if code != 0 || out != string(data) {
		t.Fatalf("files read: exit %d, %d bytes back (want %d): %s", code, len(out), len(data), errOut)
	}
	out, _, _ = d.cli(t, nil, "exec", id, "--", "stat", "-c", "%a %s", "/root/blob.bin")
	if out != "600 3145728\n" {
		t.Errorf("stat in sandbox: %q", out)
	}
}

func TestFilesLarge(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	c := shared.client()
	ctx := context.Background()
	const size = 256 << 20
	if _, err := c.WriteFile(ctx, id, "/root/big", io.LimitReader(zeroReader{}, size), 0o644, ""); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadFile(ctx, id, "/root/big")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != size {
		t.Fatalf("read back %d bytes (err %v), want %d", n, err, size)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestBackgroundProcess(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	c := shared.client()
	ctx := context.Background()
	p, err := c.StartProcess(ctx, id, api.ExecRequest{Shell: "echo started; read x; echo got $x; exit 5"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, id, p.PID, strings.NewReader("hello\n"), true); err != nil {
		t.Fatal(err)
	}
	res, err := c.WaitProcess(ctx, id, p.PID, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 5 {
		t.Errorf("exit code %d, want 5", res.ExitCode)
	}
	s, err := c.AttachProcess(ctx, id, p.PID, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	if _, err := s.Copy(&out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if out.String() != "started\ngot hello\n" {
		t.Errorf("replayed output %q", out.String())
	}
}

// Bad input gets a clear 4xx with a JSON error, never a 500.
func TestBadInput(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	cases := []struct {
		name, method, path, body string
		key                      bool
		status                   int
		code                     string
	}{
		{"no key", "GET", "/v1/sandboxes", "", false, 401, api.CodeUnauthorized},
		{"unknown sandbox", "GET", "/v1/sandboxes/sb-doesnotexist", "", true, 404, api.CodeNotFound},
		{"malformed json", "POST", "/v1/sandboxes", `{"template":`, true, 400, api.CodeBadRequest},
		{"unknown field", "POST", "/v1/sandboxes", `{"tempalte":"default"}`, true, 400, api.CodeBadRequest},
		{"negative memory", "POST", "/v1/sandboxes", `{"memory_mb":-5}`, true, 400, api.CodeBadRequest},
		{"absurd memory", "POST", "/v1/sandboxes", `{"memory_mb":999999999999}`, true, 400, api.CodeBadRequest},
		{"absurd cpus", "POST", "/v1/sandboxes", `{"cpus":1000}`, true, 400, api.CodeBadRequest},
		// A regression test: this many seconds once overflowed a Duration and passed.
		{"absurd timeout", "POST", "/v1/sandboxes", `{"timeout_seconds":99999999999999}`, true, 400, api.CodeBadRequest},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"nope"}`, true, 404, api.CodeNotFound},
		// Regression tests of issue 13, item 14: these were 500s.
		{"template ../etc", "POST", "/v1/sandboxes", `{"template":"../etc"}`, true, 400, api.CodeBadRequest},
		{"template A", "POST", "/v1/sandboxes", `{"template":"A"}`, true, 400, api.CodeBadRequest},
		{"template .hidden", "POST", "/v1/sandboxes", `{"template":".hidden"}`, true, 400, api.CodeBadRequest},
		{"build template ../etc", "POST", "/v1/templates/..%2Fetc/build", "", true, 400, api.CodeBadRequest},
		{"unknown runtime", "POST", "/v1/sandboxes", `{"runtime":"magic"}`, true, 400, api.CodeBadRequest},
		{"path escape", "GET", "/v1/sandboxes/" + id + "/files?path=/../../etc/shadow", "", true, 400, api.CodeBadRequest},
		{"missing file", "GET", "/v1/sandboxes/" + id + "/files?path=/nope", "", true, 404, api.CodeNotFound},
		{"exec without cmd", "POST", "/v1/sandboxes/" + id + "/exec", `{}`, true, 400, api.CodeBadRequest},
		{"negative timeout", "POST", "/v1/sandboxes/" + id + "/exec", `{"cmd":["true"],"timeout_ms":-1}`, true, 400, api.CodeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, shared.url+c.path, strings.NewReader(c.body))
			if c.key {
				req.Header.Set("Authorization", "Bearer "+shared.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body api.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("status %d, body not a JSON error: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != c.status || body.Error.Code != c.code || body.Error.Message == "" {
				t.Errorf("got %d %+v, want %d %s with a message", resp.StatusCode, body.Error, c.status, c.code)
			}
		})
	}
	// The sandbox is unharmed by all of it.
	if out, _, code := shared.cli(t, nil, "exec", id, "--", "echo", "fine"); code != 0 || out != "fine\n" {
		t.Errorf("sandbox after bad input: %q exit %d", out, code)
	}
}

func TestHealthAndOpenAPI(t *testing.T) {
	need(t)
	resp, err := http.Get(shared.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz without a key: %d", resp.StatusCode)
	}
	doc, err := shared.client().OpenAPI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(`"/v1/sandboxes/{id}/exec"`)) {
		t.Error("openapi.json does not describe the exec route")
	}
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(info.Runtimes, func(r api.RuntimeInfo) bool { return r.Name == "container" })
	if i < 0 || info.Runtimes[i].Isolation != "container (shared host kernel)" {
		t.Errorf("node info runtimes %+v: the container runtime must say it shares the host kernel", info.Runtimes)
	}
}

func TestTTLReaps(t *testing.T) {
	need(t)
	id := shared.newSandbox(t, "--timeout", "2s")
	c := shared.client()
	before := leaks(t)
	wait.For(t, 15*time.Second, "the expired sandbox to stop", func() bool {
		sb, err := c.GetSandbox(context.Background(), id)
		return err == nil && sb.State == api.StateStopped
	})
	if _, err := c.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("exec in a reaped sandbox: %v, want conflict", err)
	}
	after := leaks(t)
	if after.cgroups >= before.cgroups || after.loops >= before.loops {
		t.Errorf("reaping freed nothing: before %+v after %+v", before, after)
	}
}

func TestDeleteLeavesNothing(t *testing.T) {
	need(t)
	before := leaks(t)
	c := shared.client()
	ctx := context.Background()
	var ids []string
	for range 3 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "sleep 600 & echo x > /tmp/x"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "resources to return to their count before", func() bool {
		return leaks(t) == before
	})
	for _, id := range ids {
		if err := c.DeleteSandbox(ctx, id); err != nil && !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("second delete of %s: %v", id, err)
		}
	}
}

// The rest of the CLI contract: ls, get, info, template ls and a rebuild of
// the default template with its progress streamed (from the recipe cache, a
// few seconds), while a sandbox made from the old image keeps working.
func TestCLIListsAndTemplates(t *testing.T) {
	need(t)
	id := shared.newSandbox(t, "--meta", "run=42")
	out, errOut, code := shared.cli(t, nil, "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("warren ls: exit %d, %q %q", code, out, errOut)
	}
	out, _, code = shared.cli(t, nil, "get", id)
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != id || sb.Metadata["run"] != "42" {
		t.Errorf("warren get: exit %d, %q", code, out)
	}
	out, _, code = shared.cli(t, nil, "info")
	if code != 0 || !strings.Contains(out, "container (shared host kernel)") {
		t.Errorf("warren info: exit %d, %q", code, out)
	}
	out, _, code = shared.cli(t, nil, "template", "ls")
	if code != 0 || !strings.Contains(out, "default") {
		t.Errorf("warren template ls: exit %d, %q", code, out)
	}
	out, errOut, code = shared.cli(t, nil, "template", "build", "default")
	if code != 0 || strings.TrimSpace(out) != "default" || len(strings.Split(strings.TrimSpace(errOut), "\n")) < 3 {
		t.Errorf("warren template build: exit %d, stdout %q, progress %q", code, out, errOut)
	}
	if out, _, code := shared.cli(t, nil, "exec", id, "--", "echo", "still here"); code != 0 || out != "still here\n" {
		t.Errorf("sandbox after its template was rebuilt: %q exit %d", out, code)
	}
	if _, errOut, code := shared.cli(t, nil, "template", "build", "no-such-recipe"); code == 0 || !strings.Contains(errOut, "no recipe") {
		t.Errorf("building an unknown template: exit %d, %q", code, errOut)
	}
}

// Tenants: keys made by the admin (through the CLI) see only their own
// sandboxes; another tenant's sandbox is 404 on every route, not 403.
func TestTenants(t *testing.T) {
	need(t)
	key := func(tenant string) string {
		out, errOut, code := shared.cli(t, nil, "key", "create", tenant)
		if code != 0 || !strings.HasPrefix(out, "wk_") {
			t.Fatalf("warren key create %s: exit %d, %q %q", tenant, code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	a := client.New(shared.url, key("tenant-a"))
	b := client.New(shared.url, key("tenant-b"))
	ctx := context.Background()
	sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.DeleteSandbox(ctx, sb.ID)
	if _, err := a.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo mine > /root/f"}); err != nil {
		t.Fatal(err)
	}
	notFound := func(what string, err error) {
		if !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("tenant b, %s of tenant a's sandbox: %v, want not_found", what, err)
		}
	}
	_, err = b.GetSandbox(ctx, sb.ID)
	notFound("get", err)
	_, err = b.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
	notFound("exec", err)
	_, err = b.ReadFile(ctx, sb.ID, "/root/f")
	notFound("read file", err)
	_, err = b.WriteFile(ctx, sb.ID, "/root/f", strings.NewReader("theirs"), 0o644, "")
	notFound("write file", err)
	notFound("delete", b.DeleteSandbox(ctx, sb.ID))
	list, err := b.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == sb.ID {
			t.Error("tenant b lists tenant a's sandbox")
		}
	}
	// Node info shows a tenant its own count and not where snapshots are
	// stored (issue 13, item 13: it showed every tenant's and the blob
	// store); the admin sees both.
	for _, tc := range []struct {
		name string
		cl   *client.Client
		want int
	}{{"tenant a", a, 1}, {"tenant b", b, 0}} {
		info, err := tc.cl.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Sandboxes != tc.want || info.BlobStore != "" {
			t.Errorf("%s's info: %d sandboxes, blob store %q, %v; want %d and none", tc.name, info.Sandboxes, info.BlobStore, err, tc.want)
		}
	}
	if info, err := shared.client().Info(ctx); err != nil {
		t.Error(err)
	} else if info.BlobStore == "" || info.Sandboxes < 1 {
		t.Errorf("admin's info: %+v", info)
	}
	// Tenant a's file is untouched and its sandbox alive.
	res, err := a.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/root/f"}})
	if err != nil || res.Stdout != "mine\n" {
		t.Errorf("tenant a's sandbox after b's attempts: %+v %v", res, err)
	}
	if _, err := b.CreateKey(ctx, api.CreateKeyRequest{Tenant: "tenant-c"}); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("a tenant key made a key: %v, want forbidden", err)
	}
	// The admin lists the keys (never a key) and revokes b's: b is out at
	// once, a is not.
	out, errOut, code := shared.cli(t, nil, "key", "ls", "--json")
	var keys []api.KeyInfo
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || strings.Contains(out, "wk_") {
		t.Fatalf("warren key ls: exit %d, %q %q", code, out, errOut)
	}
	var bID string
	for _, k := range keys {
		if k.Tenant == "tenant-b" {
			bID = k.ID
		}
	}
	if _, errOut, code := shared.cli(t, nil, "key", "rm", bID); bID == "" || code != 0 {
		t.Fatalf("warren key rm %q: exit %d %s", bID, code, errOut)
	}
	if _, err := b.ListSandboxes(ctx); !api.IsCode(err, api.CodeUnauthorized) {
		t.Errorf("a revoked key: %v, want unauthorized", err)
	}
	if _, err := a.ListSandboxes(ctx); err != nil {
		t.Errorf("tenant a after b's key was revoked: %v", err)
	}
	// The admin sees tenant a's sandbox among every tenant's, and deletes
	// it (issue 13, item 15).
	out, errOut, code = shared.cli(t, nil, "ls", "--all-tenants")
	if code != 0 || !regexp.MustCompile(`(?m)^tenant-a +`+sb.ID+` `).MatchString(out) {
		t.Errorf("warren ls --all-tenants: exit %d, %q %q; want tenant-a's %s", code, out, errOut, sb.ID)
	}
	if _, errOut, code := shared.cli(t, nil, "rm", "--all-tenants", sb.ID); code != 0 {
		t.Errorf("warren rm --all-tenants %s: exit %d %s", sb.ID, code, errOut)
	}
	if got, err := a.GetSandbox(ctx, sb.ID); err != nil || got.State != api.StateStopped {
		t.Errorf("tenant a's sandbox after the admin deleted it: %+v %v; want it stopped", got, err)
	}
}
