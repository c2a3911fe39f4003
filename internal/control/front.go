// Package control is the fleet's front (docs/ARCHITECTURE.md, "The
// fleet"). Every API request reaches a control replica first; the front
// decides which node must answer it and sends it on, whole and streaming,
// to that node's API.
//
// It decides from the API's own route table (Options.Routes, the server's
// RouteTable), in which each route declares its Rule; the front matches
// requests against the same patterns the API serves, with an
// http.ServeMux of its own, and keeps no list of paths of its own:
//
//   - a request about one sandbox (/v1/sandboxes/{id} and below, and its
//     preview host names, which route by host name whatever the path)
//     goes to the node that runs it;
//   - a create, and a restore of a snapshot, go to the node the fleet
//     places them on, chosen from what the request asks for;
//   - /v1/nodes/{id}/metrics goes to node id, whose metrics they are, and
//     /metrics is the front's own process's (Options.Local), as are
//     /healthz and the web console's static files (/console and below);
//   - anything else (lists, snapshots, keys, templates, and a path or
//     method no route serves, which a node answers 404 or 405) goes to
//     any node: nodes share the metadata store, so any of them answers for
//     all.
//
// The node authenticates the request itself, with the caller's API key
// against the shared store: the front holds no key and decides nothing a
// node would refuse. A single machine is a fleet of one, whose one node is
// in the same process: the front hands it the request directly, and every
// request on one machine takes the path a fleet's does.
package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"warren/api"
)

// Fleet is what the front needs to know of the nodes. Its methods may be
// called concurrently. Errors meant for the caller are *api.Error.
type Fleet interface {
	// Owner returns the node that runs sandbox id; ErrNoOwner when no
	// node does (it ended, or never was), and the request goes to any node.
	Owner(ctx context.Context, id string) (string, error)
	// Place returns the node to start sandboxes on for p.
	Place(ctx context.Context, p Placement) (string, error)
	// Started tells the fleet that node started the sandboxes ids, as it
	// answered the request Place sent it: their routes need not look the
	// owner up.
	Started(node string, ids []string)
	// Any returns a node that answers requests any node can.
	Any(ctx context.Context) (string, error)
	// Node returns the API of the node named node.
	Node(node string) (http.Handler, error)
}

// ErrNoOwner is Fleet.Owner's answer for a sandbox no node runs.
var ErrNoOwner = errors.New("no node runs the sandbox")

// Placement is what a create or a restore asks of the node it starts on.
type Placement struct {
	// Snapshot is the snapshot a restore starts from, by ID or by name; ""
	// for a create.
	Snapshot string
	// Tenant is the caller's when Snapshot is a name (api.SnapshotIDPrefix
	// starts every ID and no name): it names one of the tenant's own.
	Tenant string
	// Template is a create's template ("" for the default).
	Template string
	// Count is how many sandboxes a restore starts (a create: 1).
	Count int
	Spec  api.SandboxSpec
	// Avoid is a node not to place on: a paused sandbox's own, for its
	// standby; "" for none.
	Avoid string
}

// Options are what the front takes from the API server.
type Options struct {
	// Routes is the API's route table (server.Server.RouteTable): the
	// front sends each request as the rule of the route it matches says,
	// and a request that matches none to any node.
	Routes []Route
	// Preview returns the sandbox a preview host name is for
	// (server.Server.PreviewSandbox).
	Preview func(host string) (id string, ok bool)
	// Authenticate checks a create's or a restore's API key before the
	// front reads more of its body than any caller may send, or places a
	// restore of a snapshot by name, and returns the key's tenant
	// (server.Server.Authenticate). The node checks every request's key.
	Authenticate func(r *http.Request) (tenant string, err error)
	// WriteError answers a request with an error (server.Server.WriteError).
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// MaxBody bounds the body of a create or restore read for placement:
	// the API's bound on a JSON body.
	MaxBody int64
	// Local answers the routes of rule Local: GET /metrics, the metrics of
	// the front's own process (a control replica's, or a single
	// machine's), and the web console's files, which every process serves
	// from its own binary.
	Local http.Handler
}

