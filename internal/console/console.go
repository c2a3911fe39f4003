// Package console serves warren's web console: the static files that
// console/ compiles into dist (HTML, CSS and ES modules, the TypeScript
// SDK's among them), embedded in the binary. It serves files only: the
// page calls the API from the browser with the key it is given, and no
// route here reads a key or a sandbox. When the console was not built,
// every path answers a page that says how to build it.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

//go:embed all:dist
var dist embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console"

// file is one embedded file, ready to serve.
type file struct {
	body []byte
	typ  string
	etag string
}

// Handler serves the console's files under Prefix. Safe for concurrent
// use: its files are read once, by New.
type Handler struct {
	// files by path below dist ("index.html", "console/src/main.js");
	// empty when the console was not built.
	files map[string]file
}

var _ http.Handler = (*Handler)(nil)

// types are the content types of the files the build writes; a file of
// another extension is served as bytes.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
	".txt":  "text/plain; charset=utf-8",
}

// New returns the handler of the embedded console.
func New() *Handler {
	return newHandler(dist)
}

// newHandler serves the files under "dist" of fsys.
func newHandler(fsys fs.FS) *Handler {
	h := &Handler{files: map[string]file{}}
	sub, err := fs.Sub(fsys, "dist")
	if err != nil {
		return h
	}
	fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "README.txt" {
			return nil
		}
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return nil
		}
		sum := sha256.Sum256(body)
		typ, ok := types[path.Ext(p)]
		if !ok {
			typ = "application/octet-stream"
		}
		h.files[p] = file{body: body, typ: typ, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if _, ok := h.files["index.html"]; !ok {
		h.files = map[string]file{}
	}
	return h
}

// Built says whether the console was built into the binary.
func (h *Handler) Built() bool { return len(h.files) > 0 }

// ServeHTTP serves GET and HEAD of Prefix and the paths below it: Prefix
// itself redirects to Prefix/, whose page is index.html, so that the
// page's relative URLs resolve below Prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header(), r.Host)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	switch {
	case !ok || rest != "" && rest[0] != '/':
		http.NotFound(w, r)
		return
	case rest == "":
		w.Header().Set("Cache-Control", "no-cache")
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		return
	}
	if !h.Built() {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", types[".html"])
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(notBuilt))
		return
	}
	name := strings.TrimPrefix(rest, "/")
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "no such file in the console: "+name, http.StatusNotFound)
		return
	}
	// File names carry no hash of their contents: the browser asks again
	// each time, and the ETag makes an unchanged file a 304.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Type", f.typ)
	w.Header().Set("ETag", f.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}

// hostPattern is a Host header safe to write into the CSP (a name or
// address and a port; nothing that could end the directive).
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// setSecurityHeaders confines the page: its own scripts and styles only
// (no inline script, nothing from elsewhere), its API calls and the
// terminal's WebSocket to its own origin, never framed, never sent as a
// referrer, never sniffed.
func setSecurityHeaders(h http.Header, host string) {
	connect := "'self'"
	if hostPattern.MatchString(host) {
		connect += " ws://" + host + " wss://" + host
	}
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src "+connect+
		"; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// notBuilt is the page of a binary built without the console.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>warren console: not built</title></head>
<body><h1>The console is not built into this binary</h1>
<p>This warren was compiled before its web console was. Build the console, then warren, from the repository's root:</p>
<pre>npm ci --prefix console &amp;&amp; npm run build --prefix console
go build -o bin/warren ./cmd/warren</pre>
<p>(<code>scripts/deps.sh</code> does all of it.)</p>
</body></html>
`
