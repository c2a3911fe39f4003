// Package server is warren's HTTP/JSON API (docs/API.md): it authenticates
// callers, decodes and validates requests, and turns them into calls on the
// sandbox manager and on a sandbox's guest agent, streaming exec output and
// file contents both ways.
//
// It holds no state of its own and makes no policy decision about sandboxes
// (limits, timeouts, placement): the manager behind Sandboxes does, and
// answers *api.Error for what a caller may see. Everything else becomes a 500
// whose detail goes only to the log, under the request's id.
package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/control"
	"warren/internal/listing"
	"warren/internal/metrics"
)

// Sandboxes is what the API needs of the sandbox manager. Every method may be
// called concurrently. Errors meant for the caller are *api.Error; any other
// error is reported as an internal error. A sandbox of another tenant is
// CodeNotFound, exactly like a missing one.
type Sandboxes interface {
	// Create starts a sandbox for tenant and returns it once its agent
	// answers (state running). Zero fields of req take the manager's
	// defaults; invalid ones are CodeBadRequest.
	Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (api.Sandbox, error)
	// Get returns one of tenant's sandboxes; CodeNotFound if it has none
	// with that id.
	Get(ctx context.Context, tenant, id string) (api.Sandbox, error)
	// List returns a page of tenant's sandboxes (every tenant's for
	// listing.AnyTenant) in one of states (any when empty), oldest first,
	// without their env.
	List(ctx context.Context, tenant string, states []string, page listing.Page) ([]api.Sandbox, error)
	// Delete stops and forgets one of tenant's sandboxes; CodeNotFound if it
	// has none with that id.
	Delete(ctx context.Context, tenant, id string) error
	// SetTimeout makes the sandbox expire timeout from now and returns it;
	// CodeBadRequest for a timeout out of the manager's range, CodeConflict
	// for a sandbox in a final state.
	SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (api.Sandbox, error)
	// Pause saves a running sandbox's memory to a file on the node and ends
	// its process; it returns the sandbox paused. CodeConflict for a
	// sandbox not running or in a runtime that cannot pause.
	Pause(ctx context.Context, tenant, id string) (api.Sandbox, error)
	// Resume runs a paused sandbox again from its saved memory and returns
	// it running; CodeConflict for a sandbox that is not paused.
	Resume(ctx context.Context, tenant, id string) (api.Sandbox, error)
	// Agent returns the connection to a running sandbox's guest agent; owned
	// by the manager, never closed by the caller. CodeNotFound for an unknown
	// sandbox, CodeConflict for one that is not running.
	Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error)
	// Metrics returns a running sandbox's resource use, as its agent
	// measures it; CodeNotFound for an unknown sandbox, CodeConflict for
	// one not running (paused included).
	Metrics(ctx context.Context, tenant, id string) (api.SandboxMetrics, error)
	// Network returns a sandbox's egress policy and counters.
	Network(ctx context.Context, tenant, id string) (api.NetworkStatus, error)
	// SetNetwork replaces a running sandbox's egress policy;
	// CodeBadRequest for an invalid one, CodeConflict for a sandbox not
	// running.
	SetNetwork(ctx context.Context, tenant, id string, p api.NetworkPolicy) (api.NetworkStatus, error)
	// DialPort connects to a TCP port a running sandbox listens on; the
	// caller closes the connection, and may use it for as long as it
	// likes (ctx bounds the dial only). CodeNotFound for an unknown
	// sandbox, CodeConflict for one not running (or a node without sandbox
	// networking). Any other error means the sandbox runs but the port
	// did not take the connection; nothing listening on it is an error
	// that matches syscall.ECONNREFUSED.
	DialPort(ctx context.Context, tenant, id string, port int) (net.Conn, error)
	// Preview returns a sandbox's preview access (its URL left nil: the
	// server knows its preview domain); CodeNotFound as Get.
	Preview(ctx context.Context, tenant, id string) (api.Preview, error)
	// SetPreview makes a sandbox's previews public or private and rotates
	// its access token as req asks, and returns the result.
	SetPreview(ctx context.Context, tenant, id string, req api.SetPreviewRequest) (api.Preview, error)
	// PreviewAccess returns, for a request on a preview host name (no API
	// key, no tenant yet), the tenant of sandbox id, its access token and
	// whether its previews are public; CodeNotFound for an unknown
	// sandbox. The server uses them for its access check and never shows
	// them to the caller.
	PreviewAccess(ctx context.Context, id string) (tenant, token string, public bool, err error)
	// AgentAccess returns, for a call of a sandbox's agent routes that
	// carries its agent token instead of an API key, the tenant of sandbox
	// id and its agent token; CodeNotFound for an unknown sandbox. As
	// PreviewAccess's, they are for the server's access check only.
	AgentAccess(ctx context.Context, id string) (tenant, token string, err error)
	// Snapshot saves a running sandbox's disk and returns the snapshot,
	// pending unless req.Wait; CodeConflict for a sandbox not running or
	// a name another of tenant's snapshots has (req.Name is valid),
	// CodeTimeout when a wait ran out.
	Snapshot(ctx context.Context, tenant, sandboxID string, req api.CreateSnapshotRequest) (api.Snapshot, error)
	// GetSnapshot returns one of tenant's snapshots, by ID or by name
	// (ref); CodeNotFound otherwise. The other snapshot methods take its
	// ID.
	GetSnapshot(ctx context.Context, tenant, ref string) (api.Snapshot, error)
	// ListSnapshots returns a page of tenant's snapshots (of one sandbox
	// when sandboxID is not "") in one of states (any when empty), oldest
	// first.
	ListSnapshots(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]api.Snapshot, error)
	// SnapshotLineage returns up to limit ancestors of one of tenant's
	// snapshots, nearest first, from above after ("": from its parent),
	// and whether more follow. CodeNotFound as GetSnapshot; an after that
	// is no ancestor of tenant's is CodeBadRequest.
	SnapshotLineage(ctx context.Context, tenant, id, after string, limit int) (ancestors []string, more bool, err error)
	// DeleteSnapshot deletes one of tenant's snapshots.
	DeleteSnapshot(ctx context.Context, tenant, id string) error
	// Restore starts sandboxes from one of tenant's snapshots and returns
	// them running.
	Restore(ctx context.Context, tenant, id string, req api.RestoreRequest) ([]api.Sandbox, error)
	// Fork starts children of one of tenant's running sandboxes from a
	// snapshot of its disk and returns them running, with the snapshot and
	// how long the parent paused; CodeConflict for a sandbox not running
	// or one that cannot be forked.
	Fork(ctx context.Context, tenant, id string, req api.ForkRequest) (api.ForkResult, error)
	// GCSnapshots collects what no snapshot needs; grace < 0 is the
	// default grace.
	GCSnapshots(ctx context.Context, grace time.Duration) (api.GCResult, error)
}

