package e2b

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	pathpkg "path"
	"reflect"
	"strings"
	"sync"
	"testing"

	"warren/api"
)

// fakeAPI records the warren calls the translation makes and answers them
// from a table: "METHOD PATH" → status and body.
type fakeAPI struct {
	mu      sync.Mutex // guards every field: the translation may call from its goroutines
	calls   []string
	headers []http.Header
	bodies  []string
	answers map[string]struct {
		status int
		body   any
	}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.RequestURI()+" @"+r.Host)
	f.headers = append(f.headers, r.Header.Clone())
	f.bodies = append(f.bodies, string(b))
	a, ok := f.answers[r.Method+" "+r.URL.Path]
	if !ok {
		a.status, a.body = http.StatusTeapot, api.ErrorBody{Error: *api.Errorf(api.CodeNotFound, "no answer for %s %s", r.Method, r.URL.Path)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	json.NewEncoder(w).Encode(a.body)
}

func (f *fakeAPI) answer(route string, status int, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers == nil {
		f.answers = map[string]struct {
			status int
			body   any
		}{}
	}
	f.answers[route] = struct {
		status int
		body   any
	}{status, body}
}

const sbID = "sb-abcdefghijklmnopqrst"

func TestAddressing(t *testing.T) {
	for _, tc := range []struct {
		name, host, path string
		header           map[string]string
		want             string // the call next gets, "" for none
		status           int    // when want is ""
	}{
		{"envd host", "49983-" + sbID + ".e2b.test:8443", "/process.Process/Start", nil,
			"POST /v1/sandboxes/" + sbID + "/agent/process.Process/Start @e2b.test", 0},
		{"envd single URL", "warren:7777", "/e2b/files?path=%2Fx", map[string]string{"E2b-Sandbox-Id": sbID},
			"POST /v1/sandboxes/" + sbID + "/agent/files?path=%2Fx @warren:7777", 0},
		{"other port single URL", "warren:7777", "/e2b/health", map[string]string{"E2b-Sandbox-Id": sbID, "E2b-Sandbox-Port": "8080"},
			"", http.StatusBadRequest},
		{"bad sandbox ID", "49983-nope.e2b.test", "/health", nil, "", http.StatusNotFound},
		{"a path that climbs", "49983-" + sbID + ".e2b.test", "/process.Process%2F..%2F..%2Fkeys", nil, "", http.StatusNotFound},
		{"an older SDK's ID-CLIENTID", "49983-" + sbID + "-warren.e2b.test", "/health", nil,
			"POST /v1/sandboxes/" + sbID + "/agent/health @e2b.test", 0},
		{"preview host", "8080-" + sbID + ".e2b.test", "/x", nil, "POST /x @8080-" + sbID + ".e2b.test", 0},
		{"warren API", "warren:7777", "/v1/sandboxes", nil, "POST /v1/sandboxes @warren:7777", 0},
		{"prefix needs a slash", "warren:7777", "/e2bx", nil, "POST /e2bx @warren:7777", 0},
		{"control API by prefix", "warren:7777", "/e2b/nothing", nil, "", http.StatusNotFound},
		{"control API by host", "api.e2b.test:8443", "/nothing", nil, "", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{}
			h := New(f, Options{Domain: "e2b.test:8443"})
			r := httptest.NewRequest("POST", tc.path, strings.NewReader(""))
			r.Host = tc.host
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch {
			case tc.want != "" && (len(f.calls) != 1 || f.calls[0] != tc.want):
				t.Errorf("calls %q, want %q", f.calls, tc.want)
			case tc.want == "" && (len(f.calls) != 0 || w.Code != tc.status):
				t.Errorf("calls %q and status %d, want none and %d (body %s)", f.calls, w.Code, tc.status, w.Body)
			}
		})
	}
}

func TestTrafficToken(t *testing.T) {
	f := &fakeAPI{}
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = "8080-" + sbID + ".e2b.test"
	r.Header.Set("E2b-Traffic-Access-Token", "tok")
	New(f, Options{Domain: "e2b.test"}).ServeHTTP(httptest.NewRecorder(), r)
	if got := f.headers[0].Get("X-Warren-Access-Token"); got != "tok" {
		t.Errorf("X-Warren-Access-Token %q, want the traffic token", got)
	}
}

