package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/listing"
)

// The fuzz targets of this file feed the API hostile input: request bodies
// straight into decodeJSON, and whole HTTP requests through a real
// http.Server. `go test` runs their seeds; `go test -fuzz` explores.

// fuzzBodyLimit is the body limit of the fuzzed servers: small, so that the
// fuzzer reaches the 413 path without megabyte inputs.
const fuzzBodyLimit = 512

// fuzzDecodeCase decodes a body as one request type and checks the result.
type fuzzDecodeCase struct {
	name    string
	emptyOK bool // as the route decoding this type passes it
	check   func(s *Server, body []byte, emptyOK bool) error
}

// fuzzDecodeCases are the request bodies of the API, each with the emptyOK
// its route uses.
var fuzzDecodeCases = []fuzzDecodeCase{
	{"CreateSandboxRequest", true, checkDecode[api.CreateSandboxRequest]},
	{"ExecRequest", false, checkDecode[api.ExecRequest]},
	{"SetTimeoutRequest", false, checkDecode[api.SetTimeoutRequest]},
	{"MkdirRequest", false, checkDecode[api.MkdirRequest]},
	{"MoveRequest", false, checkDecode[api.MoveRequest]},
	{"SignalRequest", false, checkDecode[api.SignalRequest]},
	{"SetPreviewRequest", false, checkDecode[api.SetPreviewRequest]},
}

// FuzzDecodeJSON checks decodeJSON on arbitrary bodies, for every request
// type: it never panics; it refuses with an *api.Error of a 4xx status, 413
// exactly when the body is over the limit; what it accepts is empty (where
// allowed) or one JSON object whose top-level keys are all fields of the
// type; and an accepted value survives encoding and decoding again.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		``,
		" \n\t ",
		`{}`,
		`{"template":"default","runtime":"container","cpus":1.5,"memory_mb":512,"pids":100,"disk_mb":1024,"timeout_seconds":300,"env":{"A":"1"},"metadata":{"k":"v"}}`,
		`{"cpus":-1,"memory_mb":-9223372036854775808,"disk_mb":9223372036854775807}`,
		`{"memory_mb":9223372036854775808}`,
		`{"cpus":1e400}`,
		`{"memory_mb":1.5}`,
		`{"memory_mb":"512"}`,
		`{"cmd":["ls","-l","/"],"env":{"PATH":"/bin"},"cwd":"/tmp","user":"root","timeout_ms":1000,"stdin":"aGVsbG8=","tag":"t"}`,
		`{"shell":"echo hi","background":true}`,
		`{"shell":"yes","stream":true,"stdin":"!!notbase64"}`,
		`{"cmd":[],"env":{},"stdin":""}`,
		`{"cmd":null}`,
		`{"CMD":["x"],"Shell":"y"}`,
		`{"cmd":["a"],"cmd":["b"]}`,
		`{"timeout_seconds":60}`,
		`{"timeout_seconds":-1}`,
		`{"path":"/tmp/x","mode":493,"user":"1000"}`,
		`{"path":"../../etc/shadow","mode":4294967296}`,
		`{"source":"/a","destination":"/b"}`,
		`{"signal":"SIGTERM"}`,
		`{"public":true,"rotate_token":true}`,
		`{"public":null}`,
		`{"signal":"TERM","extra":1}`,
		`{"unknown":true}`,
		`{} {}`,
		`{}x`,
		`{"a":`,
		`[]`,
		`null`,
		`"str"`,
		`42`,
		"\xef\xbb\xbf{}",
		"{\"path\":\"\xff\xfe\"}",
		`{"path":"a\u0000b"}`,
		`{"env":{"A":{"B":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}}`,
		strings.Repeat(`[`, 300),
		`{"signal":"` + strings.Repeat("A", fuzzBodyLimit) + `"}`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{opts: Options{MaxBodyBytes: fuzzBodyLimit}}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, c := range fuzzDecodeCases {
			if err := c.check(s, body, c.emptyOK); err != nil {
				t.Fatalf("%s: body %q: %v", c.name, body, err)
			}
		}
	})
}

