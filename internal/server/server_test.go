package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/wait"
)

// deadAgent is a connection to an agent that is not there.
func deadAgent(t *testing.T) *agentconn.Conn {
	return agentconn.DialUnix(t.TempDir() + "/no-agent.sock")
}

// concrete fills a route's wildcards and gives it what it needs to get past
// input checks: query parameters and a valid body.
func concrete(rt route, id string) (path string, body any) {
	path = strings.NewReplacer("{id}", id, "{pid}", "7", "{name}", "default", "{port}", "8080", "{path...}", "x", "{tenant}", "a", "{template}", "default").Replace(rt.path)
	if strings.Contains(path, "/files") && !strings.HasSuffix(path, "/mkdir") && !strings.HasSuffix(path, "/move") {
		path += "?path=/tmp/x"
	}
	if strings.HasPrefix(rt.path, "/v1/pools/") && rt.method == "DELETE" {
		path += "?runtime=container"
	}
	switch {
	case rt.path == "/v1/sandboxes" && rt.method == "POST":
		body = "{}"
	case strings.HasPrefix(rt.path, "/v1/pools/") && rt.method == "PUT":
		body = `{"runtime":"container","min":1}`
	case strings.HasSuffix(rt.path, "/timeout"):
		body = `{"timeout_seconds":60}`
	case strings.HasSuffix(rt.path, "/quota") && rt.method == "PUT":
		body = `{"sandboxes":10}`
	case strings.HasSuffix(rt.path, "/exec"):
		body = `{"cmd":["true"]}`
	case strings.HasSuffix(rt.path, "/network") && rt.method == "PUT":
		body = `{"allow":["pypi.org"]}`
	case strings.HasSuffix(rt.path, "/preview") && rt.method == "PUT":
		body = `{"public":true}`
	case strings.HasSuffix(rt.path, "/signal"):
		body = `{"signal":"TERM"}`
	case strings.HasSuffix(rt.path, "/resize"):
		body = `{"cols":80,"rows":24}`
	case strings.HasSuffix(rt.path, "/mkdir"):
		body = `{"path":"/tmp/x"}`
	case strings.HasSuffix(rt.path, "/move"):
		body = `{"source":"/tmp/x","destination":"/tmp/y"}`
	case rt.path == "/v1/keys":
		body = `{"tenant":"t1"}`
	}
	return path, body
}

func TestHealthzNeedsNoKey(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var got map[string]string
	e.call("GET", "/healthz", "", nil, http.StatusOK, &got)
	if got["status"] != "ok" {
		t.Errorf("healthz = %v", got)
	}
}