// Front sends each API request on to its node; see the package comment.
type Front struct {
	fleet Fleet
	opts  Options
	// mux matches a request to its route, as the API's own mux does, and
	// sends it by the route's rule.
	mux *http.ServeMux
}

// NewFront returns the front of fleet. It panics, as http.ServeMux does
// on a bad pattern, when a route of opts.Routes has no rule or a pattern
// the mux refuses: the table is the program's, not its input.
func NewFront(fleet Fleet, opts Options) *Front {
	f := &Front{fleet: fleet, opts: opts, mux: http.NewServeMux()}
	// The other methods of a path, which its node answers 405, go where
	// the path's routes go when they agree, as the API's mux catches them
	// with the path's pattern without a method; any node takes them when
	// the routes differ, or would place a request that places nothing.
	type path struct {
		rule  Rule
		every bool // a route of the path serves every method
	}
	paths := map[string]*path{}
	var order []string
	for _, rt := range opts.Routes {
		if rt.Rule <= NoRule || rt.Rule >= numRules {
			panic(fmt.Sprintf("control: route %s has no rule (%s)", rt, rt.Rule))
		}
		f.mux.Handle(rt.String(), f.by(rt.Rule))
		rule := rt.Rule
		switch rule {
		case ParentNode:
			rule = SandboxNode
		case PlaceCreate, PlaceRestore:
			rule = AnyNode
		}
		p := paths[rt.Pattern]
		if p == nil {
			p = &path{rule: rule}
			paths[rt.Pattern] = p
			order = append(order, rt.Pattern)
		}
		if p.rule != rule {
			p.rule = AnyNode
		}
		p.every = p.every || rt.Method == ""
	}
	for _, pattern := range order {
		if p := paths[pattern]; !p.every && p.rule != AnyNode {
			f.mux.Handle(pattern, f.by(p.rule))
		}
	}
	// What no route serves, any node answers (404, or 405 with the
	// methods it allows): this pattern matches every request, so the mux
	// never answers 404 or 405 itself.
	f.mux.Handle("/", f.by(AnyNode))
	return f
}

// ServeHTTP implements http.Handler.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A preview host name is a sandbox's port whatever the path: it
	// never reaches the API's routes (server.Server.Routes).
	if id, ok := f.opts.Preview(r.Host); ok {
		node, err := f.owner(r.Context(), id)
		f.send(w, r, node, false, err)
		return
	}
	f.mux.ServeHTTP(w, r)
}

// by returns the handler of the routes of rule, which the mux calls with
// the route's path values set.
func (f *Front) by(rule Rule) http.Handler {
	if rule == Local {
		return f.opts.Local
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, err := f.route(r, rule)
		f.send(w, r, node, rule == PlaceCreate || rule == PlaceRestore || rule == ParentNode, err)
	})
}

// send hands r to node, or answers err when the route found none. When
// learn is set, the sandboxes a successful answer names are known to run
// on node from then on (Fleet.Started).
func (f *Front) send(w http.ResponseWriter, r *http.Request, node string, learn bool, err error) {
	if err == nil {
		var h http.Handler
		if h, err = f.fleet.Node(node); err == nil {
			if !learn {
				h.ServeHTTP(w, r)
				return
			}
			tw := &teeWriter{ResponseWriter: w}
			h.ServeHTTP(tw, r)
			if ids := tw.sandboxes(); len(ids) > 0 {
				f.fleet.Started(node, ids)
			}
			return
		}
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		err = api.Errorf(api.CodeUnavailable, "no node can answer: %v", err)
	}
	f.opts.WriteError(w, r, err)
}

