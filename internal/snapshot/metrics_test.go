//go:build linux

package snapshot_test

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"warren/internal/metrics"
)

// series reads the value of series (name and labels as a scrape writes
// them) from reg; -1 when the scrape has none.
func series(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUploadMetrics: while uploads are held up, the backlog counts them
// and ages; once durable, the backlog is empty and each upload is timed
// from its acknowledgement.
func TestUploadMetrics(t *testing.T) {
	fs := &faultStore{Store: openFileBlobs(t, t.TempDir())}
	release := make(chan struct{})
	fs.setOnPut(func(ctx context.Context, key string) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	cfg := testConfig()
	cfg.Metrics = metrics.New()
	n := newNode(t, "n1", fs, cfg)
	sb, disk := n.newDisk(t, n.template(t))
	sn, _ := n.take(t, tenant, sb, disk, "")
	time.Sleep(50 * time.Millisecond)
	if got := series(t, cfg.Metrics, "warren_snapshot_uploads"); got != 2 { // the template's base layer and the snapshot
		t.Errorf("uploads pending while held: %v, want 2", got)
	}
	if got := series(t, cfg.Metrics, "warren_snapshot_upload_oldest_seconds"); got < 0.05 {
		t.Errorf("oldest pending upload: %v s, want at least 0.05", got)
	}
	close(release)
	n.durable(t, sn.ID)
	n.durable(t, sn.Parent)
	if got := series(t, cfg.Metrics, "warren_snapshot_uploads"); got != 0 {
		t.Errorf("uploads pending once durable: %v, want 0", got)
	}
	if got := series(t, cfg.Metrics, "warren_snapshot_upload_oldest_seconds"); got != 0 {
		t.Errorf("oldest pending upload once durable: %v, want 0", got)
	}
	if got := series(t, cfg.Metrics, `warren_operation_duration_seconds_count{op="upload"}`); got != 2 {
		t.Errorf("uploads timed: %v, want 2", got)
	}
	if got := series(t, cfg.Metrics, `warren_operation_duration_seconds_sum{op="upload"}`); got < 0.1 {
		t.Errorf("uploads' time: %v s, want at least the 0.1 s they were held for together", got)
	}
}
