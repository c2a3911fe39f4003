package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
)

const testKey = "secret-key"

// newTestClient serves h on a test server and returns a client of it that
// retries fast.
func newTestClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", testKey, WithRetry(3, time.Millisecond))
}

// recorded is one request as the test server saw it.
type recorded struct {
	method, path, auth, contentType string
	query                           url.Values
	body                            []byte
}

func ptr[T any](v T) *T { return &v }

var (
	t0      = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sandbox = api.Sandbox{ID: "sb-1", Template: "default", Runtime: "container", Isolation: "container (shared host kernel)",
		State: api.StateRunning, CPUs: 1, MemoryMB: 512, Pids: 256, DiskMB: 1024, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	fileInfo = api.FileInfo{Name: "a b", Path: "/w/a b", Type: "file", Size: 3, Mode: 0o600, Permissions: "-rw-------",
		Owner: "u", Group: "u", ModifiedAt: t0}
)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// readAll drains an event stream into a slice.
func readAll(s *EventStream, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var evs []api.ExecEvent
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, *ev)
	}
}

// TestRoutes calls every method once against a server that records the
// request and answers a canned body, and checks both ends: the request's
// method, escaped path, query, auth and body, and the decoded answer.
func TestRoutes(t *testing.T) {
	const id = "sb-1"
	streamEvents := []api.ExecEvent{
		{Type: api.EventStart, PID: 7},
		{Type: api.EventStdout, PID: 7, Data: []byte{0, 1, 0xff, '\n'}},
		{Type: api.EventStderr, PID: 7, Data: []byte("oops")},
		{Type: api.EventEnd, PID: 7, ExitCode: ptr(3), Status: "exit status 3", DurationMs: 1.5},
	}
	var ndjson strings.Builder
	for _, ev := range streamEvents {
		ndjson.WriteString(mustJSON(ev) + "\n")
	}
	tmpl := api.Template{Name: "py", SizeBytes: 1 << 30, UsedBytes: 1 << 28, BuiltAt: t0}
	named := api.Snapshot{ID: "sn-1", Name: "nightly", SandboxID: id, Scope: api.ScopeRoot, State: api.SnapshotDurable, CreatedAt: t0}
	secret := api.Secret{ID: "sec_1", Name: "openai", Version: 2, Metadata: map[string]string{"team": "ml"}, CreatedAt: t0, UpdatedAt: t0}
	ruled := api.NetworkPolicy{Allow: []string{"api.example.com"}, Rules: map[string][]api.NetworkRule{
		"api.example.com": {{Transform: &api.Transform{Headers: map[string]string{"Authorization": "Bearer ${secrets.openai}"}}}}}}

	tests := []struct {
		name   string
		call   func(context.Context, *Client) (any, error)
		method string
		path   string
		query  url.Values
		body   string // the JSON body wanted, or the raw bytes with raw
		raw    bool
		status int
		answer string
		want   any
	}{
		{name: "health", method: "GET", path: "/healthz", answer: `{"status":"ok"}`,
			call: func(ctx context.Context, c *Client) (any, error) { return nil, c.Health(ctx) }},
		{name: "openapi", method: "GET", path: "/openapi.json", answer: `{"openapi":"3.1.0"}`,
			want: json.RawMessage(`{"openapi":"3.1.0"}`),
			call: func(ctx context.Context, c *Client) (any, error) { return c.OpenAPI(ctx) }},
		{name: "info", method: "GET", path: "/v1/info",
			answer: mustJSON(api.NodeInfo{Version: "v0", Kernel: "6.18", CloneMode: "reflink", CgroupVersion: 1,
				Runtimes: []api.RuntimeInfo{{Name: "container", Isolation: "container (shared host kernel)", Available: true}}}),
			want: &api.NodeInfo{Version: "v0", Kernel: "6.18", CloneMode: "reflink", CgroupVersion: 1,
				Runtimes: []api.RuntimeInfo{{Name: "container", Isolation: "container (shared host kernel)", Available: true}}},
			call: func(ctx context.Context, c *Client) (any, error) { return c.Info(ctx) }},
		{name: "create", method: "POST", path: "/v1/sandboxes", status: 201,
			body:   `{"template":"py","cpus":2,"memory_mb":1024,"timeout_seconds":60,"env":{"A":"1"}}`,
			answer: mustJSON(sandbox), want: &sandbox,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "py", SandboxSpec: api.SandboxSpec{CPUs: 2, MemoryMB: 1024, TimeoutSeconds: 60, Env: map[string]string{"A": "1"}}})
			}},
		{name: "get", method: "GET", path: "/v1/sandboxes/sb-1", answer: mustJSON(sandbox), want: &sandbox,
			call: func(ctx context.Context, c *Client) (any, error) { return c.GetSandbox(ctx, id) }},
		{name: "get escapes the ID", method: "GET", path: "/v1/sandboxes/a%2F..%2Fb", answer: mustJSON(sandbox), want: &sandbox,
			call: func(ctx context.Context, c *Client) (any, error) { return c.GetSandbox(ctx, "a/../b") }},
		{name: "list", method: "GET", path: "/v1/sandboxes", query: url.Values{"limit": {"1000"}}, answer: mustJSON(map[string]any{"sandboxes": []api.Sandbox{sandbox}}),
			want: []api.Sandbox{sandbox},
			call: func(ctx context.Context, c *Client) (any, error) { return c.ListSandboxes(ctx) }},
		{name: "delete", method: "DELETE", path: "/v1/sandboxes/sb-1", status: 204,
			call: func(ctx context.Context, c *Client) (any, error) { return nil, c.DeleteSandbox(ctx, id) }},
		{name: "timeout rounds up", method: "POST", path: "/v1/sandboxes/sb-1/timeout", body: `{"timeout_seconds":5401}`,
			answer: mustJSON(sandbox), want: &sandbox,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SetTimeout(ctx, id, 90*time.Minute+time.Millisecond)
			}},
		{name: "exec", method: "POST", path: "/v1/sandboxes/sb-1/exec",
			body:   `{"cmd":["ls","-l"],"cwd":"/tmp","env":{"X":"y"},"user":"u","timeout_ms":1000,"stdin":"aGk="}`,
			answer: `{"pid":7,"exit_code":2,"stdout":"out","stderr":"err","duration_ms":3}`,
			want:   &api.ExecResult{PID: 7, ExitCode: 2, Stdout: "out", Stderr: "err", DurationMs: 3},
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"ls", "-l"}, Cwd: "/tmp", Env: map[string]string{"X": "y"},
					User: "u", TimeoutMs: 1000, Stdin: []byte("hi"), Stream: true, Background: true})
			}},
		{name: "exec stream", method: "POST", path: "/v1/sandboxes/sb-1/exec", body: `{"shell":"echo hi","stream":true}`,
			answer: ndjson.String(), want: streamEvents,
			call: func(ctx context.Context, c *Client) (any, error) {
				return readAll(c.ExecStream(ctx, id, api.ExecRequest{Shell: "echo hi", Background: true}))
			}},
		{name: "start process", method: "POST", path: "/v1/sandboxes/sb-1/exec", status: 202,
			body: `{"cmd":["cat"],"background":true,"tag":"t"}`, answer: `{"pid":7,"tag":"t"}`,
			want: &api.StartedProcess{PID: 7, Tag: "t"},
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.StartProcess(ctx, id, api.ExecRequest{Cmd: []string{"cat"}, Tag: "t", Stream: true})
			}},
		{name: "list processes", method: "GET", path: "/v1/sandboxes/sb-1/processes", query: url.Values{"limit": {"1000"}},
			answer: `{"processes":[{"pid":7,"cmd":"cat","running":false,"exit_code":0}]}`,
			want:   []api.Process{{PID: 7, Cmd: "cat", ExitCode: ptr(0)}},
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ListProcesses(ctx, id) }},
		{name: "attach", method: "GET", path: "/v1/sandboxes/sb-1/processes/7/stream", query: url.Values{"replay": {"true"}},
			answer: ndjson.String(), want: streamEvents,
			call: func(ctx context.Context, c *Client) (any, error) { return readAll(c.AttachProcess(ctx, id, 7, true)) }},
		{name: "attach without replay", method: "GET", path: "/v1/sandboxes/sb-1/processes/7/stream",
			answer: ndjson.String(), want: streamEvents,
			call: func(ctx context.Context, c *Client) (any, error) { return readAll(c.AttachProcess(ctx, id, 7, false)) }},
		{name: "wait", method: "POST", path: "/v1/sandboxes/sb-1/processes/7/wait", query: url.Values{"timeout_ms": {"2000"}},
			answer: `{"pid":7,"exit_code":0,"stdout":"","stderr":"","duration_ms":9}`,
			want:   &api.ExecResult{PID: 7, DurationMs: 9},
			call:   func(ctx context.Context, c *Client) (any, error) { return c.WaitProcess(ctx, id, 7, 2*time.Second) }},
		{name: "stdin", method: "POST", path: "/v1/sandboxes/sb-1/processes/7/stdin", query: url.Values{"close": {"true"}},
			body: "raw\x00bytes", raw: true, status: 204,
			call: func(ctx context.Context, c *Client) (any, error) {
				return nil, c.WriteStdin(ctx, id, 7, strings.NewReader("raw\x00bytes"), true)
			}},
		{name: "signal", method: "POST", path: "/v1/sandboxes/sb-1/processes/7/signal", body: `{"signal":"TERM"}`, status: 204,
			call: func(ctx context.Context, c *Client) (any, error) { return nil, c.SignalProcess(ctx, id, 7, "TERM") }},
		{name: "read file", method: "GET", path: "/v1/sandboxes/sb-1/files", query: url.Values{"path": {"/w/a b&c"}},
			answer: "\x00\x01binary\xff", want: []byte("\x00\x01binary\xff"),
			call: func(ctx context.Context, c *Client) (any, error) {
				rc, err := c.ReadFile(ctx, id, "/w/a b&c")
				if err != nil {
					return nil, err
				}
				defer rc.Close()
				return io.ReadAll(rc)
			}},
		{name: "write file", method: "PUT", path: "/v1/sandboxes/sb-1/files",
			query: url.Values{"path": {"/w/a b"}, "mode": {"0600"}, "user": {"u"}},
			body:  "abc", raw: true, answer: mustJSON(fileInfo), want: &fileInfo,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.WriteFile(ctx, id, "/w/a b", strings.NewReader("abc"), 0o600, "u")
			}},
		{name: "stat", method: "GET", path: "/v1/sandboxes/sb-1/files/stat", query: url.Values{"path": {"/w/a b"}},
			answer: mustJSON(fileInfo), want: &fileInfo,
			call: func(ctx context.Context, c *Client) (any, error) { return c.StatFile(ctx, id, "/w/a b") }},
		{name: "list files", method: "GET", path: "/v1/sandboxes/sb-1/files/list", query: url.Values{"path": {"/w"}, "depth": {"2"}},
			answer: mustJSON(map[string]any{"entries": []api.FileInfo{fileInfo}}), want: []api.FileInfo{fileInfo},
			call: func(ctx context.Context, c *Client) (any, error) { return c.ListFiles(ctx, id, "/w", 2) }},
		{name: "mkdir", method: "POST", path: "/v1/sandboxes/sb-1/files/mkdir", body: `{"path":"/w/d","mode":448,"user":"u"}`,
			answer: mustJSON(fileInfo), want: &fileInfo,
			call: func(ctx context.Context, c *Client) (any, error) { return c.Mkdir(ctx, id, "/w/d", 0o700, "u") }},
		{name: "move", method: "POST", path: "/v1/sandboxes/sb-1/files/move", body: `{"source":"/a","destination":"/b"}`,
			answer: mustJSON(fileInfo), want: &fileInfo,
			call: func(ctx context.Context, c *Client) (any, error) { return c.Move(ctx, id, "/a", "/b") }},
		{name: "remove file", method: "DELETE", path: "/v1/sandboxes/sb-1/files", query: url.Values{"path": {"/w/d"}, "recursive": {"true"}},
			status: 204,
			call:   func(ctx context.Context, c *Client) (any, error) { return nil, c.RemoveFile(ctx, id, "/w/d", true) }},
		{name: "named snapshot", method: "POST", path: "/v1/sandboxes/sb-1/snapshots", status: 201,
			body: `{"name":"nightly","wait":true}`, answer: mustJSON(named), want: &named,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Snapshot(ctx, id, api.CreateSnapshotRequest{Name: "nightly", Wait: true})
			}},
		{name: "get a snapshot by name", method: "GET", path: "/v1/snapshots/nightly", answer: mustJSON(named), want: &named,
			call: func(ctx context.Context, c *Client) (any, error) { return c.GetSnapshot(ctx, "nightly") }},
		{name: "restore by name", method: "POST", path: "/v1/snapshots/nightly/restore", status: 201, body: `{"count":2}`,
			answer: mustJSON(api.RestoreResult{Sandboxes: []api.Sandbox{sandbox, sandbox}}), want: []api.Sandbox{sandbox, sandbox},
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Restore(ctx, "nightly", api.RestoreRequest{Count: 2})
			}},
		{name: "set secret", method: "PUT", path: "/v1/secrets/OpenAI", status: 201,
			body: `{"value":"sk-1","metadata":{"team":"ml"}}`, answer: mustJSON(secret), want: secret,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SetSecret(ctx, "OpenAI", api.SetSecretRequest{Value: "sk-1", Metadata: map[string]string{"team": "ml"}})
			}},
		{name: "list secrets", method: "GET", path: "/v1/secrets", answer: mustJSON(api.SecretList{Secrets: []api.Secret{secret}}),
			want: []api.Secret{secret},
			call: func(ctx context.Context, c *Client) (any, error) { return c.ListSecrets(ctx) }},
		{name: "get secret escapes the name", method: "GET", path: "/v1/secrets/a%2Fb", answer: mustJSON(secret), want: secret,
			call: func(ctx context.Context, c *Client) (any, error) { return c.GetSecret(ctx, "a/b") }},
		{name: "delete secret", method: "DELETE", path: "/v1/secrets/sec_1", status: 204,
			call: func(ctx context.Context, c *Client) (any, error) { return nil, c.DeleteSecret(ctx, "sec_1") }},
		{name: "set network with rules", method: "PUT", path: "/v1/sandboxes/sb-1/network",
			body:   `{"allow":["api.example.com"],"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${secrets.openai}"}}}]}}`,
			answer: mustJSON(api.NetworkStatus{Policy: ruled}), want: &api.NetworkStatus{Policy: ruled},
			call: func(ctx context.Context, c *Client) (any, error) { return c.SetNetwork(ctx, id, ruled) }},
		{name: "list templates", method: "GET", path: "/v1/templates", query: url.Values{"limit": {"1000"}}, answer: mustJSON(map[string]any{"templates": []api.Template{tmpl}}),
			want: []api.Template{tmpl},
			call: func(ctx context.Context, c *Client) (any, error) { return c.ListTemplates(ctx) }},
		{name: "build template", method: "POST", path: "/v1/templates/py/build",
			answer: `{"progress":"debootstrap"}` + "\n" + `{"progress":"mkfs"}` + "\n" + mustJSON(api.TemplateBuildEvent{Template: &tmpl}) + "\n",
			want:   []any{"debootstrap\nmkfs\n", &tmpl},
			call: func(ctx context.Context, c *Client) (any, error) {
				var progress strings.Builder
				got, err := c.BuildTemplate(ctx, "py", &progress)
				return []any{progress.String(), got}, err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got recorded
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got = recorded{method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization"),
					contentType: r.Header.Get("Content-Type"), query: r.URL.Query(), body: body}
				w.WriteHeader(cmp.Or(tt.status, 200))
				io.WriteString(w, tt.answer)
			}))
			res, err := tt.call(t.Context(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got.method != tt.method || got.path != tt.path {
				t.Errorf("request %s %s, want %s %s", got.method, got.path, tt.method, tt.path)
			}
			if got.auth != "Bearer "+testKey {
				t.Errorf("Authorization %q, want the bearer key", got.auth)
			}
			if len(got.query) != 0 || len(tt.query) != 0 {
				if !reflect.DeepEqual(got.query, tt.query) {
					t.Errorf("query %v, want %v", got.query, tt.query)
				}
			}
			switch {
			case tt.raw:
				if string(got.body) != tt.body || got.contentType != "application/octet-stream" {
					t.Errorf("body %q (%s), want %q (application/octet-stream)", got.body, got.contentType, tt.body)
				}
			case tt.body != "":
				if !sameJSON(got.body, tt.body) || got.contentType != "application/json" {
					t.Errorf("body %s (%s), want %s (application/json)", got.body, got.contentType, tt.body)
				}
			case len(got.body) != 0:
				t.Errorf("body %q, want none", got.body)
			}
			if !reflect.DeepEqual(res, tt.want) && !(tt.want == nil && res == nil) {
				t.Errorf("answer %#v, want %#v", res, tt.want)
			}
		})
	}
}

