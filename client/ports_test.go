package client

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"warren/api"
)

func TestPreview(t *testing.T) {
	url := "https://{port}-sb-1.preview.example.com/"
	answer := api.Preview{Public: true, Token: "tok", URL: &url}
	var mu sync.Mutex
	var got []recorded
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, recorded{method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization"), body: body})
		mu.Unlock()
		json.NewEncoder(w).Encode(answer)
	}))
	p, err := c.Preview(t.Context(), "sb-1")
	if err != nil || !reflect.DeepEqual(*p, answer) || p.PortURL(8080) != "https://8080-sb-1.preview.example.com/" {
		t.Fatalf("Preview = %+v, %v", p, err)
	}
	yes := true
	if _, err := c.SetPreview(t.Context(), "sb-1", api.SetPreviewRequest{Public: &yes, RotateToken: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPreview(t.Context(), "sb-1", api.SetPreviewRequest{}); err != nil {
		t.Fatal(err)
	}
	want := []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/sb-1/preview", ""},
		{"PUT", "/v1/sandboxes/sb-1/preview", `{"public":true,"rotate_token":true}`},
		{"PUT", "/v1/sandboxes/sb-1/preview", `{}`},
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].method != w.method || got[i].path != w.path || got[i].auth != "Bearer "+testKey ||
			(w.body != "" && !sameJSON(got[i].body, w.body)) {
			t.Errorf("request %d: %s %s %q (auth %q), want %s %s %s", i, got[i].method, got[i].path, got[i].body, got[i].auth, w.method, w.path, w.body)
		}
	}
	if _, err := c.Preview(t.Context(), ""); err == nil {
		t.Error("Preview of an empty ID was sent")
	}
}

// A rotation whose answer was lost is not repeated; a plain change is.
func TestSetPreviewRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	yes := true
	c.SetPreview(t.Context(), "sb-1", api.SetPreviewRequest{RotateToken: true})
	mu.Lock()
	if calls != 1 {
		t.Errorf("rotation sent %d times, want once", calls)
	}
	calls = 0
	mu.Unlock()
	c.SetPreview(t.Context(), "sb-1", api.SetPreviewRequest{Public: &yes})
	mu.Lock()
	if calls != 3 {
		t.Errorf("public-only change sent %d times, want 3 (the test client's attempts)", calls)
	}
	mu.Unlock()
}

func TestPortRequest(t *testing.T) {
	var seen recorded
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = recorded{method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization"), query: r.URL.Query(), body: body}
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "the app's own")
	}))
	if got := c.PortURL("sb-1", 8080, "a/b"); !strings.HasSuffix(got, "/v1/sandboxes/sb-1/ports/8080/a/b") {
		t.Errorf("PortURL = %q", got)
	}
	resp, err := c.PortRequest(t.Context(), "POST", "sb-1", 8080, "/api/x?q=1", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(body) != "the app's own" {
		t.Errorf("answer %d %q, want the sandbox's as it is", resp.StatusCode, body)
	}
	if seen.method != "POST" || seen.path != "/v1/sandboxes/sb-1/ports/8080/api/x" || seen.query.Get("q") != "1" ||
		string(seen.body) != "hi" || seen.auth != "Bearer "+testKey {
		t.Errorf("request %+v", seen)
	}
	if _, err := c.PortRequest(t.Context(), "GET", "", 80, "/", nil); err == nil {
		t.Error("PortRequest with an empty ID was sent")
	}
}
