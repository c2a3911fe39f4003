//go:build linux

package sandbox_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"warren/api"
)

// TestManagerMetrics: a scrape reads the manager's sandboxes by runtime and
// state, its capacity against what it promised, and the time of its
// creates; no sandbox ID is a label.
func TestManagerMetrics(t *testing.T) {
	h := newHarness(t)
	sb, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{CPUs: 1, MemoryMB: 256}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`warren_sandboxes{runtime="container",state="running"} 1`,
		`warren_sandboxes{runtime="container",state="paused"} 0`,
		`warren_node_capacity{resource="cpus"} `,
		`warren_node_claimed{resource="cpus"} 1`,
		`warren_memory_images{state="ready"} 0`,
		`warren_operation_duration_seconds_count{op="create"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(text, sb.ID) {
		t.Error("a sandbox ID is a label value")
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}

	// A sandbox asleep in the blob store counts paused, and its pause and
	// wake are timed.
	asleep := h.createWith(api.Lifecycle{}, true)
	if _, err := h.Manager.Pause(context.Background(), tenant, asleep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Manager.Resume(context.Background(), tenant, asleep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Manager.Pause(context.Background(), tenant, asleep.ID); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ = io.ReadAll(rec.Body)
	for _, want := range []string{
		`warren_sandboxes{runtime="container",state="paused"} 1`,
		`warren_operation_duration_seconds_count{op="pause"} 2`,
		`warren_operation_duration_seconds_count{op="wake"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