// Node is what the API needs of the node: its description and its
// templates. Its methods may be called concurrently; errors are as
// Sandboxes's.
type Node interface {
	// Info describes the node as tenant may see it: its own sandboxes'
	// count; everyone's, and where snapshots are stored, for an admin.
	Info(ctx context.Context, tenant string, admin bool) api.NodeInfo
	// Templates lists the templates built on the node.
	Templates(ctx context.Context) ([]api.Template, error)
	// BuildTemplate builds (or rebuilds) the template name, writing progress
	// text to progress until it returns; CodeNotFound when no recipe has
	// that name.
	BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error)
}

// Fleet is what the API needs of the fleet's nodes. Errors are as
// Sandboxes's.
type Fleet interface {
	// Nodes lists the fleet's nodes by ID.
	Nodes(ctx context.Context) ([]api.FleetNode, error)
	// NodeAction does action (api.NodeCordon, NodeUncordon or NodeDrain)
	// to node id and returns it; CodeNotFound for an unknown node,
	// CodeConflict for one in a state the action is not for.
	NodeAction(ctx context.Context, id, action string) (api.FleetNode, error)
}

// Events reads the recorded events (docs/API.md, "Events").
type Events interface {
	// Events returns up to limit events after after, in order: tenant's
	// (listing.AnyTenant: every one, and the nodes'), about sandbox and
	// snapshot when set, of kinds when given. A tenant's events are
	// numbered in a sequence of its own; listing.AnyTenant's by node-wide
	// IDs.
	Events(ctx context.Context, f EventFilter) ([]api.Event, error)
	// Bounds returns the IDs, in tenant's sequence, of its oldest event
	// kept (when none is, the one its next event takes) and of the newest
	// it was given.
	Bounds(ctx context.Context, tenant string) (oldest, newest int64, err error)
	// Changed is closed when this process records events after the call;
	// events other processes record are seen by reading again.
	Changed() <-chan struct{}
}

