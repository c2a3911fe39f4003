package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestRegistry: requests, operations and gauges read at scrape appear with
// their labels; a route of none is "other"; a gauge whose labels do not
// fit its family is reported as an error, not dropped silently; a nil
// registry takes records and does nothing.
func TestRegistry(t *testing.T) {
	r := New()
	r.Request("GET /v1/info", 200, time.Millisecond)
	r.Request("", 404, time.Millisecond)
	r.Observe(OpCreate, 30*time.Millisecond)
	n := 0.0
	r.Gauges([]Family{{Name: "test_things", Help: "Things.", Labels: []string{"kind"}}, {Name: "test_total", Help: "All.", Counter: true}},
		func() [][]Sample {
			n++
			return [][]Sample{{{Labels: []string{"a"}, Value: n}, {Labels: []string{"b"}, Value: 2 * n}}, {{Value: 7}}}
		})
	text := scrape(t, r)
	for _, want := range []string{
		`warren_api_requests_total{code="200",route="GET /v1/info"} 1`,
		`warren_api_requests_total{code="404",route="other"} 1`,
		`warren_operation_duration_seconds_count{op="create"} 1`,
		`warren_operation_duration_seconds_sum{op="create"} 0.03`,
		`test_things{kind="a"} 1`, `test_things{kind="b"} 2`, "test_total 7",
		"# TYPE test_things gauge", "# TYPE test_total counter",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q:\n%s", want, text)
		}
	}
	if text := scrape(t, r); !strings.Contains(text, `test_things{kind="a"} 2`) {
		t.Error("gauges are not read again at each scrape")
	}

	bad := New()
	bad.Gauges([]Family{{Name: "test_bad", Help: "Bad.", Labels: []string{"kind"}}}, func() [][]Sample {
		return [][]Sample{{{Labels: []string{"a", "extra"}, Value: 1}}}
	})
	rec := httptest.NewRecorder()
	bad.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 500 {
		t.Errorf("a gauge with the wrong labels: scrape %d, want 500", rec.Code)
	}

	var none *Registry
	none.Request("GET /x", 200, time.Second)
	none.Observe(OpExec, time.Second)
	none.Gauges([]Family{{Name: "test_none", Help: "None."}}, nil)
}