// decodeBody runs s.decodeJSON on body as a request's body.
func decodeBody(s *Server, body []byte, v any, emptyOK bool) error {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	return s.decodeJSON(httptest.NewRecorder(), r, v, emptyOK)
}

// checkDecode is the FuzzDecodeJSON check of request type T; it returns
// what is wrong.
func checkDecode[T any](s *Server, body []byte, emptyOK bool) error {
	var v T
	err := decodeBody(s, body, &v, emptyOK)
	over := int64(len(body)) > s.opts.MaxBodyBytes
	if err != nil {
		var ae *api.Error
		switch {
		case !errors.As(err, &ae):
			return fmt.Errorf("error %T %v, want an *api.Error", err, err)
		case ae.Status() < 400 || ae.Status() >= 500 || ae.Message == "":
			return fmt.Errorf("error %+v (status %d), want a 4xx with a message", *ae, ae.Status())
		case over != (ae.Code == api.CodeTooLarge):
			return fmt.Errorf("%d bytes (limit %d): error %+v", len(body), s.opts.MaxBodyBytes, *ae)
		}
		return nil
	}
	if over {
		return fmt.Errorf("%d bytes accepted over the limit of %d", len(body), s.opts.MaxBodyBytes)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		if !emptyOK || !reflect.ValueOf(v).IsZero() {
			return fmt.Errorf("empty body accepted as %+v (emptyOK %v)", v, emptyOK)
		}
		return nil
	}
	var top map[string]json.RawMessage
	if trimmed[0] != '{' || !json.Valid(trimmed) || json.Unmarshal(trimmed, &top) != nil {
		return fmt.Errorf("accepted as %+v: not exactly one JSON object", v)
	}
	fields := jsonFields(reflect.TypeFor[T]())
	for k := range top {
		if !containsFold(fields, k) {
			return fmt.Errorf("accepted with unknown field %q", k)
		}
	}
	// What was accepted encodes to a body the server accepts again, and that
	// decodes to the same value (compared by encoding: omitempty turns an
	// empty map or slice into an absent one).
	enc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %+v: %v", v, err)
	}
	var again T
	if err := decodeBody(&Server{opts: Options{MaxBodyBytes: DefaultMaxBodyBytes}}, enc, &again, false); err != nil {
		return fmt.Errorf("re-encoded as %s, refused: %v", enc, err)
	}
	enc2, err := json.Marshal(again)
	if err != nil {
		return fmt.Errorf("encode %+v: %v", again, err)
	}
	if !bytes.Equal(enc, enc2) {
		return fmt.Errorf("round trip changed the value:\n%s\n%s", enc, enc2)
	}
	return nil
}