func sameJSON(a []byte, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

func TestEmptySandboxIDIsRefusedBeforeSending(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request sent: %s %s", r.Method, r.URL)
	}))
	if _, err := c.GetSandbox(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "empty sandbox ID") {
		t.Errorf("GetSandbox(\"\") = %v, want an empty ID error", err)
	}
	if _, err := c.BuildTemplate(t.Context(), "", nil); err == nil {
		t.Error("BuildTemplate(\"\") succeeded")
	}
	if _, err := c.SetSecret(t.Context(), "", api.SetSecretRequest{Value: "v"}); err == nil || !strings.Contains(err.Error(), "empty name") {
		t.Errorf("SetSecret(\"\") = %v, want an empty name error", err)
	}
	if _, err := c.GetSecret(t.Context(), ""); err == nil {
		t.Error("GetSecret(\"\") succeeded")
	}
	if err := c.DeleteSecret(t.Context(), ""); err == nil {
		t.Error("DeleteSecret(\"\") succeeded")
	}
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        api.Error
	}{
		{"api error", 404, "application/json", `{"error":{"code":"not_found","message":"sandbox sb-x not found"}}`,
			api.Error{Code: api.CodeNotFound, Message: "sandbox sb-x not found"}},
		{"api error with a code this client does not know", 418, "application/json", `{"error":{"code":"teapot","message":"short and stout"}}`,
			api.Error{Code: "teapot", Message: "short and stout"}},
		{"api error without message", 409, "application/json", `{"error":{"code":"conflict"}}`,
			api.Error{Code: api.CodeConflict, Message: "409 Conflict"}},
		{"proxy page", 502, "text/html", `<html>bad gateway</html>`,
			api.Error{Code: api.CodeUnavailable, Message: "502 Bad Gateway"}},
		{"plain text 404", 404, "text/plain", "404 page not found\n",
			api.Error{Code: api.CodeNotFound, Message: "404 Not Found"}},
		{"empty 401", 401, "", "", api.Error{Code: api.CodeUnauthorized, Message: "401 Unauthorized"}},
		{"JSON of another shape", 400, "application/json", `{"message":"nope"}`,
			api.Error{Code: api.CodeBadRequest, Message: "400 Bad Request"}},
		{"unknown 4xx", 429, "", "", api.Error{Code: api.CodeBadRequest, Message: "429 Too Many Requests"}},
		{"redirect", 301, "", "", api.Error{Code: api.CodeBadRequest, Message: "301 Moved Permanently"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			// POST: not retried, so 502 is seen once.
			_, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{})
			var e *api.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want an *api.Error", err, err)
			}
			if *e != tt.want {
				t.Errorf("error %+v, want %+v", *e, tt.want)
			}
			if want := "create sandbox: " + tt.want.Message; err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestHealthNotOK(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"degraded"}`)
	}))
	if err := c.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "degraded") {
		t.Errorf("Health = %v, want an error naming the status", err)
	}
}

func TestBuildTemplateFailure(t *testing.T) {
	tests := []struct{ name, answer, want string }{
		{"error event", `{"progress":"step 1"}` + "\n" + `{"error":"debootstrap failed"}` + "\n", "build template: debootstrap failed"},
		{"cut stream", `{"progress":"step 1"}` + "\n", "build template: read progress: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, tt.answer)
			}))
			var progress strings.Builder
			_, err := c.BuildTemplate(t.Context(), "py", &progress)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if progress.String() != "step 1\n" {
				t.Errorf("progress %q, want the line before the failure", progress.String())
			}
		})
	}
}

// TestConcurrentUse runs many calls at once on one Client (run with -race).
func TestConcurrentUse(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, mustJSON(api.Sandbox{ID: strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/")}))
	}))
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			id := "sb-" + string(rune('a'+i%26))
			sb, err := c.GetSandbox(t.Context(), id)
			if err != nil || sb.ID != id {
				t.Errorf("GetSandbox(%s) = %v, %v", id, sb, err)
			}
		})
	}
	wg.Wait()
}