// EventFilter selects events for Events.Events.
type EventFilter struct {
	After             int64
	Tenant            string
	Sandbox, Snapshot string
	Kinds             []string
	Limit             int
}

// Quotas keeps each tenant's quota in the fleet.
type Quotas interface {
	Quota(ctx context.Context, tenant string) (api.Quota, error)
	SetQuota(ctx context.Context, tenant string, q api.Quota) error
}

// Pools keeps the warm pools (docs/API.md, "Warm pools"). Errors are as
// Sandboxes's.
type Pools interface {
	// Pools lists every pool with its state.
	Pools(ctx context.Context) ([]api.Pool, error)
	// SetPool sets the pool of template and spec's runtime, replacing the
	// one before, and returns it; CodeNotFound for an unknown template,
	// CodeBadRequest for an invalid spec, CodeConflict when the node could
	// never hold its share.
	SetPool(ctx context.Context, template string, spec api.PoolSpec) (api.Pool, error)
	// DeletePool removes the pool of template and runtime ("": what a
	// create picks); CodeNotFound when there is none.
	DeletePool(ctx context.Context, template, runtime string) error
}

// Keys resolves and makes API keys. It may be called concurrently.
type Keys interface {
	// LookupKey returns the record of key; ErrUnknownKey for a key it does
	// not know.
	LookupKey(ctx context.Context, key string) (Key, error)
	// CreateKey makes a new key of tenant, limited to scope ("" for none;
	// api.KeyScopeMetrics), and returns it; both are already valid.
	CreateKey(ctx context.Context, tenant, scope string) (string, error)
	// ListKeys returns a page of the keys' records (never a key), oldest
	// first.
	ListKeys(ctx context.Context, page listing.Page) ([]Key, error)
	// DeleteKey revokes the key named id; ErrUnknownKey when there is none.
	DeleteKey(ctx context.Context, id string) error
	// MissingKeys returns those of the key IDs ids that name no key any
	// more, as the store has them now (never a cache): the revoked ones.
	MissingKeys(ctx context.Context, ids []string) ([]string, error)
	// RotateAgentTokens gives every sandbox of tenant a new agent token
	// and returns their IDs; the old tokens open nothing from then on.
	RotateAgentTokens(ctx context.Context, tenant string) ([]string, error)
	// Revocations is a count that every DeleteKey and RotateAgentTokens of
	// any process on the store moves on (revoke.go).
	Revocations(ctx context.Context) (int64, error)
}

// Key is an API key's record, as Keys keeps it: never the key itself.
type Key struct {
	// ID names the key in logs and listings; it is not secret.
	ID     string
	Tenant string
	// Admin keys may also call the admin routes.
	Admin bool
	// Scope is "" for the tenant's whole API, or what alone the key may do
	// (api.KeyScopeMetrics).
	Scope     string
	CreatedAt time.Time
}

// ErrUnknownKey is what Keys answers for a key, or a key ID, it does not
// know.
var ErrUnknownKey = errors.New("unknown API key")

