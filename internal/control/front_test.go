package control_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/control"
	"warren/internal/pki"
	"warren/internal/pki/pkitest"
	"warren/internal/reqid"
	"warren/internal/server"
)

// testFleet is a Fleet over a table: its nodes are real HTTPS servers of
// a fleet CA, reached through Remote.
type testFleet struct {
	mu       sync.Mutex
	owners   map[string]string // sandbox → node
	place    string            // the node Place answers
	placeErr error
	placed   []control.Placement
	started  []string // node: ids
	any      string
	nodes    map[string]http.Handler
}

func (f *testFleet) Owner(ctx context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.owners[id]; ok {
		return n, nil
	}
	return "", control.ErrNoOwner
}

func (f *testFleet) Place(ctx context.Context, p control.Placement) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.placed = append(f.placed, p)
	return f.place, f.placeErr
}

func (f *testFleet) Any(ctx context.Context) (string, error) { return f.any, nil }

func (f *testFleet) Started(node string, ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, node+": "+strings.Join(ids, " "))
}

func (f *testFleet) Node(node string) (http.Handler, error) {
	h, ok := f.nodes[node]
	if !ok {
		return nil, fmt.Errorf("no node %s", node)
	}
	return h, nil
}

// nodeHandler is a node's API for the tests: it answers with its name and
// what it got (and an X-Request-Id of its own, as a node's middleware
// gives one), streams on a process's stream, and upgrades on an exposed
// port.
func nodeHandler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.TLS != nil { // a node's, not the front's own process's
			w.Header().Set(reqid.Header, "node-made")
		}
		answer := map[string]any{"node": name, "method": r.Method, "path": r.URL.Path, "host": r.Host,
			"body": string(body), "auth": r.Header.Get("Authorization"),
			"fleet_id": r.Header.Get(reqid.FleetHeader), "client_id": r.Header.Get(reqid.Header)}
		switch {
		case r.URL.Path == "/v1/sandboxes":
			answer["id"] = "sb-new"
		case r.URL.Path == "/v1/snapshots/sn-1/restore":
			answer["sandboxes"] = []map[string]string{{"id": "sb-r1"}, {"id": "sb-r2"}}
		case r.URL.Path == "/v1/snapshots/sn-2/restore": // a retry's: the restore ran on another node
			w.Header().Set(api.ReplayedHeader, "true")
			answer["sandboxes"] = []map[string]string{{"id": "sb-elsewhere"}}
		case strings.HasSuffix(r.URL.Path, "/fork"):
			answer["snapshot"] = map[string]string{"id": "sn-fork"}
			answer["sandboxes"] = []map[string]string{{"id": "sb-k1"}, {"id": "sb-k2"}}
		}
		json.NewEncoder(w).Encode(answer)
	})
	// The stream writes a line, then waits for the test to say go on.
	mux.HandleFunc("/v1/sandboxes/sb-b/processes/1/stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/v1/sandboxes/sb-b/ports/8080/ws", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		line, _ := brw.ReadString('\n')
		brw.WriteString(name + " echoes " + line)
		brw.Flush()
	})
	return mux
}

// testNodes are the test fleet's nodes: a is any node's, b runs sb-b (and
// sb-a is a's), creates and restores are placed on b unless a test says
// otherwise, and d is a node only a route naming it reaches.
var testNodes = []string{"a", "b", "c", "d"}

// newTestFront starts the nodes of testNodes (TLS, taking only the
// fleet's control replicas) and a front over them with the API's route
// table, served as a control replica serves it (server.Server.Wrap).
func newTestFront(t *testing.T) (*testFleet, string) {
	t.Helper()
	ca := pkitest.CA(t, "test")
	member := func(id pki.Identity) *pki.Member { return pkitest.Member(t, ca, id) }
	replica := member(pki.Identity{Role: pki.Control, Name: "c1"})
	fleet := &testFleet{owners: map[string]string{"sb-a": "a", "sb-b": "b"}, place: "b", any: "a", nodes: map[string]http.Handler{}}
	for _, name := range testNodes {
		srv := httptest.NewUnstartedServer(nodeHandler(name))
		srv.TLS = member(pki.Identity{Role: pki.Node, Name: name}).ServerConfig(pki.Control)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		fleet.nodes[name] = control.Remote(replica, name, srv.Listener.Addr().String(), slog.New(slog.DiscardHandler), writeTestError)
	}
	preview := func(host string) (string, bool) {
		id, ok := strings.CutSuffix(strings.TrimPrefix(host, "8080-"), ".preview.test")
		return id, ok
	}
	auth := func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer wk_key" {
			return "", api.Errorf(api.CodeUnauthorized, "invalid API key")
		}
		return "acme", nil
	}
	api := server.New(nil, nil, nil, slog.New(slog.DiscardHandler), server.Options{})
	front := httptest.NewServer(api.Wrap(control.NewFront(fleet, control.Options{Routes: api.RouteTable(), Preview: preview,
		Authenticate: auth, WriteError: writeTestError, MaxBody: 2 * control.PeekFree, Local: nodeHandler("front")})))
	t.Cleanup(front.Close)
	return fleet, front.URL
}

