package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"warren/api"
)

// scrape reads e's metrics with the admin key.
func (e *testEnv) scrape() string {
	e.t.Helper()
	resp := e.do("GET", "/metrics", e.admin, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		e.t.Fatalf("scrape: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return string(body)
}

// TestMetrics: GET /metrics needs the admin key or a key of scope metrics,
// and counts the API's requests by route pattern and status, never by the
// sandbox's ID.
func TestMetrics(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	apiError(t, e.do("GET", "/metrics", "", nil), http.StatusUnauthorized, api.CodeUnauthorized)
	apiError(t, e.do("GET", "/metrics", e.keyA, nil), http.StatusForbidden, api.CodeForbidden)
	for range 3 {
		e.do("GET", "/v1/info", e.keyA, nil).Body.Close()
	}
	e.do("GET", "/v1/sandboxes/sb-nosuch", e.keyA, nil).Body.Close()
	e.do("GET", "/no/such/route", e.keyA, nil).Body.Close()
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, nil).Body.Close()
	text := e.scrape()
	for _, want := range []string{
		`warren_api_requests_total{code="200",route="GET /v1/info"} 3`,
		`warren_api_requests_total{code="404",route="GET /v1/sandboxes/{id}"} 1`,
		`warren_api_requests_total{code="404",route="other"} 1`,
		`warren_api_requests_total{code="401",route="GET /metrics"} 1`,
		`warren_api_requests_total{code="200",route="GET /v1/sandboxes/{id}"} 1`,
		`warren_api_request_duration_seconds_count{route="GET /v1/info"} 3`,
		"go_goroutines ", "process_open_fds ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(text, sb.ID) || strings.Contains(text, "sb-nosuch") {
		t.Error("a sandbox ID is a label value")
	}
	var scraper api.Key
	e.call("POST", "/v1/keys", e.admin, `{"tenant":"ops","scope":"metrics"}`, http.StatusCreated, &scraper)
	if scraper.Scope != api.KeyScopeMetrics {
		t.Fatalf("new key %+v", scraper)
	}
	e.call("GET", "/metrics", scraper.Key, nil, http.StatusOK, nil)
	// A scraper's key can do nothing else: not its tenant's API, not an
	// admin's.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes", ""}, {"POST", "/v1/sandboxes", "{}"}, {"GET", "/v1/info", ""}, {"GET", "/v1/keys", ""},
	} {
		apiError(t, e.do(r.method, r.path, scraper.Key, r.body), http.StatusForbidden, api.CodeForbidden)
	}
	apiError(t, e.do("POST", "/v1/keys", e.admin, `{"tenant":"ops","scope":"admin"}`), http.StatusBadRequest, api.CodeBadRequest)
}

// noFleet is a fleet of no nodes, for the routes a fleet's node serves.
type noFleet struct{}

func (noFleet) Nodes(context.Context) ([]api.FleetNode, error) { return nil, nil }
func (noFleet) NodeAction(_ context.Context, id, _ string) (api.FleetNode, error) {
	return api.FleetNode{}, api.Errorf(api.CodeNotFound, "no node %s", id)
}

// TestNodeMetrics: a fleet's node answers GET /v1/nodes/{its ID}/metrics
// (where the front sends a scrape of it), and 404 for another ID or on a
// single machine.
func TestNodeMetrics(t *testing.T) {
	one := newTestEnv(t, deadAgent(t), Options{})
	apiError(t, one.do("GET", "/v1/nodes/local/metrics", one.admin, nil), http.StatusNotFound, api.CodeNotFound)

	e := newTestEnv(t, deadAgent(t), Options{Fleet: noFleet{}, NodeID: "n1"})
	resp := e.do("GET", "/v1/nodes/n1/metrics", e.admin, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines ") {
		t.Errorf("the node's own metrics: %d\n%.300s", resp.StatusCode, body)
	}
	apiError(t, e.do("GET", "/v1/nodes/n2/metrics", e.admin, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, e.do("GET", "/v1/nodes/n1/metrics", e.keyA, nil), http.StatusForbidden, api.CodeForbidden)
}

// TestMetricsOfForwardedRequests: a request the middleware wraps but no
// route of this process serves (a control replica's front sends it to a
// node) is counted under the route that would serve it.
func TestMetricsOfForwardedRequests(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	forward := e.srv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	for _, path := range []string{"/v1/sandboxes/sb-x", "/v1/sandboxes/sb-y", "/v1/sandboxes/sb-x/ports/80/a/b", "/no/such"} {
		forward.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	text := e.scrape()
	for _, want := range []string{
		`warren_api_requests_total{code="202",route="GET /v1/sandboxes/{id}"} 2`,
		`warren_api_requests_total{code="202",route="ANY /v1/sandboxes/{id}/ports/{port}/{path...}"} 1`,
		`warren_api_requests_total{code="202",route="other"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