// Options tune the server. Zero values take the defaults.
type Options struct {
	// MaxOutputBytes bounds each of stdout and stderr kept for a foreground,
	// non-streaming exec (default DefaultMaxOutputBytes). Output beyond it
	// is read and dropped, and the result says Truncated.
	MaxOutputBytes int64
	// Requests keeps the answers of requests sent with an idempotency key
	// (idempotency.go); nil: such requests are refused.
	Requests Requests
	// Fleet lists and cordons the fleet's nodes (GET /v1/nodes); nil on a
	// single machine, which has none.
	Fleet Fleet
	// Quotas keeps tenants' quotas (GET and PUT /v1/tenants/{tenant}/quota);
	// nil: those routes answer 404.
	Quotas Quotas
	// Pools keeps the warm pools (GET /v1/pools, PUT and DELETE
	// /v1/pools/{template}); nil: those routes answer 404.
	Pools Pools
	// Secrets keeps tenants' secrets (/v1/secrets); nil: those routes
	// answer 404.
	Secrets Secrets
	// Events serves GET /v1/events; nil: it answers 404.
	Events Events
	// Templates keeps tenants' own templates (POST /v1/templates and the
	// routes of one); nil: only the built-in ones are listed.
	Templates Templates
	// Metrics counts the API's requests and serves GET /metrics (and, on a
	// fleet's node, GET /v1/nodes/{NodeID}/metrics); nil: they answer 404.
	Metrics *metrics.Registry
	// NodeID names the node this server runs on in a fleet.
	NodeID string
	// Limits bound concurrent execs and streams (limits.go).
	Limits Limits
	// MaxBodyBytes bounds a JSON request body (default 1 MiB); a larger one
	// is answered 413. File uploads and stdin are streams and have no bound.
	MaxBodyBytes int64
	// PreviewDomain, when set, serves every sandbox's ports on host names
	// PORT-ID.<domain> (docs/API.md, "Exposed ports"). Either a domain,
	// "preview.example.com" (preview URLs are then https on the default
	// port), or a URL that also gives the scheme and port of preview URLs,
	// "http://localhost:7777". Check it with CheckPreviewDomain: an
	// invalid one is logged and serves no previews.
	PreviewDomain string
	// Timeouts bound how long a client may hold a connection without
	// progress, and Conns how many it may hold (conns.go).
	Timeouts Timeouts
	Conns    ListenerLimits
	// Console serves the web console's static files, GET /console and
	// the paths below it, without a key (the page asks for one); nil:
	// they answer 404.
	Console http.Handler
}

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 1 << 20
)

// Server serves the API. Build it with New.
type Server struct {
	sb     Sandboxes
	node   Node
	keys   Keys
	log    *slog.Logger
	opts   Options
	routes []route
	mux    *http.ServeMux
	// preview is the parsed Options.PreviewDomain; zero: no previews.
	preview previewSite
	// streams counts each sandbox's open execs and process streams;
	// eventStreams each tenant's open events streams.
	streams, eventStreams counter
	// output is what non-streaming execs may hold of output.
	output *budget
	// listings holds a token for each directory listing being served.
	listings chan struct{}
	// largeTemplates holds a token for each template request with a large
	// body being read or built; largeTemplateTenants lets one of each
	// tenant's wait for one.
	largeTemplates       chan struct{}
	largeTemplateTenants turns
	// sessions are the requests open under a credential (revoke.go).
	sessions *sessions
}

// access says who may call a route.
type access int

const (
	public      access = iota // anyone, no key
	tenant                    // any valid key of the tenant's whole API
	admin                     // an admin key only
	scrape                    // an admin key or a key of scope metrics
	agentAccess               // a key of the tenant's whole API, or the sandbox's agent token (the handler checks)
	socket                    // as tenant, the key also as a WebSocket subprotocol (terminal.go)
)

// anyMethod is the method of a route that serves every method (the
// exposed-port proxy), as docs/API.md writes it.
const anyMethod = "ANY"

// route is one row of the route table in docs/API.md.
type route struct {
	method, path string
	access       access
	// fleet is which node of a fleet answers the route: the fleet's front
	// routes by it (RouteTable, package control). Every route has one.
	fleet  control.Rule
	handle handlerFunc
}

