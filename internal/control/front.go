// Package control is the fleet's front (docs/ARCHITECTURE.md, "The
// fleet"). Every API request reaches a control replica first; the front
// decides which node must answer it and sends it on, whole and streaming,
// to that node's API:
//
//   - a request about one sandbox (/v1/sandboxes/ID and below, and its
//     preview host names) goes to the node that runs it;
//   - a create, and a restore of a snapshot, go to the node the fleet
//     places them on, chosen from what the request asks for;
//   - /v1/nodes/ID/metrics goes to node ID, whose metrics they are, and
//     /metrics is the front's own process's (Options.Local), as are the
//     web console's static files (/console and below);
//   - anything else (lists, snapshots, keys, templates) goes to any node:
//     nodes share the metadata store, so any of them answers for all.
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
	// Snapshot is the snapshot a restore starts from; "" for a create.
	Snapshot string
	// Template is a create's template ("" for the default).
	Template string
	// Count is how many sandboxes a restore starts (a create: 1).
	Count int
	Spec  api.SandboxSpec
}

// Options are what the front takes from the API server.
type Options struct {
	// Preview returns the sandbox a preview host name is for
	// (server.Server.PreviewSandbox).
	Preview func(host string) (id string, ok bool)
	// Authenticate checks a create's or a restore's API key before the
	// front reads more of its body than any caller may send
	// (server.Server.Authenticate). The node checks every request's key.
	Authenticate func(r *http.Request) error
	// WriteError answers a request with an error (server.Server.WriteError).
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// MaxBody bounds the body of a create or restore read for placement:
	// the API's bound on a JSON body.
	MaxBody int64
	// Local answers GET /metrics, the metrics of the front's own process
	// (a control replica's, or a single machine's), and the web console's
	// files, which every process serves from its own binary.
	Local http.Handler
}

// Front sends each API request on to its node; see the package comment.
type Front struct {
	fleet Fleet
	opts  Options
}

// NewFront returns the front of fleet.
func NewFront(fleet Fleet, opts Options) *Front { return &Front{fleet: fleet, opts: opts} }

// ServeHTTP implements http.Handler.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p == "/metrics" || p == "/console" || strings.HasPrefix(p, "/console/") {
		if _, preview := f.opts.Preview(r.Host); !preview {
			f.opts.Local.ServeHTTP(w, r)
			return
		}
	}
	node, placed, err := f.route(r)
	if err == nil {
		var h http.Handler
		if h, err = f.fleet.Node(node); err == nil {
			if !placed {
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

// route picks the node for r, and says whether it placed a create or
// restore there.
func (f *Front) route(r *http.Request) (node string, placed bool, err error) {
	ctx := r.Context()
	if id, ok := f.opts.Preview(r.Host); ok {
		node, err = f.owner(ctx, id)
		return node, false, err
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && path == "/v1/sandboxes":
		var req api.CreateSandboxRequest
		if err := f.peek(r, &req); err != nil {
			return "", false, err
		}
		node, err = f.fleet.Place(ctx, Placement{Template: req.Template, Count: 1, Spec: req.SandboxSpec})
		return node, true, err
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1/snapshots/") && strings.HasSuffix(path, "/restore"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/v1/snapshots/"), "/restore")
		if id == "" || strings.Contains(id, "/") {
			break
		}
		var req api.RestoreRequest
		if err := f.peek(r, &req); err != nil {
			return "", false, err
		}
		node, err = f.fleet.Place(ctx, Placement{Snapshot: id, Count: max(req.Count, 1), Spec: req.SandboxSpec})
		return node, true, err
	case strings.HasPrefix(path, "/v1/sandboxes/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1/sandboxes/"), "/")
		if id != "" {
			node, err = f.owner(ctx, id)
			return node, false, err
		}
	case strings.HasPrefix(path, "/v1/nodes/") && strings.HasSuffix(path, "/metrics"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/v1/nodes/"), "/metrics")
		if id == "" || strings.Contains(id, "/") {
			break
		}
		if _, err := f.fleet.Node(id); err != nil {
			if err := f.opts.Authenticate(r); err != nil {
				return "", false, err
			}
			return "", false, api.Errorf(api.CodeNotFound, "node %s not found in the fleet", id)
		}
		return id, false, nil
	}
	node, err = f.fleet.Any(ctx)
	return node, false, err
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
		if err := f.opts.Authenticate(r); err != nil {
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