// jsonFields are the JSON names of struct type typ's fields.
func jsonFields(typ reflect.Type) []string {
	var names []string
	for _, f := range reflect.VisibleFields(typ) {
		if f.Anonymous { // an embedded struct's fields are the type's own
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// containsFold reports whether list holds s, ignoring case as
// encoding/json does when it matches keys to fields.
func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

// Keys and tenants of the handler fuzz target.
const (
	fuzzKeyA     = "wk_fuzz_tenant_a"
	fuzzKeyB     = "wk_fuzz_tenant_b"
	fuzzKeyAdmin = "wk_fuzz_admin"
	// fuzzSandbox is tenant a's sandbox, there before every request.
	fuzzSandbox = "sb-1"
)

// fuzzAuth are the ways a fuzzed request authenticates, chosen by a byte of
// the input: the header lines sent, and the key the server must take them
// for ("" for none).
var fuzzAuth = []struct {
	header, key string
}{
	{"", ""},
	{"Authorization: Bearer " + fuzzKeyA, fuzzKeyA},
	{"X-API-Key: " + fuzzKeyB, fuzzKeyB},
	{"Authorization: Bearer " + fuzzKeyAdmin, fuzzKeyAdmin},
	{"Authorization: bearer   " + fuzzKeyA + " ", fuzzKeyA},
	{"X-API-Key: " + fuzzKeyB + "\r\nAuthorization: Bearer " + fuzzKeyA, fuzzKeyA},
	{"Authorization: Basic " + fuzzKeyA, ""},
	{"Authorization: Bearer wk_unknown", ""},
	{"Authorization: Bearer", ""},
	{"X-API-Key: " + fuzzKeyB + "\r\nAuthorization: Basic " + fuzzKeyB, ""},
}

// fuzzSandboxes is the Sandboxes of the handler fuzz target: a fresh
// fakeSandboxes per request, holding tenant a's fuzzSandbox, and a record
// of the tenants the server called it for.
type fuzzSandboxes struct {
	mu      sync.Mutex // guards the fields below
	fake    *fakeSandboxes
	tenants []string
	builds  int
}

var _ Sandboxes = (*fuzzSandboxes)(nil)

// reset starts a request over: a fresh fake with one sandbox, no record.
func (s *fuzzSandboxes) reset(conn *agentconn.Conn) {
	fake := &fakeSandboxes{conn: conn}
	if _, err := fake.Create(context.Background(), "a", api.CreateSandboxRequest{}); err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fake, s.tenants, s.builds = fake, nil, 0
}

// calledFor records a call for tenant and returns the fake to serve it.
func (s *fuzzSandboxes) calledFor(tenant string) *fakeSandboxes {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants = append(s.tenants, tenant)
	return s.fake
}

func (s *fuzzSandboxes) current() *fakeSandboxes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fake
}

// Create refuses the templates that make fakeSandboxes fail on purpose:
// the server's handling of a failing manager has tests of its own.
func (s *fuzzSandboxes) Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	fake := s.calledFor(tenant)
	if req.Template == "panic" || req.Template == "explode" {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "no template %q", req.Template)
	}
	return fake.Create(ctx, tenant, req)
}

func (s *fuzzSandboxes) Get(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return s.calledFor(tenant).Get(ctx, tenant, id)
}

func (s *fuzzSandboxes) List(ctx context.Context, tenant string, states []string, page listing.Page) ([]api.Sandbox, error) {
	return s.calledFor(tenant).List(ctx, tenant, states, page)
}

func (s *fuzzSandboxes) Delete(ctx context.Context, tenant, id string) error {
	return s.calledFor(tenant).Delete(ctx, tenant, id)
}

func (s *fuzzSandboxes) SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (api.Sandbox, error) {
	return s.calledFor(tenant).SetTimeout(ctx, tenant, id, timeout)
}

func (s *fuzzSandboxes) Pause(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return s.calledFor(tenant).Pause(ctx, tenant, id)
}

func (s *fuzzSandboxes) Resume(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return s.calledFor(tenant).Resume(ctx, tenant, id)
}

func (s *fuzzSandboxes) Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error) {
	return s.calledFor(tenant).Agent(ctx, tenant, id)
}

func (s *fuzzSandboxes) Metrics(ctx context.Context, tenant, id string) (api.SandboxMetrics, error) {
	return s.calledFor(tenant).Metrics(ctx, tenant, id)
}

func (s *fuzzSandboxes) Network(ctx context.Context, tenant, id string) (api.NetworkStatus, error) {
	return s.calledFor(tenant).Network(ctx, tenant, id)
}

func (s *fuzzSandboxes) SetNetwork(ctx context.Context, tenant, id string, p api.NetworkPolicy) (api.NetworkStatus, error) {
	return s.calledFor(tenant).SetNetwork(ctx, tenant, id, p)
}

func (s *fuzzSandboxes) DialPort(ctx context.Context, tenant, id string, port int) (net.Conn, error) {
	return s.calledFor(tenant).DialPort(ctx, tenant, id, port)
}

func (s *fuzzSandboxes) Info(ctx context.Context, tenant string, admin bool) api.NodeInfo {
	return s.current().Info(ctx, tenant, admin)
}

func (s *fuzzSandboxes) Templates(ctx context.Context) ([]api.Template, error) {
	return s.current().Templates(ctx)
}