// handlerFunc serves one route. An error it returns is written as the
// error body when nothing has been written yet, and only logged otherwise
// (a stream that broke after its first line reports in-band).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// New returns a server over the given sandboxes, node and key store.
func New(sb Sandboxes, node Node, keys Keys, log *slog.Logger, opts Options) *Server {
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	opts.Timeouts = opts.Timeouts.withDefaults()
	opts.Limits = opts.Limits.withDefaults()
	s := &Server{sb: sb, node: node, keys: keys, log: log, opts: opts, mux: http.NewServeMux(),
		output:         &budget{perTenant: opts.Limits.OutputPerTenant, onNode: opts.Limits.OutputOnNode},
		listings:       make(chan struct{}, opts.Limits.ListingsOnNode),
		largeTemplates: make(chan struct{}, opts.Limits.LargeTemplatesOnNode),
		sessions:       &sessions{keys: keys, sb: sb, log: log, poll: revocationPoll}}
	if opts.PreviewDomain != "" {
		site, err := parsePreviewDomain(opts.PreviewDomain)
		if err != nil && log != nil {
			log.Error("no preview host names: bad preview domain", "err", err)
		}
		s.preview = site
	}
	// Each route: who may call it, and which node of a fleet answers it
	// (the fleet's front routes by this table: RouteTable).
	s.routes = []route{
		{"GET", "/healthz", public, control.Local, s.healthz},
		{"GET", "/openapi.json", tenant, control.AnyNode, s.openAPI},
		{"GET", "/v1/info", tenant, control.AnyNode, s.info},
		{"POST", "/v1/sandboxes", tenant, control.PlaceCreate, s.createSandbox},
		{"GET", "/v1/sandboxes", tenant, control.AnyNode, s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", tenant, control.SandboxNode, s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", tenant, control.SandboxNode, s.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/timeout", tenant, control.SandboxNode, s.setTimeout},
		{"GET", "/v1/sandboxes/{id}/metrics", tenant, control.SandboxNode, s.getMetrics},
		{"GET", "/v1/sandboxes/{id}/network", tenant, control.SandboxNode, s.getNetwork},
		{"PUT", "/v1/sandboxes/{id}/network", tenant, control.SandboxNode, s.setNetwork},
		{"POST", "/v1/sandboxes/{id}/pause", tenant, control.SandboxNode, s.pauseSandbox},
		{"POST", "/v1/sandboxes/{id}/resume", tenant, control.SandboxNode, s.resumeSandbox},
		{"GET", "/v1/sandboxes/{id}/preview", tenant, control.SandboxNode, s.getPreview},
		{"PUT", "/v1/sandboxes/{id}/preview", tenant, control.SandboxNode, s.setPreview},
		{anyMethod, "/v1/sandboxes/{id}/ports/{port}/{path...}", tenant, control.SandboxNode, s.proxyPort},
		{"POST", "/v1/sandboxes/{id}/exec", tenant, control.SandboxNode, s.exec},
		{"GET", "/v1/sandboxes/{id}/processes", tenant, control.SandboxNode, s.listProcesses},
		{"GET", "/v1/sandboxes/{id}/processes/{pid}/stream", tenant, control.SandboxNode, s.streamProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/wait", tenant, control.SandboxNode, s.waitProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", tenant, control.SandboxNode, s.processStdin},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", tenant, control.SandboxNode, s.signalProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", tenant, control.SandboxNode, s.resizeProcess},
		{"GET", "/v1/sandboxes/{id}/terminal", socket, control.SandboxNode, s.terminal},
		{"GET", "/v1/sandboxes/{id}/agent/{path...}", agentAccess, control.SandboxNode, s.agentCall},
		{"POST", "/v1/sandboxes/{id}/agent/{path...}", agentAccess, control.SandboxNode, s.agentCall},
		{"GET", "/v1/sandboxes/{id}/files", tenant, control.SandboxNode, s.readFile},
		{"PUT", "/v1/sandboxes/{id}/files", tenant, control.SandboxNode, s.writeFile},
		{"DELETE", "/v1/sandboxes/{id}/files", tenant, control.SandboxNode, s.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/stat", tenant, control.SandboxNode, s.statFile},
		{"GET", "/v1/sandboxes/{id}/files/list", tenant, control.SandboxNode, s.listFiles},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", tenant, control.SandboxNode, s.makeDir},
		{"POST", "/v1/sandboxes/{id}/files/move", tenant, control.SandboxNode, s.moveFile},
		{"POST", "/v1/sandboxes/{id}/snapshots", tenant, control.SandboxNode, s.createSnapshot},
		{"GET", "/v1/sandboxes/{id}/snapshots", tenant, control.SandboxNode, s.listSandboxSnapshots},
		{"GET", "/v1/snapshots", tenant, control.AnyNode, s.listSnapshots},
		{"POST", "/v1/gc", admin, control.AnyNode, s.gcSnapshots},
		{"GET", "/v1/snapshots/{id}", tenant, control.AnyNode, s.getSnapshot},
		{"GET", "/v1/snapshots/{id}/lineage", tenant, control.AnyNode, s.snapshotLineage},
		{"DELETE", "/v1/snapshots/{id}", tenant, control.AnyNode, s.deleteSnapshot},
		{"POST", "/v1/snapshots/{id}/restore", tenant, control.PlaceRestore, s.restoreSnapshot},
		{"POST", "/v1/sandboxes/{id}/fork", tenant, control.ParentNode, s.forkSandbox},
		{"GET", "/v1/events", tenant, control.AnyNode, s.events},
		{"GET", "/v1/templates", tenant, control.AnyNode, s.listTemplates},
		{"POST", "/v1/templates", tenant, control.AnyNode, s.createTemplate},
		{"GET", "/v1/templates/{ref}", tenant, control.AnyNode, s.getTemplate},
		{"DELETE", "/v1/templates/{ref}", tenant, control.AnyNode, s.deleteTemplate},
		{"GET", "/v1/templates/{ref}/versions", tenant, control.AnyNode, s.templateVersions},
		{"POST", "/v1/templates/{ref}/image", tenant, control.AnyNode, s.importArchive},
		{"PUT", "/v1/templates/{ref}/shared", admin, control.AnyNode, s.shareTemplate},
		{"POST", "/v1/templates/{ref}/build", admin, control.AnyNode, s.buildTemplate},
		{"GET", "/v1/secrets", tenant, control.Local, s.listSecrets},
		{"GET", "/v1/secrets/{name}", tenant, control.Local, s.getSecret},
		{"PUT", "/v1/secrets/{name}", tenant, control.Local, s.setSecret},
		{"DELETE", "/v1/secrets/{name}", tenant, control.Local, s.deleteSecret},
		{"POST", "/v1/keys", admin, control.AnyNode, s.createKey},
		{"GET", "/v1/keys", admin, control.AnyNode, s.listKeys},
		{"GET", "/v1/pools", admin, control.AnyNode, s.listPools},
		{"PUT", "/v1/pools/{template}", admin, control.AnyNode, s.setPool},
		{"DELETE", "/v1/pools/{template}", admin, control.AnyNode, s.deletePool},
		{"GET", "/v1/nodes", admin, control.AnyNode, s.listNodes},
		{"GET", "/v1/tenants/{tenant}/quota", admin, control.AnyNode, s.getQuota},
		{"PUT", "/v1/tenants/{tenant}/quota", admin, control.AnyNode, s.setQuota},
		{"POST", "/v1/tenants/{tenant}/rotate-agent-tokens", admin, control.AnyNode, s.rotateAgentTokens},
		{"POST", "/v1/nodes/{id}/cordon", admin, control.AnyNode, s.nodeAction},
		{"POST", "/v1/nodes/{id}/uncordon", admin, control.AnyNode, s.nodeAction},
		{"POST", "/v1/nodes/{id}/drain", admin, control.AnyNode, s.nodeAction},
		{"DELETE", "/v1/keys/{id}", admin, control.AnyNode, s.deleteKey},
		{"GET", "/v1/debug/vars", admin, control.AnyNode, s.debugVars},
		{"GET", "/metrics", scrape, control.Local, s.metrics},
		{"GET", "/v1/nodes/{id}/metrics", scrape, control.NamedNode, s.nodeMetrics},
		{"GET", "/console", public, control.Local, s.console},
		{"GET", "/console/{path...}", public, control.Local, s.console},
	}
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range s.routes {
		if rt.method == anyMethod {
			// Every method: no 405 for this path.
			s.mux.Handle(rt.path, s.endpoint(rt))
			continue
		}
		s.mux.Handle(rt.method+" "+rt.path, s.endpoint(rt))
		if _, ok := allowed[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// A pattern without a method is less specific than the same path with
	// one, so these catch only the methods a path does not serve.
	for _, p := range paths {
		s.mux.Handle(p, methodNotAllowed(allowed[p]))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: *api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)})
	})
	return s
}

