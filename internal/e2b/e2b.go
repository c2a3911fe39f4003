// Package e2b lets E2B's SDKs (the `e2b` packages of npm and PyPI) run
// unmodified against warren (docs/E2B.md). It is a translation in front of
// warren's own API, and implements no sandbox operation of its own:
//
//   - E2B's control API (create, list, get, kill, timeout, pause, connect,
//     snapshots, fork, network, secrets) becomes calls of warren's routes, made
//     through the same handler an API request takes (the fleet's front),
//     with the caller's X-API-KEY as the warren key; their answers and
//     errors are put in E2B's shapes.
//   - E2B's in-sandbox API ("envd": its process and filesystem services,
//     /files, /health) becomes the sandbox's agent routes
//     (/v1/sandboxes/ID/agent/...), which the agent serves natively.
//
// Where E2B's SDKs find them: its control API at the path prefix /e2b of
// warren's API (E2B_API_URL=http://HOST:PORT/e2b), and, when warren has a
// preview domain, on the host api.<domain>; its in-sandbox API on the
// sandbox's host 49983-ID.<domain> (E2B_DOMAIN=<domain>), or at the same
// prefix /e2b with the E2b-Sandbox-Id header (E2B_SANDBOX_URL, E2B's
// single-URL mode). Other ports of PORT-ID.<domain> are warren's preview
// hosts, E2B's traffic access token standing for the preview token.
//
//   - E2B's template builds become builds of the caller's templates
//     (templates.go), their uploads held on disk within bounds
//     (uploads.go).
//
// Not for: E2B's volumes and its Jupyter code interpreter (docs/E2B.md
// says why).
package e2b

import (
	"log/slog"
	"net/http"
	"path"
	"strings"

	"warren/internal/ident"
)

// Prefix is the path under which the API host serves E2B's APIs.
const Prefix = "/e2b"

// EnvdPort is the port E2B's SDKs address the in-sandbox API on.
const EnvdPort = "49983"

// EnvdVersion is the envd version warren's agent stands for: E2B's SDKs
// turn features on and off by it (file metadata, which warren refuses,
// came in 0.6.2; watch entries and network mounts in 0.6.3 and 0.6.4).
const EnvdVersion = "0.6.4"

// Options configure the translation.
type Options struct {
	// Domain is warren's preview domain as E2B's SDKs are to be told it:
	// a host name and an optional port ("sandboxes.example.com",
	// "e2b.test:8443"); "" when warren has none, and then only the path
	// prefix serves.
	Domain string
	// Log takes the detail of internal errors, which callers see only as
	// "internal error"; nil: none is kept.
	Log *slog.Logger
	// Tenant names the tenant of a request's API key: a tenant's template
	// builds share its bounds (uploads.go). nil: each key is a tenant.
	Tenant func(*http.Request) (string, error)
	// Dir is where template builds' uploaded files wait, in files removed
	// as soon as they are made; "" is os.TempDir().
	Dir string
}

// Handler serves E2B's APIs and hands every other request to next.
type Handler struct {
	next http.Handler
	opts Options
	// host is Domain without its port, in lower case.
	host string
	// builds are E2B template builds between their request and their
	// trigger (templates.go).
	builds pending
	// handoffs holds a token for each build whose context is in memory,
	// on its way to POST /v1/templates (runBuild).
	handoffs chan struct{}
}

// maxHandoffs bounds the contexts (each up to api.MaxTemplateContext,
// then its JSON) held in memory at once to hand to warren's API, which
// takes a context whole; the other triggered builds wait, their contexts
// on disk.
const maxHandoffs = 2

// New returns the translation in front of next, warren's API.
func New(next http.Handler, opts Options) *Handler {
	host, _, _ := strings.Cut(strings.ToLower(opts.Domain), ":")
	return &Handler{next: next, opts: opts, host: host, builds: pending{dir: opts.Dir}, handoffs: make(chan struct{}, maxHandoffs)}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.host != "" {
		name, _, _ := strings.Cut(strings.ToLower(r.Host), ":")
		if name == "api."+h.host {
			h.control(w, r, r.URL.Path)
			return
		}
		if label, ok := strings.CutSuffix(name, "."+h.host); ok {
			if port, id, ok := strings.Cut(label, "-"); ok && port == EnvdPort {
				h.envd(w, r, id, r.URL.Path)
				return
			}
			// A preview host: E2B's traffic token is warren's preview token.
			if t := r.Header.Get("E2b-Traffic-Access-Token"); t != "" && r.Header.Get("X-Warren-Access-Token") == "" {
				r.Header.Set("X-Warren-Access-Token", t)
			}
		}
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, Prefix); ok && (rest == "" || rest[0] == '/') {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" && envdPath(rest) {
			if port := r.Header.Get("E2b-Sandbox-Port"); port != "" && port != EnvdPort {
				writeError(w, http.StatusBadRequest, "warren serves only port "+EnvdPort+" of a sandbox at this URL; reach other ports on their preview hosts")
				return
			}
			h.envd(w, r, id, rest)
			return
		}
		h.control(w, r, rest)
		return
	}
	h.next.ServeHTTP(w, r)
}

// apiHost readdresses r, which may have come on a sandbox's host or on
// api.<domain>, to the domain itself, where warren's API is served.
func (h *Handler) apiHost(r *http.Request) *http.Request {
	name, _, _ := strings.Cut(strings.ToLower(r.Host), ":")
	if h.host != "" && strings.HasSuffix(name, "."+h.host) {
		r.Host = h.host
	}
	return r
}

// envdPath reports whether p is a path of E2B's in-sandbox API.
func envdPath(p string) bool {
	return p == "/files" || p == "/health" ||
		strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")
}

// envd sends a call of E2B's in-sandbox API on to sandbox id's agent
// routes, as it is: the route checks the access token.
func (h *Handler) envd(w http.ResponseWriter, r *http.Request, id, p string) {
	id = sandboxID(id)
	if !ident.Valid(id, "sb-") {
		writeError(w, http.StatusNotFound, "sandbox "+id+" not found")
		return
	}
	if path.Clean(p) != p {
		writeError(w, http.StatusNotFound, "no envd route "+p)
		return
	}
	r = r.Clone(r.Context())
	r.URL.Path, r.URL.RawPath = "/v1/sandboxes/"+id+"/agent"+p, ""
	r.RequestURI = ""
	h.next.ServeHTTP(w, h.apiHost(r))
}