func (s *fuzzSandboxes) BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
	s.mu.Lock()
	s.builds++
	fake := s.fake
	s.mu.Unlock()
	return fake.BuildTemplate(ctx, name, progress)
}

func (s *fuzzSandboxes) Snapshot(ctx context.Context, tenant, id string, req api.CreateSnapshotRequest) (api.Snapshot, error) {
	return s.calledFor(tenant).Snapshot(ctx, tenant, id, req)
}

func (s *fuzzSandboxes) GetSnapshot(ctx context.Context, tenant, id string) (api.Snapshot, error) {
	return s.calledFor(tenant).GetSnapshot(ctx, tenant, id)
}

func (s *fuzzSandboxes) ListSnapshots(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]api.Snapshot, error) {
	return s.calledFor(tenant).ListSnapshots(ctx, tenant, sandboxID, states, page)
}

func (s *fuzzSandboxes) SnapshotLineage(ctx context.Context, tenant, id, after string, limit int) ([]string, bool, error) {
	return s.calledFor(tenant).SnapshotLineage(ctx, tenant, id, after, limit)
}

func (s *fuzzSandboxes) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	return s.calledFor(tenant).DeleteSnapshot(ctx, tenant, id)
}

func (s *fuzzSandboxes) Restore(ctx context.Context, tenant, id string, req api.RestoreRequest) ([]api.Sandbox, error) {
	return s.calledFor(tenant).Restore(ctx, tenant, id, req)
}

func (s *fuzzSandboxes) Fork(ctx context.Context, tenant, id string, req api.ForkRequest) (api.ForkResult, error) {
	return s.calledFor(tenant).Fork(ctx, tenant, id, req)
}

func (s *fuzzSandboxes) GCSnapshots(ctx context.Context, grace time.Duration) (api.GCResult, error) {
	return s.current().GCSnapshots(ctx, grace)
}