// RouteTable is the API's route table as a fleet's front reads it: each
// route's method ("" for every method), pattern and rule (control.Rule).
// The front matches requests against these patterns, and sends each where
// its route's rule says: there is no other list of the API's paths.
func (s *Server) RouteTable() []control.Route {
	table := make([]control.Route, len(s.routes))
	for i, rt := range s.routes {
		table[i] = control.Route{Method: rt.method, Pattern: rt.path, Rule: rt.fleet}
		if rt.method == anyMethod {
			table[i].Method = ""
		}
	}
	return table
}

// Handler returns the HTTP handler of the API: Routes, wrapped.
func (s *Server) Handler() http.Handler { return s.Wrap(s.Routes()) }

// Routes serves the API's routes and preview host names, without the
// per-request middleware of Wrap: what a fleet's front sends a request on
// to once it knows the node (package control).
func (s *Server) Routes() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A preview host name is a sandbox's port whatever the path: it
		// never reaches the API's routes (preview.go).
		if s.servePreviewHost(w, r) {
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// pattern is the route table's "METHOD PATH" of a request that no route
// of this process served, because a fleet's front sent it to a node; ""
// for a preview host name and for a path or method no route serves.
func (s *Server) pattern(r *http.Request) string {
	if _, preview := s.PreviewSandbox(r.Host); preview {
		return ""
	}
	_, p := s.mux.Handler(r)
	for _, rt := range s.routes {
		if p == rt.method+" "+rt.path || rt.method == anyMethod && p == rt.path {
			return rt.method + " " + rt.path
		}
	}
	return ""
}

// PreviewSandbox returns the sandbox a request to host name host is for,
// if host is one of the preview host names.
func (s *Server) PreviewSandbox(host string) (id string, ok bool) {
	_, id, kind := s.preview.parseHost(host)
	return id, kind == isPreview
}

// methodNotAllowed answers 405 for a path served under other methods.
func methodNotAllowed(methods []string) http.Handler {
	allow := slices.Clone(methods)
	if slices.Contains(allow, "GET") {
		allow = append(allow, "HEAD")
	}
	header := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", header)
		writeJSON(w, http.StatusMethodNotAllowed, api.ErrorBody{Error: *api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, header)})
	})
}

