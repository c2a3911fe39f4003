//go:build linux

package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"warren/api"
	"warren/client"
)

// scrapeMetrics reads the shared daemon's /metrics with key, returning the
// status and the body.
func scrapeMetrics(t *testing.T, key string) (int, string) {
	t.Helper()
	return scrapeAt(t, shared.url+"/metrics", key)
}

// scrapeAt reads the metrics at url with key, returning the status and
// the body.
func scrapeAt(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return do(t, req)
}

// value is the value of series (name and labels, as the scrape writes
// them) in text, 0 when it has none.
func value(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil { // a series not yet observed: a histogram's label before its first value
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMetricsScrape: the real daemon's /metrics, for the admin key and a
// key of scope metrics only (which can do nothing else),
// counts a sandbox it runs and the create and exec that made and used it.
func TestMetricsScrape(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	k, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "metrics-tenant"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := scrapeMetrics(t, k.Key); code != http.StatusForbidden {
		t.Errorf("a tenant's scrape: %d, want 403", code)
	}
	scraper, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: "metrics-tenant", Scope: api.KeyScopeMetrics})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := scrapeMetrics(t, scraper.Key); code != http.StatusOK {
		t.Errorf("a metrics key's scrape: %d, want 200", code)
	}
	if _, err := client.New(shared.url, scraper.Key).ListSandboxes(ctx); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("a metrics key lists sandboxes: %v, want forbidden", err)
	}
	_, before := scrapeMetrics(t, shared.key)
	creates := value(t, before, `warren_operation_duration_seconds_count{op="create"}`)
	running := value(t, before, `warren_sandboxes{runtime="container",state="running"}`)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: "container", MemoryMB: 160}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	code, after := scrapeMetrics(t, shared.key)
	if code != http.StatusOK {
		t.Fatalf("the admin's scrape: %d", code)
	}
	if got := value(t, after, `warren_operation_duration_seconds_count{op="create"}`); got != creates+1 {
		t.Errorf("creates timed: %v, want %v", got, creates+1)
	}
	if got := value(t, after, `warren_sandboxes{runtime="container",state="running"}`); got < running+1 {
		t.Errorf("running container sandboxes: %v, want at least %v", got, running+1)
	}
	if value(t, after, `warren_operation_duration_seconds_count{op="exec"}`) < 1 ||
		value(t, after, `warren_api_requests_total{code="201",route="POST /v1/sandboxes"}`) < 1 {
		t.Error("the exec or the create's request is not counted")
	}
}