// answer is what nodeHandler says.
type answer struct {
	Node, Method, Path, Host, Body, Auth string
	FleetID                              string `json:"fleet_id"`
	ClientID                             string `json:"client_id"`
}

func send(t *testing.T, method, url, host, body string) (int, answer) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer wk_key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a
}

// TestFrontRoutes: each kind of request reaches the node that must answer
// it, with its path, host, key and body as sent.
func TestFrontRoutes(t *testing.T) {
	fleet, url := newTestFront(t)
	create := `{"template":"py","cpus":2,"memory_mb":512}`
	for _, tc := range []struct {
		name, method, path, host, body, node string
	}{
		{"a sandbox's route goes to its node", "GET", "/v1/sandboxes/sb-b/files?path=/x", "", "", "b"},
		{"the sandbox itself", "DELETE", "/v1/sandboxes/sb-a", "", "", "a"},
		{"a sandbox no node runs goes to any", "GET", "/v1/sandboxes/sb-gone", "", "", "a"},
		{"a create goes where it is placed", "POST", "/v1/sandboxes", "", create, "b"},
		{"a restore too", "POST", "/v1/snapshots/sn-1/restore", "", `{"count":3,"runtime":"vm"}`, "b"},
		{"a retried restore too", "POST", "/v1/snapshots/sn-2/restore", "", `{}`, "b"},
		{"a restore by name, of the caller's snapshot", "POST", "/v1/snapshots/nightly/restore", "", `{"count":2}`, "b"},
		{"a list goes to any", "GET", "/v1/sandboxes", "", "", "a"},
		{"snapshots go to any", "GET", "/v1/snapshots/sn-1", "", "", "a"},
		{"a preview host goes to its sandbox's node", "GET", "/", "8080-sb-b.preview.test", "", "b"},
		{"whatever its path", "GET", "/metrics", "8080-sb-b.preview.test", "", "b"},
		{"a node's metrics go to that node", "GET", "/v1/nodes/b/metrics", "", "", "b"},
		{"the front answers its own", "GET", "/metrics", "", "", "front"},
		{"and its own health, whether any node is up or not", "GET", "/healthz", "", "", "front"},
		{"a fork goes to its parent's node", "POST", "/v1/sandboxes/sb-b/fork", "", `{"count":2}`, "b"},
		{"an exec", "POST", "/v1/sandboxes/sb-b/exec", "", `{"cmd":["true"]}`, "b"},
		{"a process's stream", "GET", "/v1/sandboxes/sb-b/processes/7/stream", "", "", "b"},
		{"the agent's routes", "POST", "/v1/sandboxes/sb-b/agent/process.Process/Start", "", `{}`, "b"},
		{"an exposed port, whatever the method", "PATCH", "/v1/sandboxes/sb-b/ports/8080/x", "", `{}`, "b"},
		{"a snapshot of a sandbox", "POST", "/v1/sandboxes/sb-b/snapshots", "", `{}`, "b"},
		{"a method a sandbox's path does not serve goes to its node, which answers 405", "PATCH", "/v1/sandboxes/sb-b", "", "", "b"},
		{"so does a node's metrics'", "POST", "/v1/nodes/b/metrics", "", "", "b"},
		{"a restore's path places nothing but a POST", "GET", "/v1/snapshots/sn-1/restore", "", "", "a"},
		{"a cordon goes to any node, not the one it names", "POST", "/v1/nodes/b/cordon", "", "", "a"},
		{"a drain too", "POST", "/v1/nodes/b/drain", "", "", "a"},
		{"debug vars go to any", "GET", "/v1/debug/vars", "", "", "a"},
		{"a template's build goes to any", "POST", "/v1/templates/py/build", "", "", "a"},
		{"events go to any", "GET", "/v1/events", "", "", "a"},
		{"the console is the front's", "GET", "/console/app.js", "", "", "front"},
		{"a path no route serves goes to any", "GET", "/v1/nosuch", "", "", "a"},
	} {
		status, got := send(t, tc.method, url+tc.path, tc.host, tc.body)
		if status != http.StatusOK || got.Node != tc.node || got.Body != tc.body || got.Auth != "Bearer wk_key" {
			t.Errorf("%s: status %d, answer %+v; want node %s with the body and key", tc.name, status, got, tc.node)
		}
		if tc.host != "" && got.Host != tc.host {
			t.Errorf("%s: the node saw host %q", tc.name, got.Host)
		}
	}
	want := []control.Placement{
		{Template: "py", Count: 1, Spec: api.SandboxSpec{CPUs: 2, MemoryMB: 512}},
		{Snapshot: "sn-1", Count: 3, Spec: api.SandboxSpec{Runtime: "vm"}},
		{Snapshot: "sn-2", Count: 1},
		{Snapshot: "nightly", Tenant: "acme", Count: 2},
	}
	if fmt.Sprint(fleet.placed) != fmt.Sprint(want) {
		t.Errorf("placements %+v, want %+v", fleet.placed, want)
	}
	// The sandboxes the placed requests and the fork started are known to
	// be there; an answer replayed to a retry says nothing of where its
	// sandboxes run.
	if got := strings.Join(fleet.started, "; "); got != "b: sb-new; b: sb-r1 sb-r2; b: sb-k1 sb-k2" {
		t.Errorf("started %q, want b's create, first restore and fork", got)
	}
}