// FuzzHandler sends arbitrary requests (method, target, auth, extra
// headers, body) through a real http.Server serving Handler, over a unix
// socket, with a dead agent behind every sandbox. For every request the
// handler answers (it has an X-Request-Id): the status is not 500 (503 and
// 504 are API codes); an error status comes with a JSON error body whose
// code matches it; a 401 says WWW-Authenticate; the manager was called
// only for the tenant of the key sent, and a template build only with the
// admin key. A request that gets no answer at all (the handler panicked or
// hung) fails.
func FuzzHandler(f *testing.F) {
	keys := &memKeys{}
	keys.add(fuzzKeyA, Key{Tenant: "a"})
	keys.add(fuzzKeyB, Key{Tenant: "b"})
	keys.add(fuzzKeyAdmin, Key{Tenant: api.AdminTenant, Admin: true})
	dir := f.TempDir()
	conn := agentconn.DialUnix(filepath.Join(dir, "no-agent.sock"))
	sb := &fuzzSandboxes{}
	sb.reset(conn)
	logs := &syncBuffer{}
	srv := New(sb, sb, keys, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Options{MaxBodyBytes: fuzzBodyLimit, MaxOutputBytes: 1 << 10})
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener = ln
	hs.Config.ErrorLog = log.New(logs, "http: ", 0)
	hs.Start()
	f.Cleanup(hs.Close)

	// Every route, with what gets it past its input checks, for each way
	// of authenticating.
	for _, rt := range srv.routes {
		path, body := concrete(rt, fuzzSandbox)
		b, _ := body.(string)
		for auth := range fuzzAuth {
			f.Add(rt.method, path, uint8(auth), "", []byte(b))
		}
	}
	for _, s := range []struct {
		method, target string
		auth           uint8
		headers, body  string
	}{
		{"GET", "/v1/sandboxes/sb-1/files?path=../../../etc/shadow", 1, "", ""},
		{"GET", "/v1/sandboxes/sb-1/files?path=%00&user=%ff", 1, "", ""},
		{"PUT", "/v1/sandboxes/sb-1/files?path=/tmp/x&mode=99999999999", 1, "Content-Type: application/octet-stream", "data"},
		{"PUT", "/v1/sandboxes/sb-1/files?path=/tmp/x&mode=-1", 1, "", ""},
		{"GET", "/v1/sandboxes/sb-1/files/list?path=/&depth=-1", 1, "", ""},
		{"GET", "/v1/sandboxes/sb-1/files/list?path=/&depth=99999999999", 1, "", ""},
		{"DELETE", "/v1/sandboxes/sb-1/files?path=/&recursive=maybe", 1, "", ""},
		{"POST", "/v1/sandboxes/sb-1/files/mkdir", 1, "", `{"path":"/x","mode":4294967295}`},
		{"POST", "/v1/sandboxes/sb-1/files/move", 1, "", `{"source":"","destination":"/b"}`},
		{"POST", "/v1/sandboxes/sb-1/processes/0/signal", 1, "", `{"signal":"TERM"}`},
		{"POST", "/v1/sandboxes/sb-1/processes/4294967296/wait?timeout_ms=-5", 1, "", ""},
		{"POST", "/v1/sandboxes/sb-1/processes/7/wait?timeout_ms=1", 1, "", ""},
		{"POST", "/v1/sandboxes/sb-1/processes/7/stdin?close=true", 1, "", "hello"},
		{"POST", "/v1/sandboxes/sb-1/processes/7/signal", 1, "", `{"signal":"SIGSEGV"}`},
		{"GET", "/v1/sandboxes/sb-1/processes/7/stream?replay=yes", 1, "", ""},
		{"POST", "/v1/sandboxes/sb-1/exec", 1, "", `{"cmd":["true"],"background":true,"stream":true}`},
		{"POST", "/v1/sandboxes/sb-1/exec", 1, "", `{"cmd":["a\u0000b"]}`},
		{"POST", "/v1/sandboxes/sb-1/exec", 1, "", `{"shell":"x","env":{"A=B":"c"},"timeout_ms":-1}`},
		{"POST", "/v1/sandboxes/sb-1/exec", 1, "", `{"cmd":["true"],"unknown":1}`},
		{"POST", "/v1/sandboxes/sb-1/timeout", 1, "", `{"timeout_seconds":9223372036854775807}`},
		{"POST", "/v1/sandboxes/sb-1/timeout", 1, "", `{"timeout_seconds":-9223372036854775808}`},
		{"POST", "/v1/sandboxes", 1, "", `{"cpus":-1,"memory_mb":-1}`},
		{"POST", "/v1/sandboxes", 1, "", `{"template":"panic"}`},
		{"POST", "/v1/sandboxes", 1, "", strings.Repeat(`{"env":`, 100)},
		{"POST", "/v1/sandboxes", 1, "", `{"metadata":{"k":"` + strings.Repeat("v", fuzzBodyLimit) + `"}}`},
		{"POST", "/v1/sandboxes", 2, "Content-Type: text/plain", "{}"},
		{"GET", "/v1/sandboxes/sb-1", 2, "", ""},
		{"DELETE", "/v1/sandboxes/sb-1", 2, "", ""},
		{"GET", "/v1/sandboxes/SB-1", 1, "", ""},
		{"GET", "/v1/sandboxes/sb-1%2F..%2F..", 1, "", ""},
		{"GET", "/v1/sandboxes/../../healthz", 0, "", ""},
		{"GET", "//v1//sandboxes/", 1, "", ""},
		{"GET", "/v1/sandboxes?x=%zz", 1, "", ""},
		{"PATCH", "/v1/sandboxes/sb-1", 1, "", "{}"},
		{"OPTIONS", "*", 1, "", ""},
		{"TRACE", "/healthz", 0, "", ""},
		{"HEAD", "/v1/sandboxes/sb-1/files?path=/etc/passwd", 1, "", ""},
		{"GET", "http://other.host/v1/info", 1, "", ""},
		{"POST", "/v1/templates/..%2F..%2Fetc/build", 3, "", ""},
		{"POST", "/v1/templates/default/build", 1, "", ""},
		{"GET", "/v1/info", 1, "Expect: 100-continue\nX-Request-Id: forged\nAccept: */*", ""},
		{"GET", "/v1/info", 1, "Cookie: " + strings.Repeat("c", 4096), ""},
	} {
		f.Add(s.method, s.target, s.auth, s.headers, []byte(s.body))
	}

	f.Fuzz(func(t *testing.T, method, target string, auth uint8, headers string, body []byte) {
		a := fuzzAuth[int(auth)%len(fuzzAuth)]
		raw, ok := fuzzRawRequest(method, target, a.header, headers, body)
		if !ok {
			return
		}
		sb.reset(conn)
		logs.mu.Lock()
		logs.buf.Reset()
		logs.mu.Unlock()
		resp, respBody, err := roundTripRaw(sock, method, raw)
		if err != nil {
			t.Fatalf("request %q: %v\nserver log:\n%s", raw, err, logs)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			// net/http refused the request before the handler saw it.
			return
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("request %q: status %d, body %q: %s\nserver log:\n%s",
				raw, resp.StatusCode, respBody, fmt.Sprintf(format, args...), logs)
		}
		// 5xx is left to the codes the API gives on purpose (a wait that
		// timed out is 504); an internal error is a bug.
		if resp.StatusCode == http.StatusInternalServerError || resp.StatusCode > http.StatusGatewayTimeout {
			fail("a server error")
		}
		if resp.StatusCode >= 400 {
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				fail("error with Content-Type %q, want application/json", ct)
			}
			// A HEAD answer has the headers of the error, not its body.
			if method != http.MethodHead {
				var eb api.ErrorBody
				if err := json.Unmarshal(respBody, &eb); err != nil {
					fail("error body is not JSON: %v", err)
				}
				if eb.Error.Code == "" || eb.Error.Message == "" || eb.Error.Status() != resp.StatusCode {
					fail("error body %+v does not match the status", eb.Error)
				}
			}
		}
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			fail("401 without WWW-Authenticate")
		}
		want, _ := keys.LookupKey(context.Background(), a.key)
		sb.mu.Lock()
		tenants, builds := sb.tenants, sb.builds
		sb.mu.Unlock()
		for _, tenant := range tenants {
			if a.key == "" || tenant != want.Tenant {
				fail("manager called for tenant %q; the request's key is %q (tenant %q)", tenant, a.key, want.Tenant)
			}
		}
		if builds > 0 && !want.Admin {
			fail("template build run for key %q, which is not an admin key", a.key)
		}
	})
}