// endpoint wraps a route's handler with its access check and error writing.
func (s *Server) endpoint(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		meta(r.Context()).route = rt.method + " " + rt.path
		if rt.access != public && rt.access != agentAccess {
			authenticate := s.Authenticate
			if rt.access == socket {
				authenticate = s.authenticateSocket
			}
			counted := s.sessions.counted()
			key, err := authenticate(r)
			if err == nil {
				err = allowed(rt.access, key)
			}
			if err != nil {
				s.WriteError(w, r, err)
				return
			}
			meta(r.Context()).key = key
			sess := &session{keyID: key.ID}
			r = s.sessions.begin(r, sess, counted)
			defer s.sessions.end(sess)
		}
		handle := rt.handle
		if pattern := rt.method + " " + rt.path; idempotent[pattern] && r.Header.Get(api.IdempotencyKeyHeader) != "" {
			handle = func(w http.ResponseWriter, r *http.Request) error { return s.once(w, r, pattern, rt.handle) }
		}
		if err := handle(w, r); err != nil {
			s.WriteError(w, r, err)
		}
	})
}

// allowed says whether key may call a route of access a (not public).
func allowed(a access, key Key) error {
	switch {
	case a == scrape && (key.Admin || key.Scope == api.KeyScopeMetrics):
		return nil
	case key.Scope != "":
		return api.Errorf(api.CodeForbidden, "this key's scope is %s: it may only read /metrics", key.Scope)
	case a == scrape:
		return api.Errorf(api.CodeForbidden, "this route needs an admin key or a key of scope %s", api.KeyScopeMetrics)
	case a == admin && !key.Admin:
		return api.Errorf(api.CodeForbidden, "this route needs an admin key")
	}
	return nil
}

// metrics serves the process's metrics in Prometheus's format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Metrics == nil {
		return api.Errorf(api.CodeNotFound, "this server keeps no metrics")
	}
	s.opts.Metrics.Handler().ServeHTTP(w, r)
	return nil
}

// console serves the web console's files (package console).
func (s *Server) console(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Console == nil {
		return api.Errorf(api.CodeNotFound, "this server serves no console")
	}
	s.opts.Console.ServeHTTP(w, r)
	return nil
}

// healthz answers that the process serves; it needs no key.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// openAPI serves the OpenAPI document of this API.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := io.WriteString(w, api.OpenAPI)
	return err
}