// TestFrontFollowsEveryRoute: a request of every route of the API's table
// reaches the node its rule names, with its method and path as sent.
func TestFrontFollowsEveryRoute(t *testing.T) {
	fleet, url := newTestFront(t)
	fleet.place = "c"
	// Each rule's node, and the {id} a request of its routes names.
	nodes := map[control.Rule]struct{ node, id string }{
		control.AnyNode:      {"a", "sb-b"}, // an ID of b's sandbox, to show it goes to any node all the same
		control.SandboxNode:  {"b", "sb-b"},
		control.ParentNode:   {"b", "sb-b"},
		control.PlaceCreate:  {"c", ""},
		control.PlaceRestore: {"c", "sn-9"},
		control.NamedNode:    {"d", "d"},
		control.Local:        {"front", ""},
	}
	wildcard := regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)
	table := server.New(nil, nil, nil, slog.New(slog.DiscardHandler), server.Options{}).RouteTable()
	for _, rt := range table {
		want, ok := nodes[rt.Rule]
		if !ok {
			t.Errorf("route %s: rule %s, which this test does not know", rt, rt.Rule)
			continue
		}
		path := wildcard.ReplaceAllStringFunc(rt.Pattern, func(w string) string {
			if w == "{id}" {
				return want.id
			}
			return "x1"
		})
		method := cmp.Or(rt.Method, "PATCH")
		status, got := send(t, method, url+path, "", "")
		if status != http.StatusOK || got.Node != want.node || got.Method != method || got.Path != path {
			t.Errorf("%s %s (route %s, %s): status %d, answer %+v; want node %s", method, path, rt, rt.Rule, status, got, want.node)
		}
	}
}

// TestFrontRequestID: a request keeps the ID the replica gave it on its
// way to the node, which gets it in reqid.FleetHeader whatever the client
// sent there; the answer carries that one X-Request-Id, the node's own
// left out; the client's X-Request-Id reaches the node untouched.
func TestFrontRequestID(t *testing.T) {
	fleet, url := newTestFront(t)
	for _, tc := range []struct{ name, method, path, body string }{
		{"a sandbox's route", "GET", "/v1/sandboxes/sb-b", ""},
		{"a placed create", "POST", "/v1/sandboxes", `{}`},
		{"any node's", "GET", "/v1/snapshots", ""},
	} {
		req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer wk_key")
		req.Header.Set(reqid.Header, "client-own")
		req.Header.Set(reqid.FleetHeader, "0123456789abcdef")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got answer
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		ids := resp.Header.Values(reqid.Header)
		if len(ids) != 1 || !reqid.Valid(ids[0]) || got.FleetID != ids[0] || got.ClientID != "client-own" {
			t.Errorf("%s: the answer's X-Request-Id %q, the node got %q (and the client's %q); want one ID, the replica's, given to the node",
				tc.name, ids, got.FleetID, got.ClientID)
		}
	}
	// A node that does not answer: the replica's answer, with its ID.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	fleet.nodes["b"] = control.Remote(testMember(t, pki.Control), "b", dead, slog.New(slog.DiscardHandler), writeTestError)
	resp, err := http.Get(url + "/v1/sandboxes/sb-b")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ids := resp.Header.Values(reqid.Header); resp.StatusCode != http.StatusServiceUnavailable || len(ids) != 1 || !reqid.Valid(ids[0]) {
		t.Errorf("a dead node's answer: %d with X-Request-Id %q; want 503 with the replica's one ID", resp.StatusCode, ids)
	}
}

