package server

import (
	"io"
	"net/http"
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

// TestMetrics: GET /metrics needs the admin key, and counts the API's
// requests by route pattern and status, never by the sandbox's ID.
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
}
