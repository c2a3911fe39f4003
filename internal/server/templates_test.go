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
// node, a tenant's behind its own, however many are sent.
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
	done := make(chan int, 4)
	start := func(key, name string) {
		go func() {
			resp, err := post(context.Background(), key, name)
			if err != nil {
				t.Error(err)
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	start(e.keyA, "t")
	wait.For(t, 10*time.Second, "a's build with a context running", func() bool { return tpls.now.Load() == 1 })
	// A second of a tenant's own waits behind its first, holding no turn
	// of the node's: b's still runs beside a's first.
	start(e.keyA, "u")
	start(e.keyB, "t")
	wait.For(t, 10*time.Second, "two builds with contexts running", func() bool { return tpls.now.Load() >= 2 })
	start("wk_test_c", "t")
	// Both wait: a's second behind a's first, c's for the node's turn.
	wait.For(t, 10*time.Second, "a's second and c's request waiting their turn", func() bool {
		tt := &e.srv.largeTemplateTenants
		tt.mu.Lock()
		defer tt.mu.Unlock()
		return tt.keys["a"] != nil && tt.keys["a"].n == 2 && tt.keys["c"] != nil
	})
	if n := tpls.now.Load(); n != 2 {
		t.Errorf("%d builds with contexts running of four sent, want 2", n)
	}
	free()
	for range 4 {
		if code := <-done; code != http.StatusAccepted {
			t.Errorf("a build with a context: %d, want 202", code)
		}
	}
	if m := tpls.most.Load(); m != 2 {
		t.Errorf("%d builds with contexts at once, want 2", m)
	}
}