func TestCreate(t *testing.T) {
	f := &fakeAPI{}
	f.answer("POST /v1/sandboxes", http.StatusCreated, api.Sandbox{ID: sbID, Template: "default", AgentToken: "agent-tok"})
	f.answer("PUT /v1/sandboxes/"+sbID+"/preview", http.StatusOK, api.Preview{Token: "preview-tok"})
	h := New(f, Options{Domain: "e2b.test"})
	r := httptest.NewRequest("POST", "/e2b/v2/sandboxes", strings.NewReader(
		`{"templateID":"base","timeout":60,"envVars":{"A":"1"},"metadata":{"k":"v"},"network":{"allowPublicTraffic":false,"denyOut":["0.0.0.0/0"],"allowOut":["pypi.org"]},"someFutureField":1}`))
	r.Header.Set("X-API-KEY", "key1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var got sandbox
	json.Unmarshal(w.Body.Bytes(), &got)
	want := sandbox{TemplateID: "base", SandboxID: sbID, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: "agent-tok", TrafficAccessToken: "preview-tok", Domain: "e2b.test"}
	if got != want {
		t.Errorf("answer %+v, want %+v", got, want)
	}
	var req api.CreateSandboxRequest
	json.Unmarshal([]byte(f.bodies[0]), &req)
	wantReq := api.CreateSandboxRequest{Template: "default", SandboxSpec: api.SandboxSpec{
		TimeoutSeconds: 60, Env: map[string]string{"A": "1"}, Metadata: map[string]string{"k": "v"},
		Network: &api.NetworkPolicy{Allow: []string{"pypi.org"}}}}
	if !reflect.DeepEqual(req, wantReq) {
		t.Errorf("warren create %+v, want %+v", req, wantReq)
	}
	if k := f.headers[0].Get("X-API-Key"); k != "key1" {
		t.Errorf("the create's key %q, want the caller's", k)
	}
	if f.bodies[1] != `{"public":false}` {
		t.Errorf("preview %s, want private", f.bodies[1])
	}
}

func TestErrors(t *testing.T) {
	f := &fakeAPI{}
	f.answer("GET /v1/sandboxes/"+sbID, http.StatusOK, api.Sandbox{ID: sbID, State: api.StateStopped})
	f.answer("POST /v1/sandboxes", http.StatusTooManyRequests, api.ErrorBody{Error: *api.Errorf(api.CodeTooMany, "quota")})
	h := New(f, Options{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		message            string
	}{
		{"POST", "/e2b/sandboxes", `{"autoResume":{"enabled":true}}`, 400, "autoResume"},
		{"POST", "/e2b/sandboxes", `{"templateID":`, 400, "malformed JSON"},
		{"POST", "/e2b/sandboxes", `{}`, 429, "quota"},
		{"GET", "/e2b/sandboxes/" + sbID, ``, 404, "stopped"},
		{"DELETE", "/e2b/sandboxes/nope", ``, 404, "not found"},
		{"POST", "/e2b/templates/tags", `{}`, 501, "templates"},
		{"GET", "/e2b/v2/sandboxes?state=dead", ``, 400, "bad state"},
	} {
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var b body
		json.Unmarshal(w.Body.Bytes(), &b)
		if w.Code != tc.status || b.Code != tc.status || !strings.Contains(b.Message, tc.message) {
			t.Errorf("%s %s %s: %d %+v, want %d and a message with %q", tc.method, tc.path, tc.body, w.Code, b, tc.status, tc.message)
		}
	}
}

func TestPolicyOf(t *testing.T) {
	no, yes := false, true
	for _, tc := range []struct {
		internet *bool
		n        *network
		want     *api.NetworkPolicy
		public   bool
	}{
		{nil, nil, nil, true},
		{&no, nil, &api.NetworkPolicy{None: true}, true},
		{&yes, &network{AllowPublicTraffic: &no}, nil, false},
		{nil, &network{DenyOut: []string{"1.2.3.4"}}, &api.NetworkPolicy{Deny: []string{"1.2.3.4"}}, true},
		{nil, &network{DenyOut: []string{"0.0.0.0/0"}}, &api.NetworkPolicy{None: true}, true},
		{nil, &network{DenyOut: []string{"0.0.0.0/0", "10.0.0.1"}, AllowOut: []string{"a.com"}},
			&api.NetworkPolicy{Allow: []string{"a.com"}, Deny: []string{"10.0.0.1"}}, true},
	} {
		got, public, err := policyOf(tc.internet, tc.n)
		if err != nil || !reflect.DeepEqual(got, tc.want) || public != tc.public {
			t.Errorf("policyOf(%v, %+v) = %+v, %v, %v; want %+v, %v", tc.internet, tc.n, got, public, err, tc.want, tc.public)
		}
	}
}

// TestNetworkRules: E2B's network.rules become warren's, destinations in
// lower case and E2B's placeholders as they are, on create and on the
// network update; what warren cannot do is refused with a 400 saying so,
// and warren's own 400 about the rules is passed on.
func TestNetworkRules(t *testing.T) {
	const rules = `{"API.Example.com":[{"transform":{"headers":{"X-Api-Key":"${e2b.secrets.k}"}}}],"*.example.org":[{}]}`
	want := map[string][]api.NetworkRule{
		"api.example.com": {{Transform: &api.Transform{Headers: map[string]string{"X-Api-Key": "${e2b.secrets.k}"}}}},
		"*.example.org":   {{}},
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		message                  string             // in the error, when status is one
		policy                   *api.NetworkPolicy // what warren is sent
	}{
		{"create with rules", "POST", "/e2b/sandboxes", `{"network":{"rules":` + rules + `}}`,
			http.StatusCreated, "", &api.NetworkPolicy{Rules: want}},
		{"create with rules and an allow list", "POST", "/e2b/sandboxes", `{"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":` + rules + `}}`,
			http.StatusCreated, "", &api.NetworkPolicy{Allow: []string{"api.example.com"}, Rules: want}},
		{"create with no rules", "POST", "/e2b/sandboxes", `{"network":{"rules":{}}}`,
			http.StatusCreated, "", nil},
		{"update with rules, without internet", "PUT", "/e2b/sandboxes/" + sbID + "/network", `{"allow_internet_access":false,"rules":` + rules + `}`,
			http.StatusNoContent, "", &api.NetworkPolicy{None: true, Rules: want}},
		{"update without rules clears them", "PUT", "/e2b/sandboxes/" + sbID + "/network", `{"denyOut":["10.0.0.1"]}`,
			http.StatusNoContent, "", &api.NetworkPolicy{Deny: []string{"10.0.0.1"}}},
		{"a rule's field warren does not know", "POST", "/e2b/sandboxes", `{"network":{"rules":{"a.com":[{"transform":{"body":"x"}}]}}}`,
			http.StatusBadRequest, `unknown field "body"`, nil},
		{"a destination named twice", "PUT", "/e2b/sandboxes/" + sbID + "/network", `{"rules":{"A.com":[],"a.COM":[]}}`,
			http.StatusBadRequest, "named twice", nil},
		{"rules of the wrong shape", "POST", "/e2b/sandboxes", `{"network":{"rules":["a.com"]}}`,
			http.StatusBadRequest, "network.rules", nil},
		{"egressProxy", "POST", "/e2b/sandboxes", `{"network":{"egressProxy":{"address":"p:1080"}}}`,
			http.StatusBadRequest, "egressProxy is not supported", nil},
		{"maskRequestHost", "POST", "/e2b/sandboxes", `{"network":{"maskRequestHost":"${PORT}-x.example.com"}}`,
			http.StatusBadRequest, "maskRequestHost is not supported", nil},
		{"warren's refusal of the rules", "POST", "/e2b/sandboxes", `{"network":{"rules":{"a.com":[{"transform":{"headers":{"X":"${e2b.secrets.gone}"}}}]}}}`,
			http.StatusBadRequest, `no secret "gone"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{}
			if strings.Contains(tc.body, "gone") {
				f.answer("POST /v1/sandboxes", http.StatusBadRequest, api.ErrorBody{Error: *api.Errorf(api.CodeBadRequest, `network.rules: no secret "gone"`)})
			} else {
				f.answer("POST /v1/sandboxes", http.StatusCreated, api.Sandbox{ID: sbID})
			}
			f.answer("PUT /v1/sandboxes/"+sbID+"/preview", http.StatusOK, api.Preview{})
			f.answer("PUT /v1/sandboxes/"+sbID+"/network", http.StatusOK, api.NetworkStatus{})
			w := httptest.NewRecorder()
			New(f, Options{}).ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if w.Code >= 300 {
				var b body
				if json.Unmarshal(w.Body.Bytes(), &b) != nil || b.Code != w.Code || !strings.Contains(b.Message, tc.message) {
					t.Errorf("error %s, want E2B's with %q", w.Body, tc.message)
				}
				return
			}
			var got *api.NetworkPolicy
			if tc.method == "POST" {
				var req api.CreateSandboxRequest
				json.Unmarshal([]byte(f.bodies[0]), &req)
				got = req.Network
			} else {
				got = &api.NetworkPolicy{}
				json.Unmarshal([]byte(f.bodies[0]), got)
			}
			if !reflect.DeepEqual(got, tc.policy) {
				t.Errorf("policy sent %s, want %+v", f.bodies[0], tc.policy)
			}
		})
	}
}

func TestMetadataFilter(t *testing.T) {
	// As the JS SDK sends it: each key and value URL-encoded, then the
	// pairs in query form.
	got, err := metadataFilter("tag%3D1=a%2520b&x=y")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"tag=1": "a b", "x": "y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// FuzzHandler sends the translation arbitrary requests. It never panics,
// every answer of its own is E2B's JSON error body with the status it
// carries, and what it hands on to warren's API is a clean path.
func FuzzHandler(f *testing.F) {
	for _, seed := range []struct{ method, host, path, body string }{
		{"POST", "warren", "/e2b/v2/sandboxes", `{"templateID":"base","timeout":30}`},
		{"GET", "warren", "/e2b/v2/sandboxes?metadata=a%3Db&state=running,paused&limit=5", ``},
		{"POST", "warren", "/e2b/sandboxes/" + sbID + "/fork", `{"count":3}`},
		{"PUT", "api.e2b.test", "/sandboxes/" + sbID + "/network", `{"denyOut":["0.0.0.0/0"]}`},
		{"POST", "49983-" + sbID + ".e2b.test", "/process.Process/Start", `{}`},
		{"GET", "warren", "/e2b/v9/templates/x/y/z", ``},
		{"DELETE", "warren", "/e2b/templates/sn-abcdefghijklmnopqrst", ``},
		{"POST", "warren", "/e2b/v3/templates", `{"name":"app","cpuCount":2}`},
		{"GET", "warren", "/e2b/templates/app/files/0123abcd", ``},
		{"PUT", "warren", "/e2b/templates/app/files/0123abcd?token=up-x", `not a tar`},
		{"POST", "warren", "/e2b/v2/templates/app/builds/bld-x", `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`},
		{"GET", "warren", "/e2b/templates/app/builds/bld-x/status?logsOffset=0", ``},
		{"POST", "warren", "/e2b/secrets", `{"name":"openai-key","value":"v","metadata":{"a":"b"}}`},
		{"POST", "warren", "/e2b/secrets/sec_abcdefghijklmnopqrst", `{"value":"v"}`},
		{"GET", "warren", "/e2b/secrets?limit=2&nextToken=a", ``},
		{"DELETE", "warren", "/e2b/secrets/openai-key", ``},
		{"POST", "warren", "/e2b/sandboxes", `{"network":{"rules":{"A.com":[{"transform":{"headers":{"X":"${e2b.secrets.k}"}}}]}}}`},
	} {
		f.Add(seed.method, seed.host, seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, method, host, path, in string) {
		if !strings.HasPrefix(path, "/") {
			return
		}
		r, err := http.NewRequest(method, "http://x"+path, strings.NewReader(in))
		if err != nil {
			return
		}
		r.Host = host
		f := &fakeAPI{}
		f.answer("POST /v1/sandboxes", http.StatusCreated, api.Sandbox{ID: sbID, State: api.StateRunning})
		f.answer("GET /v1/sandboxes", http.StatusOK, api.SandboxList{Sandboxes: []api.Sandbox{{ID: sbID, State: api.StateRunning}}, NextPageToken: "next"})
		f.answer("GET /v1/sandboxes/"+sbID, http.StatusOK, api.Sandbox{ID: sbID, State: api.StateRunning})
		w := httptest.NewRecorder()
		New(f, Options{Domain: "e2b.test"}).ServeHTTP(w, r)
		for _, c := range f.calls {
			p := strings.Fields(c)[1]
			if p == r.URL.RequestURI() {
				continue // handed on as it came: warren's API's to judge
			}
			if u, err := url.Parse(p); err != nil || pathpkg.Clean(u.Path) != u.Path && u.Path != "/" {
				t.Errorf("handed on %q, whose path is not clean", c)
			}
		}
		if len(f.calls) > 0 && w.Code < 300 {
			return
		}
		if w.Code >= 300 && w.Code != http.StatusTeapot {
			var b body
			if json.Unmarshal(w.Body.Bytes(), &b) != nil || b.Code != w.Code || b.Message == "" {
				t.Errorf("%s %s on %s: %d %q, want E2B's error body", method, path, host, w.Code, w.Body)
			}
		}
	})
}
