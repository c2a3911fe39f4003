//go:build linux

// Package inproc is a runtime for tests: each sandbox is a real guest agent
// (package agent) serving in this process, on a unix socket in the
// sandbox's private directory, with no isolation at all: its processes run
// as the test's user, on the host's filesystem. It implements
// runtime.Runtime completely, so the manager, the server and the CLI run
// their real lifecycle over it without root, and it gives tests the hooks
// to make the races they need: a start that waits (Gate), a sandbox whose
// init dies (Crash), a daemon restart (a new manager adopting from the same
// Runtime).
package inproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"

	"warren/internal/agent"
	"warren/internal/agentconn"
	"warren/internal/runtime"
)

// Runtime runs sandboxes in this process. Its zero value is not usable:
// make one with New.
type Runtime struct {
	name string
	log  *slog.Logger

	// Gate, when set, is received from by every Start before it starts
	// the agent (or until Start's ctx ends): a test holds a create in
	// "starting" until it sends.
	Gate chan struct{}

	mu      sync.Mutex           // guards live, started
	live    map[string]*Instance // by sandbox ID
	started int
}

var _ runtime.Runtime = (*Runtime)(nil)

// New makes a runtime that calls itself name ("container", say, so that
// the API's runtime names work unchanged).
func New(name string, log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runtime{name: name, log: log, live: map[string]*Instance{}}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return r.name }

// Isolation implements runtime.Runtime: none.
func (r *Runtime) Isolation() string { return "none (in-process, for tests)" }

// Available implements runtime.Runtime.
func (r *Runtime) Available() error { return nil }

// Started is how many sandboxes Start has started.
func (r *Runtime) Started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// Live is the sandbox with id, if it runs.
func (r *Runtime) Live(id string) *Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[id]
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	if r.Gate != nil {
		select {
		case <-r.Gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	sock := filepath.Join(spec.Dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	srv := agent.New(agent.Options{SandboxID: spec.ID}, r.log.With("sandbox", spec.ID))
	sctx, cancel := context.WithCancel(context.Background())
	in := &Instance{r: r, id: spec.ID, sock: sock, srv: srv, cancel: cancel, done: make(chan struct{})}
	go func() {
		srv.Serve(sctx, l)
		in.end()
	}()
	r.mu.Lock()
	r.live[spec.ID] = in
	r.started++
	r.mu.Unlock()
	return in, nil
}

// state is what an Instance reports for Adopt.
type state struct {
	ID     string `json:"id"`
	Socket string `json:"socket"`
}

// Adopt implements runtime.Runtime: a sandbox this Runtime still runs.
func (r *Runtime) Adopt(_ context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || st.ID != spec.ID {
		return nil, runtime.ErrGone
	}
	if in := r.Live(spec.ID); in != nil {
		return in, nil
	}
	return nil, runtime.ErrGone
}

// Sweep implements runtime.Runtime.
func (r *Runtime) Sweep(ctx context.Context, known, keep map[string]bool) error {
	r.mu.Lock()
	var stale []*Instance
	for id, in := range r.live {
		if known[id] && !keep[id] {
			stale = append(stale, in)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, in := range stale {
		errs = append(errs, in.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Instance is one in-process sandbox.
type Instance struct {
	r      *Runtime
	id     string
	sock   string
	srv    *agent.Server
	cancel context.CancelFunc

	once sync.Once
	done chan struct{}
}

var _ runtime.Instance = (*Instance)(nil)

// State implements runtime.Instance.
func (in *Instance) State() []byte {
	b, _ := json.Marshal(state{ID: in.id, Socket: in.sock})
	return b
}

// AgentSocket implements runtime.Instance.
func (in *Instance) AgentSocket() string { return in.sock }

// Dial implements runtime.Instance.
func (in *Instance) Dial() *agentconn.Conn { return agentconn.DialUnix(in.sock) }

// Done implements runtime.Instance.
func (in *Instance) Done() <-chan struct{} { return in.done }

// Freeze implements runtime.Instance: there is no filesystem of its own to
// freeze; the disk image is not written by the sandbox.
func (in *Instance) Freeze(context.Context, string) (func() error, error) {
	return func() error { return nil }, nil
}

// Stop implements runtime.Instance.
func (in *Instance) Stop(context.Context) error {
	in.end()
	return nil
}

// Crash ends the sandbox as if its init had died on its own.
func (in *Instance) Crash() { in.end() }

func (in *Instance) end() {
	in.once.Do(func() {
		in.cancel()
		in.srv.Close()
		in.r.mu.Lock()
		if in.r.live[in.id] == in {
			delete(in.r.live, in.id)
		}
		in.r.mu.Unlock()
		close(in.done)
	})
}
