package server

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// heldTemplates is a Templates whose CreateTemplate holds until released,
// counting the calls at once.
type heldTemplates struct {
	Templates // nil: only CreateTemplate is called
	release   chan struct{}
	now, most atomic.Int32
}

func (h *heldTemplates) CreateTemplate(ctx context.Context, tenant string, req api.CreateTemplateRequest, progress func(api.TemplateBuildEvent)) (api.Template, error) {
	n := h.now.Add(1)
	defer h.now.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return api.Template{Name: req.Name}, nil
}

// TestLargeTemplateBodiesTakeTurns: POST /v1/templates with a build
// context holds the context in memory (base64, then decoded) until its
// build has it; such requests are read and built two at a time on the
// node, one per tenant, however many are sent.
func TestLargeTemplateBodiesTakeTurns(t *testing.T) {
	tpls := &heldTemplates{release: make(chan struct{})}
	e := newTestEnv(t, nil, Options{Templates: tpls})
	e.keys.add("wk_test_c", Key{Tenant: "c"})
	var once sync.Once
	free := func() { once.Do(func() { close(tpls.release) }) }
	t.Cleanup(free)
	body := func(name string) io.Reader {
		ctx := make([]byte, 2<<20)
		return strings.NewReader(`{"name":"` + name + `","spec":"steps: []","background":true,"context":"` + base64.StdEncoding.EncodeToString(ctx) + `"}`)
	}
	post := func(ctx context.Context, key, name string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/templates", body(name))
		req.Header.Set("Authorization", "Bearer "+key)
		return http.DefaultClient.Do(req)
	}
	done := make(chan int, 3)
	start := func(key string) {
		go func() {
			resp, err := post(context.Background(), key, "t")
			if err != nil {
				t.Error(err)
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	start(e.keyA)
	wait.For(t, 10*time.Second, "a's build with a context running", func() bool { return tpls.now.Load() == 1 })
	// A second of a tenant's own is refused while its first runs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := post(ctx, e.keyA, "u"); err != nil {
		t.Errorf("a's second request with a context while its first runs: %v, want 429 at once", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a's second request with a context while its first runs: %d, want 429", resp.StatusCode)
	}
	start(e.keyB)
	start("wk_test_c")
	wait.For(t, 10*time.Second, "two builds with contexts running", func() bool { return tpls.now.Load() >= 2 })
	free()
	for range 3 {
		if code := <-done; code != http.StatusAccepted {
			t.Errorf("a build with a context: %d, want 202", code)
		}
	}
	if m := tpls.most.Load(); m != 2 {
		t.Errorf("%d builds with contexts at once, want 2", m)
	}
}