// route picks the node for r by rule (not Local), with the path values of
// the route r matched.
func (f *Front) route(r *http.Request, rule Rule) (string, error) {
	ctx := r.Context()
	switch rule {
	case PlaceCreate:
		var req api.CreateSandboxRequest
		if err := f.peek(r, &req); err != nil {
			return "", err
		}
		return f.fleet.Place(ctx, Placement{Template: req.Template, Count: 1, Spec: req.SandboxSpec})
	case PlaceRestore:
		var req api.RestoreRequest
		if err := f.peek(r, &req); err != nil {
			return "", err
		}
		p := Placement{Snapshot: r.PathValue("id"), Count: max(req.Count, 1), Spec: req.SandboxSpec}
		if !strings.HasPrefix(p.Snapshot, api.SnapshotIDPrefix) {
			tenant, err := f.opts.Authenticate(r)
			if err != nil {
				return "", err
			}
			p.Tenant = tenant
		}
		return f.fleet.Place(ctx, p)
	case SandboxNode, ParentNode:
		return f.owner(ctx, r.PathValue("id"))
	case NamedNode:
		id := r.PathValue("id")
		if _, err := f.fleet.Node(id); err != nil {
			if _, err := f.opts.Authenticate(r); err != nil {
				return "", err
			}
			return "", api.Errorf(api.CodeNotFound, "node %s not found in the fleet", id)
		}
		return id, nil
	}
	return f.fleet.Any(ctx)
}

// owner is the node of sandbox id, or any node when none runs it (which
// answers 404, or the record of an ended sandbox).
func (f *Front) owner(ctx context.Context, id string) (string, error) {
	node, err := f.fleet.Owner(ctx, id)
	if errors.Is(err, ErrNoOwner) {
		return f.fleet.Any(ctx)
	}
	return node, err
}

// peekFree is how much of a create's or restore's body the front reads
// before it checks the key: as much as a request's headers may hold
// (server.Server.HTTPServer), which every caller may send without one.
const peekFree = 64 << 10

// peek decodes r's JSON body into v for placement, and leaves the body as
// it was for the node, which validates it: a body that does not decode
// places as an empty one, and the node refuses it with the reason. A body
// longer than peekFree is read on only once the caller's key is known.
func (f *Front) peek(r *http.Request, v any) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, min(peekFree, f.opts.MaxBody)+1))
	if err == nil && int64(len(b)) > peekFree {
		if _, err := f.opts.Authenticate(r); err != nil {
			return err
		}
		var more []byte
		more, err = io.ReadAll(io.LimitReader(r.Body, f.opts.MaxBody+1-int64(len(b))))
		b = append(b, more...)
	}
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), errReader{err}, rest), rest}
	if err == nil && int64(len(b)) <= f.opts.MaxBody {
		json.Unmarshal(b, v)
	}
	return nil
}

// errReader fails with err, when there is one, after what was read before
// it; else it is at the end, and the rest of the body follows.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// teeWriter keeps the start of a successful JSON answer, in which a create
// or restore names the sandboxes it started.
type teeWriter struct {
	http.ResponseWriter
	status int
	head   []byte
}

// teeMax is how much of an answer teeWriter keeps: a restore of the most
// sandboxes answers in less.
const teeMax = 1 << 20

func (t *teeWriter) WriteHeader(code int) {
	if t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(b []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
	}
	if room := teeMax - len(t.head); room > 0 {
		t.head = append(t.head, b[:min(len(b), room)]...)
	}
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// sandboxes are the IDs a successful create or restore answered. An
// answer replayed to a retry is none: the request it answers may have run
// on another node (docs/API.md, "Retries").
func (t *teeWriter) sandboxes() []string {
	if t.status/100 != 2 || t.Header().Get(api.ReplayedHeader) != "" {
		return nil
	}
	var one api.Sandbox
	var many api.RestoreResult
	if json.Unmarshal(t.head, &many) == nil && len(many.Sandboxes) > 0 {
		ids := make([]string, len(many.Sandboxes))
		for i, sb := range many.Sandboxes {
			ids[i] = sb.ID
		}
		return ids
	}
	if json.Unmarshal(t.head, &one) == nil && one.ID != "" {
		return []string{one.ID}
	}
	return nil
}