// TestFrontPassesBodiesItCannotRead: a create body over the bound, or one
// that is not JSON, is placed as an empty request and reaches the node
// whole, which refuses it with the reason.
func TestFrontPassesBodiesItCannotRead(t *testing.T) {
	fleet, url := newTestFront(t)
	big := `{"template":"` + strings.Repeat("x", 3*control.PeekFree) + `"}`
	for _, body := range []string{big, `{"cpus":`} {
		_, got := send(t, "POST", url+"/v1/sandboxes", "", body)
		if got.Node != "b" || got.Body != body {
			t.Errorf("body of %d bytes: the node got %d bytes (node %q)", len(body), len(got.Body), got.Node)
		}
	}
	for _, p := range fleet.placed {
		if p.Template != "" {
			t.Errorf("placed %+v from a body it could not read", p)
		}
	}
}

// TestFrontErrors: a placement the fleet refuses, and a node that does
// not answer, come back as API errors.
func TestFrontErrors(t *testing.T) {
	fleet, url := newTestFront(t)
	fleet.placeErr = api.Errorf(api.CodeUnavailable, "no node has 64 vCPUs free")
	status, eb := sendForError(t, "POST", url+"/v1/sandboxes", "Bearer wk_key", `{"cpus":64}`)
	if status != http.StatusServiceUnavailable || eb.Error.Message != "no node has 64 vCPUs free" {
		t.Errorf("refused placement: %d %+v", status, eb)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	fleet.nodes["a"] = control.Remote(testMember(t, pki.Control), "a", dead, slog.New(slog.DiscardHandler), writeTestError)
	if status, eb := sendForError(t, "GET", url+"/v1/sandboxes/sb-a", "Bearer wk_key", ""); status != http.StatusServiceUnavailable || eb.Error.Message != "node a did not answer" {
		t.Errorf("dead node: %d %+v", status, eb)
	}
	// The metrics of a node the fleet does not have: 404 for a caller
	// with a key, 401 without.
	if status, eb := sendForError(t, "GET", url+"/v1/nodes/nosuch/metrics", "Bearer wk_key", ""); status != http.StatusNotFound || eb.Error.Code != api.CodeNotFound {
		t.Errorf("an unknown node's metrics: %d %+v", status, eb)
	}
	if status, _ := sendForError(t, "GET", url+"/v1/nodes/nosuch/metrics", "", ""); status != http.StatusUnauthorized {
		t.Errorf("an unknown node's metrics without a key: %d, want 401", status)
	}
}

// TestFrontReadsNoBodyWithoutAKey: a create or restore without a good key
// and a body longer than a request's headers may be is refused at the
// front, before the rest of its body is read or it is placed; a short one
// goes on to the node, which refuses it. A restore by name, which places
// the caller's snapshot of that name, is refused whatever its body.
func TestFrontReadsNoBodyWithoutAKey(t *testing.T) {
	fleet, url := newTestFront(t)
	long := `{"template":"` + strings.Repeat("x", control.PeekFree) + `"}`
	for _, tc := range []struct{ path, body string }{
		{"/v1/sandboxes", long},
		{"/v1/snapshots/sn-1/restore", long},
		{"/v1/snapshots/nightly/restore", `{}`},
	} {
		if status, eb := sendForError(t, "POST", url+tc.path, "Bearer wk_stolen", tc.body); status != http.StatusUnauthorized || eb.Error.Code != api.CodeUnauthorized {
			t.Errorf("POST %s with a bad key: %d %+v", tc.path, status, eb)
		}
	}
	if len(fleet.placed) != 0 {
		t.Errorf("placed %+v for callers without a key", fleet.placed)
	}
}

// testMember is a member of role of a fleet of its own.
func testMember(t *testing.T, role pki.Role) *pki.Member {
	t.Helper()
	return pkitest.Member(t, pkitest.CA(t, "x"), pki.Identity{Role: role, Name: "m1"})
}

// sendForError sends a request with the Authorization header auth and
// returns the status and error body of the answer.
func sendForError(t *testing.T, method, url, auth, body string) (int, api.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb
}

// writeTestError answers err as the API's error body.
func writeTestError(w http.ResponseWriter, r *http.Request, err error) {
	ae, ok := err.(*api.Error)
	if !ok {
		ae = api.Errorf(api.CodeInternal, "internal error")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Status())
	json.NewEncoder(w).Encode(api.ErrorBody{Error: *ae})
}

// TestFrontStreams: what a node flushes reaches the client at once, and an
// upgraded connection carries bytes both ways.
func TestFrontStreams(t *testing.T) {
	_, url := newTestFront(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/sandboxes/sb-b/processes/1/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "first\n" {
		t.Fatalf("first line of the stream: %q, %v", line, err)
	}
	cancel()
	resp.Body.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sandboxes/sb-b/ports/8080/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	up, err := http.ReadResponse(br, nil)
	if err != nil || up.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", up, err)
	}
	fmt.Fprintf(conn, "hello\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := br.ReadString('\n'); got != "b echoes hello\n" {
		t.Errorf("through the upgrade: %q, %v", got, err)
	}
}
