package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	r.Host = "127.0.0.1:7777"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func checkSecurityHeaders(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	want := map[string]string{
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
		"X-Frame-Options":        "DENY",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: got %q, want %q", k, got, v)
		}
	}
	csp := w.Header().Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self' ws://127.0.0.1:7777 wss://127.0.0.1:7777", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q allows inline code", csp)
	}
}

func TestNotBuilt(t *testing.T) {
	h := newHandler(fstest.MapFS{"dist/README.txt": {Data: []byte("generated")}})
	if h.Built() {
		t.Fatal("Built() with only README.txt")
	}
	for _, p := range []string{"/console/", "/console/app.js"} {
		w := get(t, h, p)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "npm run build --prefix console") {
			t.Errorf("GET %s: got %d %q, want 503 and how to build it", p, w.Code, w.Body.String())
		}
		checkSecurityHeaders(t, w)
	}
}

func TestServe(t *testing.T) {
	h := newHandler(fstest.MapFS{
		"dist/README.txt":           {Data: []byte("generated")},
		"dist/index.html":           {Data: []byte("<!doctype html><title>warren</title>")},
		"dist/style.css":            {Data: []byte("body{}")},
		"dist/console/src/main.js":  {Data: []byte("export {};")},
		"dist/sdk/typescript/x.bin": {Data: []byte{0, 1}},
	})
	tests := []struct {
		path, typ string
		code      int
	}{
		{"/console/", "text/html; charset=utf-8", 200},
		{"/console/index.html", "text/html; charset=utf-8", 200},
		{"/console/style.css", "text/css; charset=utf-8", 200},
		{"/console/console/src/main.js", "text/javascript; charset=utf-8", 200},
		{"/console/sdk/typescript/x.bin", "application/octet-stream", 200},
		{"/console/README.txt", "text/plain; charset=utf-8", 404},
		{"/console/nope.js", "text/plain; charset=utf-8", 404},
		{"/consolex", "text/plain; charset=utf-8", 404},
	}
	for _, tt := range tests {
		w := get(t, h, tt.path)
		if w.Code != tt.code || w.Header().Get("Content-Type") != tt.typ {
			t.Errorf("GET %s: got %d %q, want %d %q", tt.path, w.Code, w.Header().Get("Content-Type"), tt.code, tt.typ)
		}
		checkSecurityHeaders(t, w)
		if tt.code == 200 && w.Header().Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", tt.path, w.Header().Get("Cache-Control"))
		}
	}
	if w := get(t, h, "/console"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/console/" {
		t.Errorf("GET /console: got %d to %q, want 301 to /console/", w.Code, w.Header().Get("Location"))
	}
	w := get(t, h, "/console/style.css")
	if w2 := get(t, h, "/console/style.css", "If-None-Match", w.Header().Get("ETag")); w2.Code != http.StatusNotModified {
		t.Errorf("GET with the ETag: got %d, want 304", w2.Code)
	}
	r := httptest.NewRequest("POST", "/console/", nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: got %d, want 405", w.Code)
	}
}

// A Host that could end a CSP directive is left out of it.
func TestHostNotInjected(t *testing.T) {
	h := http.Header{}
	setSecurityHeaders(h, "evil; script-src *")
	if csp := h.Get("Content-Security-Policy"); strings.Contains(csp, "evil") {
		t.Errorf("Content-Security-Policy %q holds the Host", csp)
	}
}