func TestAuth(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	for _, rt := range e.srv.routes {
		if rt.access == public {
			continue
		}
		path, body := concrete(rt, sb.ID)
		for _, tc := range []struct {
			name   string
			header func(*http.Request)
			want   int
		}{
			{"no key", func(*http.Request) {}, http.StatusUnauthorized},
			{"unknown key", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wk_nope") }, http.StatusUnauthorized},
			{"empty bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, http.StatusUnauthorized},
			{"basic scheme", func(r *http.Request) { r.Header.Set("Authorization", "Basic "+e.keyA) }, http.StatusUnauthorized},
			{"unknown X-API-Key", func(r *http.Request) { r.Header.Set("X-API-Key", "wk_nope") }, http.StatusUnauthorized},
			{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.keyA) }, 0},
			{"lower-case bearer", func(r *http.Request) { r.Header.Set("Authorization", "bearer "+e.keyA) }, 0},
			{"X-API-Key", func(r *http.Request) { r.Header.Set("X-API-Key", e.keyA) }, 0},
		} {
			t.Run(rt.method+" "+rt.path+"/"+tc.name, func(t *testing.T) {
				var r io.Reader
				if body != nil {
					r = strings.NewReader(body.(string))
				}
				req, _ := http.NewRequest(rt.method, e.url+path, r)
				tc.header(req)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if tc.want == http.StatusUnauthorized {
					apiError(t, resp, http.StatusUnauthorized, api.CodeUnauthorized)
					if resp.Header.Get("WWW-Authenticate") == "" {
						t.Error("401 without WWW-Authenticate")
					}
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized {
					t.Errorf("a valid key got 401")
				}
			})
		}
	}
}

func TestAdminOnlyRoutes(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	for _, rt := range e.srv.routes {
		if rt.access != admin && rt.access != scrape {
			continue
		}
		path, body := concrete(rt, "sb-x")
		apiError(t, e.do(rt.method, path, e.keyA, body), http.StatusForbidden, api.CodeForbidden)
		resp := e.do(rt.method, path, e.admin, body)
		resp.Body.Close()
		want := resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusNoContent
		if strings.HasPrefix(rt.path, "/v1/keys/{id}") || strings.HasPrefix(rt.path, "/v1/nodes/{id}") ||
			rt.path == "/v1/templates/{ref}/shared" {
			want = resp.StatusCode == http.StatusNotFound // no key or node of that ID; no tenants' templates here
		}
		if !want {
			t.Errorf("%s %s with the admin key: status %d", rt.method, path, resp.StatusCode)
		}
	}
}

func TestTenantIsolation(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, `{"template":"default"}`, http.StatusCreated, &sb)
	tested := 0
	for _, rt := range e.srv.routes {
		if !strings.Contains(rt.path, "{id}") || rt.access == admin || rt.access == scrape {
			continue // a sandbox's or a snapshot's ID, not a key's or a node's
		}
		tested++
		path, body := concrete(rt, sb.ID)
		for _, key := range []string{e.keyB, e.admin} {
			resp := e.do(rt.method, path, key, body)
			if got := apiError(t, resp, http.StatusNotFound, api.CodeNotFound); !strings.Contains(got.Message, sb.ID) {
				t.Errorf("%s %s: message %q does not name the sandbox", rt.method, path, got.Message)
			}
		}
	}
	if tested < 15 {
		t.Errorf("only %d routes take a sandbox id", tested)
	}
	for _, key := range []string{e.keyB, e.admin} {
		var list struct{ Sandboxes []api.Sandbox }
		e.call("GET", "/v1/sandboxes", key, nil, http.StatusOK, &list)
		if len(list.Sandboxes) != 0 {
			t.Errorf("another tenant lists %v", list.Sandboxes)
		}
	}
	// The owner still sees it.
	e.call("GET", "/v1/sandboxes/"+sb.ID, e.keyA, nil, http.StatusOK, nil)
}