// fuzzRawRequest assembles an HTTP/1.1 request, or reports false when the
// parts cannot make one whose framing the harness controls: extra header
// lines are one per "\n", and may not set the body's framing or the
// credentials (auth does).
func fuzzRawRequest(method, target, auth, headers string, body []byte) ([]byte, bool) {
	if strings.ContainsAny(method+target, " \r\n") || method == "" || target == "" {
		return nil, false
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: warren.test\r\n", method, target)
	if auth != "" {
		b.WriteString(auth + "\r\n")
	}
	if headers != "" {
		for line := range strings.SplitSeq(headers, "\n") {
			name, _, _ := strings.Cut(line, ":")
			switch textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)) {
			case "Content-Length", "Transfer-Encoding", "Authorization", "X-Api-Key", "Host", "Connection", "Upgrade":
				return nil, false
			}
			if strings.ContainsRune(line, '\r') || line == "" {
				return nil, false
			}
			b.WriteString(line + "\r\n")
		}
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes(), true
}

// roundTripRaw sends raw on a new connection to the unix socket sock and
// reads the final answer, skipping 1xx ones; the connection stays open
// until then, so the handler never sees its caller leave.
func roundTripRaw(sock, method string, raw []byte) (*http.Response, []byte, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, nil, err
	}
	go c.Write(raw)
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return nil, nil, fmt.Errorf("no answer: %w", err)
		}
		if resp.StatusCode >= 200 {
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return nil, nil, fmt.Errorf("read answer body: %w", err)
			}
			return resp, data, nil
		}
	}
}