func TestSandboxLifecycle(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var list struct{ Sandboxes []api.Sandbox }
	resp := e.do("GET", "/v1/sandboxes", e.keyA, nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(raw)) != `{"sandboxes":[]}` {
		t.Errorf("empty list = %s, want an empty array", raw)
	}

	var a, b api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "", http.StatusCreated, &a)
	e.call("POST", "/v1/sandboxes", e.keyA, api.CreateSandboxRequest{Template: "py", SandboxSpec: api.SandboxSpec{MemoryMB: 256, Env: map[string]string{"X": "1"}}}, http.StatusCreated, &b)
	if a.Template != "default" || b.Template != "py" || b.MemoryMB != 256 || b.Env["X"] != "1" || b.State != api.StateRunning {
		t.Errorf("created %+v and %+v", a, b)
	}
	e.call("GET", "/v1/sandboxes", e.keyA, nil, http.StatusOK, &list)
	if len(list.Sandboxes) != 2 || list.Sandboxes[0].ID != a.ID || list.Sandboxes[1].ID != b.ID {
		t.Errorf("list = %+v", list.Sandboxes)
	}
	var got api.Sandbox
	e.call("GET", "/v1/sandboxes/"+b.ID, e.keyA, nil, http.StatusOK, &got)
	if got.ID != b.ID || got.Template != "py" {
		t.Errorf("get = %+v", got)
	}

	e.call("POST", "/v1/sandboxes/"+b.ID+"/timeout", e.keyA, api.SetTimeoutRequest{TimeoutSeconds: 7200}, http.StatusOK, &got)
	if d := time.Until(got.ExpiresAt); d < 119*time.Minute || d > 121*time.Minute {
		t.Errorf("expires in %v, want about 2h", d)
	}
	for _, secs := range []string{"0", "-5", "9223372036854775807"} {
		apiError(t, e.do("POST", "/v1/sandboxes/"+b.ID+"/timeout", e.keyA, `{"timeout_seconds":`+secs+`}`), http.StatusBadRequest, api.CodeBadRequest)
	}

	var m api.SandboxMetrics
	e.call("GET", "/v1/sandboxes/"+b.ID+"/metrics", e.keyA, nil, http.StatusOK, &m)
	if m.CPUCount != 2 || m.MemoryTotalBytes != 512<<20 || m.At.IsZero() {
		t.Errorf("metrics = %+v", m)
	}
	apiError(t, e.do("GET", "/v1/sandboxes/"+b.ID+"/metrics", e.keyB, nil), http.StatusNotFound, api.CodeNotFound)

	e.call("POST", "/v1/sandboxes/"+b.ID+"/pause", e.keyA, nil, http.StatusOK, &got)
	if got.State != api.StatePaused {
		t.Errorf("pause: state %q", got.State)
	}
	apiError(t, e.do("GET", "/v1/sandboxes/"+b.ID+"/metrics", e.keyA, nil), http.StatusConflict, api.CodeConflict)
	apiError(t, e.do("POST", "/v1/sandboxes/"+b.ID+"/pause", e.keyA, nil), http.StatusConflict, api.CodeConflict)
	apiError(t, e.do("POST", "/v1/sandboxes/"+b.ID+"/resume", e.keyB, nil), http.StatusNotFound, api.CodeNotFound)
	e.call("POST", "/v1/sandboxes/"+b.ID+"/resume", e.keyA, nil, http.StatusOK, &got)
	if got.State != api.StateRunning {
		t.Errorf("resume: state %q", got.State)
	}
	apiError(t, e.do("POST", "/v1/sandboxes/"+b.ID+"/resume", e.keyA, nil), http.StatusConflict, api.CodeConflict)

	resp = e.do("DELETE", "/v1/sandboxes/"+a.ID, e.keyA, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: status %d", resp.StatusCode)
	}
	apiError(t, e.do("GET", "/v1/sandboxes/"+a.ID, e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, e.do("DELETE", "/v1/sandboxes/"+a.ID, e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
}

func TestInfoAndTemplates(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var info api.NodeInfo
	e.call("GET", "/v1/info", e.keyA, nil, http.StatusOK, &info)
	if info.Version != "test" || len(info.Runtimes) != 1 {
		t.Errorf("info = %+v", info)
	}
	var tl struct{ Templates []api.Template }
	e.call("GET", "/v1/templates", e.keyA, nil, http.StatusOK, &tl)
	if len(tl.Templates) != 1 || tl.Templates[0].Name != "default" {
		t.Errorf("templates = %+v", tl)
	}
	resp := e.do("GET", "/openapi.json", e.keyA, nil)
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc["openapi"] == nil {
		t.Errorf("openapi.json: %v, %v", doc["openapi"], err)
	}
}

func TestBadInput(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	box := "/v1/sandboxes/" + sb.ID
	deep := strings.Repeat(`{"env":`, 10000) + strings.Repeat("}", 10000)
	deeper := strings.Repeat(`{"env":`, 100000) + strings.Repeat("}", 100000)
	deepArray := `{"cmd":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		status       int
		code         string
		msg          string // a substring of the message
	}{
		{"malformed JSON", "POST", "/v1/sandboxes", `{"cpus":`, 400, api.CodeBadRequest, "malformed JSON"},
		{"syntax error", "POST", "/v1/sandboxes", `{"cpus" 1}`, 400, api.CodeBadRequest, "malformed JSON"},
		{"unknown field", "POST", "/v1/sandboxes", `{"foo":1}`, 400, api.CodeBadRequest, `unknown field "foo"`},
		{"wrong type", "POST", "/v1/sandboxes", `{"cpus":"two"}`, 400, api.CodeBadRequest, `"cpus"`},
		{"two values", "POST", "/v1/sandboxes", `{} {}`, 400, api.CodeBadRequest, "more than one value"},
		{"trailing garbage", "POST", "/v1/sandboxes", `{} x`, 400, api.CodeBadRequest, "malformed JSON"},
		{"not an object", "POST", "/v1/sandboxes", `[1]`, 400, api.CodeBadRequest, "JSON object"},
		{"null", "POST", "/v1/sandboxes", `null`, 400, api.CodeBadRequest, "JSON object"},
		{"deep nesting", "POST", "/v1/sandboxes", deep, 400, api.CodeBadRequest, ""},
		{"deeper nesting", "POST", "/v1/sandboxes", deeper, 400, api.CodeBadRequest, "exceeded max depth"},
		{"deep array", "POST", box + "/exec", deepArray, 400, api.CodeBadRequest, ""},
		{"oversized body", "POST", "/v1/sandboxes", `{"metadata":{"a":"` + strings.Repeat("x", 2<<20) + `"}}`, 413, api.CodeTooLarge, "larger than"},
		{"negative memory", "POST", "/v1/sandboxes", `{"memory_mb":-1}`, 400, api.CodeBadRequest, "memory_mb must not be negative"},
		{"negative disk", "POST", "/v1/sandboxes", `{"disk_mb":-10}`, 400, api.CodeBadRequest, "disk_mb must not be negative"},
		{"empty exec body", "POST", box + "/exec", ``, 400, api.CodeBadRequest, "empty request body"},
		{"neither cmd nor shell", "POST", box + "/exec", `{}`, 400, api.CodeBadRequest, "cmd or shell"},
		{"cmd and shell", "POST", box + "/exec", `{"cmd":["ls"],"shell":"ls"}`, 400, api.CodeBadRequest, "not both"},
		{"empty argv0", "POST", box + "/exec", `{"cmd":[""]}`, 400, api.CodeBadRequest, "cmd[0]"},
		{"NUL in arg", "POST", box + "/exec", `{"cmd":["ls","a\u0000b"]}`, 400, api.CodeBadRequest, "NUL"},
		{"NUL in shell", "POST", box + "/exec", `{"shell":"ls\u0000"}`, 400, api.CodeBadRequest, "NUL"},
		{"negative timeout", "POST", box + "/exec", `{"shell":"ls","timeout_ms":-1}`, 400, api.CodeBadRequest, "timeout_ms"},
		{"timeout over a day", "POST", box + "/exec", `{"shell":"ls","timeout_ms":86400001}`, 400, api.CodeBadRequest, "timeout_ms"},
		{"env name with =", "POST", box + "/exec", `{"shell":"ls","env":{"A=B":"1"}}`, 400, api.CodeBadRequest, "env name"},
		{"empty env name", "POST", box + "/exec", `{"shell":"ls","env":{"":"1"}}`, 400, api.CodeBadRequest, "env name"},
		{"NUL in env value", "POST", box + "/exec", `{"shell":"ls","env":{"A":"\u0000"}}`, 400, api.CodeBadRequest, "NUL"},
		{"NUL in user", "POST", box + "/exec", `{"shell":"ls","user":"ro\u0000ot"}`, 400, api.CodeBadRequest, "user"},
		{"NUL in cwd", "POST", box + "/exec", `{"shell":"ls","cwd":"/\u0000"}`, 400, api.CodeBadRequest, "cwd"},
		{"stream and background", "POST", box + "/exec", `{"shell":"ls","stream":true,"background":true}`, 400, api.CodeBadRequest, "not both"},
		{"bad stdin base64", "POST", box + "/exec", `{"shell":"cat","stdin":"!!"}`, 400, api.CodeBadRequest, "base64"},
		{"bad mode", "PUT", box + "/files?path=/tmp/f&mode=abc", "x", 400, api.CodeBadRequest, "bad mode"},
		{"mode not octal", "PUT", box + "/files?path=/tmp/f&mode=0968", "x", 400, api.CodeBadRequest, "bad mode"},
		{"mode too big", "PUT", box + "/files?path=/tmp/f&mode=17777", "x", 400, api.CodeBadRequest, "bad mode"},
		{"mkdir mode too big", "POST", box + "/files/mkdir", `{"path":"/tmp/d","mode":65535}`, 400, api.CodeBadRequest, "bad mode"},
		{"path with NUL", "GET", box + "/files?path=/tmp/a%00b", "", 400, api.CodeBadRequest, "NUL"},
		{"stat path with NUL", "GET", box + "/files/stat?path=%00", "", 400, api.CodeBadRequest, "NUL"},
		{"missing path", "GET", box + "/files", "", 400, api.CodeBadRequest, "path is required"},
		{"path not UTF-8", "GET", box + "/files/stat?path=/tmp/%ff", "", 400, api.CodeBadRequest, "UTF-8"},
		{"user not UTF-8", "GET", box + "/files?path=/tmp/x&user=%c3", "", 400, api.CodeBadRequest, "UTF-8"},
		{"mkdir without path", "POST", box + "/files/mkdir", `{}`, 400, api.CodeBadRequest, "path is required"},
		{"move without destination", "POST", box + "/files/move", `{"source":"/a"}`, 400, api.CodeBadRequest, "destination is required"},
		{"bad depth", "GET", box + "/files/list?path=/&depth=-1", "", 400, api.CodeBadRequest, "depth"},
		{"bad recursive", "DELETE", box + "/files?path=/tmp/x&recursive=maybe", "", 400, api.CodeBadRequest, "recursive"},
		{"NUL in user query", "PUT", box + "/files?path=/tmp/f&user=a%00", "x", 400, api.CodeBadRequest, "user"},
		{"bad pid", "POST", box + "/processes/abc/wait", "", 400, api.CodeBadRequest, "bad pid"},
		{"zero pid", "POST", box + "/processes/0/signal", `{"signal":"TERM"}`, 400, api.CodeBadRequest, "bad pid"},
		{"negative pid", "GET", box + "/processes/-1/stream", "", 400, api.CodeBadRequest, "bad pid"},
		{"huge pid", "POST", box + "/processes/99999999999/stdin", "", 400, api.CodeBadRequest, "bad pid"},
		{"bad signal", "POST", box + "/processes/7/signal", `{"signal":"FOO"}`, 400, api.CodeBadRequest, "unknown signal"},
		{"bad wait timeout", "POST", box + "/processes/7/wait?timeout_ms=soon", "", 400, api.CodeBadRequest, "timeout_ms"},
		{"bad replay", "GET", box + "/processes/7/stream?replay=2", "", 400, api.CodeBadRequest, "replay"},
		{"bad close", "POST", box + "/processes/7/stdin?close=yes", "", 400, api.CodeBadRequest, "close"},
		{"bad sandbox id", "GET", "/v1/sandboxes/SB-UPPER", "", 404, api.CodeNotFound, "not found"},
		{"sandbox id too long", "GET", "/v1/sandboxes/sb-" + strings.Repeat("a", 41), "", 404, api.CodeNotFound, "not found"},
		{"sandbox id with dots", "POST", "/v1/sandboxes/sb-..%2f/exec", `{"shell":"ls"}`, 404, api.CodeNotFound, "not found"},
		{"unknown route", "GET", "/v2/nothing", "", 404, api.CodeNotFound, "no route"},
		{"wrong method", "PATCH", box, "", 405, api.CodeMethodNotAllowed, "not allowed"},
		{"wrong method on a list", "DELETE", "/v1/sandboxes", "", 405, api.CodeMethodNotAllowed, "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			got := apiError(t, e.do(tc.method, tc.path, e.keyA, body), tc.status, tc.code)
			if !strings.Contains(got.Message, tc.msg) {
				t.Errorf("message %q, want it to contain %q", got.Message, tc.msg)
			}
		})
	}
	resp := e.do("PATCH", box, e.keyA, nil)
	resp.Body.Close()
	if allow := resp.Header.Get("Allow"); allow != "GET, DELETE, HEAD" {
		t.Errorf("Allow = %q", allow)
	}
}

func TestInternalErrorsAreHidden(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	resp := e.do("POST", "/v1/sandboxes", e.keyA, `{"template":"explode"}`)
	id := resp.Header.Get("X-Request-Id")
	got := apiError(t, resp, http.StatusInternalServerError, api.CodeInternal)
	if got.Message != "internal error" {
		t.Errorf("message %q leaks detail", got.Message)
	}
	logs := e.logs.String()
	if id == "" || !strings.Contains(logs, "disk exploded at /var/lib/secret") || !strings.Contains(logs, "request_id="+id) {
		t.Errorf("log lacks the detail or request id %q:\n%s", id, logs)
	}
}

func TestPanicIsA500(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	got := apiError(t, e.do("POST", "/v1/sandboxes", e.keyA, `{"template":"panic"}`), http.StatusInternalServerError, api.CodeInternal)
	if strings.Contains(got.Message, "secret") {
		t.Errorf("message %q leaks the panic", got.Message)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "secret panic detail") || !strings.Contains(logs, "status=500") {
		t.Errorf("log lacks the panic or the access line:\n%s", logs)
	}
	// The server still serves.
	e.call("GET", "/v1/info", e.keyA, nil, http.StatusOK, nil)
}

func TestPanicAfterStreamBegan(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	e.fake.build = func(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
		fmt.Fprintln(progress, "step 1")
		panic("late panic")
	}
	resp := e.do("POST", "/v1/templates/x/build", e.admin, nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The stream is cut, not ended cleanly.
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("stream ended cleanly after a panic: %q", data)
	}
	if !strings.Contains(string(data), "step 1") {
		t.Errorf("stream %q lacks the line sent before the panic", data)
	}
}

func TestAccessLog(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	resp := e.do("GET", "/v1/info", e.keyA, nil)
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	var line string
	for l := range strings.SplitSeq(e.logs.String(), "\n") {
		if strings.Contains(l, "request_id="+id) {
			line = l
		}
	}
	for _, want := range []string{"method=GET", "path=/v1/info", "status=200", "duration=", "tenant=a"} {
		if !strings.Contains(line, want) {
			t.Errorf("access log line %q lacks %q", line, want)
		}
	}
}

func TestTemplateBuildStreams(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	release := make(chan struct{})
	e.fake.build = func(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
		switch name {
		case "bad":
			return api.Template{}, api.Errorf(api.CodeBadRequest, "bad template name")
		case "broken":
			io.WriteString(progress, "half a line")
			return api.Template{}, errors.New("mkfs failed: secret")
		case "norecipe":
			io.WriteString(progress, "looking\r\n")
			return api.Template{}, api.Errorf(api.CodeNotFound, "no recipe")
		}
		io.WriteString(progress, "step 1\nstep ")
		select {
		case <-release:
		case <-ctx.Done():
			return api.Template{}, ctx.Err()
		}
		io.WriteString(progress, "2\n")
		return api.Template{Name: name, SizeBytes: 42}, nil
	}

	resp := e.do("POST", "/v1/templates/py/build", e.admin, nil)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	br := bufio.NewReader(resp.Body)
	// The first line arrives while the build is still blocked: it was flushed.
	first, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(first) != `{"progress":"step 1"}` {
		t.Fatalf("first line %q, %v", first, err)
	}
	close(release)
	rest := readEvents[api.TemplateBuildEvent](t, br)
	if len(rest) != 2 || rest[0].Progress != "step 2" || rest[1].Template == nil || rest[1].Template.SizeBytes != 42 {
		t.Errorf("rest of the stream = %+v", rest)
	}

	apiError(t, e.do("POST", "/v1/templates/bad/build", e.admin, nil), http.StatusBadRequest, api.CodeBadRequest)

	resp = e.do("POST", "/v1/templates/broken/build", e.admin, nil)
	evs := readEvents[api.TemplateBuildEvent](t, resp.Body)
	resp.Body.Close()
	if len(evs) != 2 || evs[0].Progress != "half a line" || evs[1].Error != "internal error" {
		t.Errorf("broken build stream = %+v", evs)
	}
	resp = e.do("POST", "/v1/templates/norecipe/build", e.admin, nil)
	evs = readEvents[api.TemplateBuildEvent](t, resp.Body)
	resp.Body.Close()
	if len(evs) != 2 || evs[0].Progress != "looking" || evs[1].Error != "no recipe" {
		t.Errorf("no-recipe build stream = %+v", evs)
	}
}

func TestAgentUnreachableIsConflict(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/exec", `{"cmd":["true"]}`},
		{"GET", "/processes", ""},
		{"GET", "/files?path=/etc/hostname", ""},
		{"PUT", "/files?path=/tmp/x", "data"},
		{"GET", "/files/stat?path=/", ""},
		{"POST", "/processes/3/stdin", "data"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		got := apiError(t, e.do(tc.method, "/v1/sandboxes/"+sb.ID+tc.path, e.keyA, body), http.StatusConflict, api.CodeConflict)
		if !strings.Contains(got.Message, "not running") {
			t.Errorf("%s %s: message %q", tc.method, tc.path, got.Message)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var lines []string
	lw := &lineWriter{emit: func(l string) { lines = append(lines, l) }}
	for _, s := range []string{"a", "b\nc\r\n", "\n", "d"} {
		io.WriteString(lw, s)
	}
	io.WriteString(lw, strings.Repeat("x", maxLine+1))
	lw.close()
	io.WriteString(lw, "after close\n")
	want := []string{"ab", "c", "", "d" + strings.Repeat("x", maxLine+1)}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Errorf("lines = %q, want %q", lines, want)
	}
}

func TestCapped(t *testing.T) {
	c := &capped{max: 5}
	c.write([]byte("abc"))
	c.write([]byte("defg"))
	c.write([]byte("h"))
	if string(c.buf) != "abcde" || !c.truncated {
		t.Errorf("capped = %q, %v", c.buf, c.truncated)
	}
}

func TestRequestCancelledIsNotAnError(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	started := make(chan struct{})
	e.fake.build = func(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
		close(started)
		<-ctx.Done()
		return api.Template{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/templates/x/build", nil)
		req.Header.Set("Authorization", "Bearer "+e.admin)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	<-done
	wait.For(t, 10*time.Second, "the build's log line", func() bool { return strings.Contains(e.logs.String(), "path=/v1/templates/x/build") })
	if strings.Contains(e.logs.String(), "level=ERROR") {
		t.Errorf("a departed caller was logged as an error:\n%s", e.logs.String())
	}
}

// A key made by the admin works for its tenant only, and bad tenant names
// are refused.
func TestCreateKey(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var k api.Key
	e.call("POST", "/v1/keys", e.admin, `{"tenant":"c"}`, http.StatusCreated, &k)
	if k.Tenant != "c" || !strings.HasPrefix(k.Key, "wk_") {
		t.Fatalf("new key %+v", k)
	}
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", k.Key, "{}", http.StatusCreated, &sb)
	apiError(t, e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
	e.call("GET", "/v1/sandboxes/"+sb.ID, k.Key, nil, http.StatusOK, nil)
	for _, body := range []string{`{"tenant":""}`, `{"tenant":"Upper"}`, `{"tenant":"a/b"}`, `{"tenant":"admin"}`, `{}`} {
		apiError(t, e.do("POST", "/v1/keys", e.admin, body), http.StatusBadRequest, api.CodeBadRequest)
	}
}

// TestKeysListAndRevoke is the regression test of issue 13, item 15: keys
// could be neither listed nor revoked.
func TestKeysListAndRevoke(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var k api.Key
	e.call("POST", "/v1/keys", e.admin, `{"tenant":"c"}`, http.StatusCreated, &k)
	if k.ID == "" || k.Key == "" || k.Tenant != "c" {
		t.Fatalf("new key %+v", k)
	}
	var list struct{ Keys []api.KeyInfo }
	e.call("GET", "/v1/keys", e.admin, nil, http.StatusOK, &list)
	var found *api.KeyInfo
	admins := 0
	for i, ki := range list.Keys {
		if ki.ID == k.ID {
			found = &list.Keys[i]
		}
		if ki.Admin {
			admins++
		}
	}
	if found == nil || found.Tenant != "c" || found.Admin || found.CreatedAt.IsZero() || len(list.Keys) != 4 || admins != 1 {
		t.Fatalf("listed %+v; want the new key among 4, one admin", list.Keys)
	}
	resp := e.do("GET", "/v1/keys", e.admin, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), k.Key) || strings.Contains(string(body), "wk_") {
		t.Error("a key listing shows a key")
	}
	e.call("GET", "/v1/sandboxes", k.Key, nil, http.StatusOK, nil)
	e.call("DELETE", "/v1/keys/"+k.ID, e.admin, nil, http.StatusNoContent, nil)
	apiError(t, e.do("GET", "/v1/sandboxes", k.Key, nil), http.StatusUnauthorized, api.CodeUnauthorized)
	apiError(t, e.do("DELETE", "/v1/keys/"+k.ID, e.admin, nil), http.StatusNotFound, api.CodeNotFound)
	for _, ki := range list.Keys {
		if ki.Admin {
			apiError(t, e.do("DELETE", "/v1/keys/"+ki.ID, e.admin, nil), http.StatusBadRequest, api.CodeBadRequest)
		}
	}
	apiError(t, e.do("GET", "/v1/keys", e.keyA, nil), http.StatusForbidden, api.CodeForbidden)
	e.call("GET", "/v1/sandboxes", e.admin, nil, http.StatusOK, nil)
}

// TestAdminScope is the regression test of issue 13, item 15 (its
// sandboxes half): the admin could neither see nor delete a tenant's
// sandboxes. With all_tenants=true it can; without it, or with a tenant
// key, nothing changes.
func TestAdminScope(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, `{"template":"default"}`, http.StatusCreated, &sb)
	var list struct{ Sandboxes []api.Sandbox }
	e.call("GET", "/v1/sandboxes?all_tenants=true", e.admin, nil, http.StatusOK, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("admin's listing of every tenant: %+v", list.Sandboxes)
	}
	for _, path := range []string{"/v1/sandboxes?all_tenants=true", "/v1/sandboxes/" + sb.ID + "?all_tenants=true"} {
		method := "GET"
		if strings.Contains(path, sb.ID) {
			method = "DELETE"
		}
		apiError(t, e.do(method, path, e.keyB, nil), http.StatusForbidden, api.CodeForbidden)
	}
	apiError(t, e.do("GET", "/v1/sandboxes?all_tenants=maybe", e.admin, nil), http.StatusBadRequest, api.CodeBadRequest)
	apiError(t, e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.admin, nil), http.StatusNotFound, api.CodeNotFound)
	e.call("DELETE", "/v1/sandboxes/"+sb.ID+"?all_tenants=true", e.admin, nil, http.StatusNoContent, nil)
	apiError(t, e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
}
