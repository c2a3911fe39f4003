//go:build linux

// Package inproc is a runtime for tests: each sandbox is a real guest agent
// (package agent) serving in this process, on a unix socket in the
// sandbox's private directory, with no isolation at all: its processes run
// as the test's user, on the host's filesystem. Only the hostname the
// manager gives a sandbox is not set (it would be the host's). It
// implements runtime.Runtime completely, so the manager, the server and the
// CLI run their real lifecycle over it without root, and it gives tests the
// hooks to make the races they need: a start that waits (Gate), a sandbox
// whose init dies (Crash), a daemon restart (a new manager adopting from the
// same Runtime).
package inproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

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
	// Memoryless, when set before Start, hides its instances' Pause and
	// Resume (runtime.Pauser), as the container runtime has none: the
	// manager pauses them by a final snapshot and a stop.
	Memoryless bool
	// Format, when set, is the format of its memory images
	// (runtime.Restorer): Pause writes an image, which names the sandbox
	// and counts its pauses, and a Start from one (Spec.Memory) reads it,
	// as Instance.Restored says.
	Format string

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
	in := &Instance{r: r, id: spec.ID, dir: spec.Dir, sock: filepath.Join(spec.Dir, "agent.sock"), done: make(chan struct{})}
	if spec.Memory != "" {
		b, err := os.ReadFile(spec.Memory)
		if err != nil {
			return nil, fmt.Errorf("memory image: %w", err)
		}
		if err := json.Unmarshal(b, &in.restored); err != nil {
			return nil, fmt.Errorf("memory image: %w", err)
		}
		in.pauses = in.restored.Pauses
	}
	in.op.Lock()
	err := in.serve()
	in.op.Unlock()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.live[spec.ID] = in
	r.started++
	r.mu.Unlock()
	return r.shown(in), nil
}

// ImageFormat implements runtime.Restorer.
func (r *Runtime) ImageFormat() string { return r.Format }

// Memory is what an Instance's memory image holds.
type Memory struct {
	Sandbox string `json:"sandbox"`
	Pauses  int    `json:"pauses"` // the image's own among them
}

// imageFile is the name of a paused instance's image in its directory.
const imageFile = "memory.img"

// shown is in as Start and Adopt answer it: without its Pauser methods
// when the runtime is Memoryless.
func (r *Runtime) shown(in *Instance) runtime.Instance {
	if r.Memoryless {
		return struct{ runtime.Instance }{in}
	}
	return in
}

// state is what an Instance reports for Adopt.
type state struct {
	ID string `json:"id"`
}

// Adopt implements runtime.Runtime: a sandbox this Runtime still runs.
func (r *Runtime) Adopt(_ context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || st.ID != spec.ID {
		return nil, runtime.ErrGone
	}
	if in := r.Live(spec.ID); in != nil {
		return r.shown(in), nil
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

// Instance is one in-process sandbox. It pauses too (runtime.Pauser), but
// unlike a VM it does not keep its processes across a pause: Pause ends
// its agent and Resume starts a new one on the same socket. Pause, Resume
// and Stop are serialized, and nothing resumes a sandbox that has ended.
type Instance struct {
	r         *Runtime
	id, dir   string
	sock      string
	restored  Memory // what a start from a memory image read in it
	pauses    int    // guarded by op
	imagePath string // guarded by op: its image while paused with one

	op  sync.Mutex // serializes Pause, Resume and the end
	cur *run       // guarded by op: the agent serving, nil while paused

	once sync.Once
	done chan struct{}
}

// run is one agent serving for an instance; paused says Pause stopped it,
// so its end is not the sandbox's.
type run struct {
	srv    *agent.Server
	cancel context.CancelFunc
	paused atomic.Bool
}

var (
	_ runtime.Instance = (*Instance)(nil)
	_ runtime.Pauser   = (*Instance)(nil)
)

// serve starts an agent on the instance's socket. in.op must be held.
func (in *Instance) serve() error {
	os.Remove(in.sock)
	l, err := net.Listen("unix", in.sock)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ru := &run{srv: agent.New(agent.Options{SandboxID: in.id, KeepHostname: true}, in.r.log.With("sandbox", in.id)), cancel: cancel}
	in.cur = ru
	go func() {
		ru.srv.Serve(ctx, l)
		if !ru.paused.Load() {
			in.end()
		}
	}()
	return nil
}

// Pause implements runtime.Pauser: the agent stops; Done does not fire.
func (in *Instance) Pause(context.Context) error {
	in.op.Lock()
	defer in.op.Unlock()
	if in.ended() {
		return errors.New("the sandbox has ended")
	}
	if in.cur == nil {
		return nil
	}
	if in.r.Format != "" {
		in.pauses++
		b, _ := json.Marshal(Memory{Sandbox: in.id, Pauses: in.pauses})
		path := filepath.Join(in.dir, imageFile)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		in.imagePath = path
	}
	ru := in.cur
	ru.paused.Store(true)
	ru.cancel()
	ru.srv.Close()
	in.cur = nil
	return nil
}

// Image implements runtime.Pauser: the image Pause wrote, when the
// runtime has a Format.
func (in *Instance) Image() string {
	in.op.Lock()
	defer in.op.Unlock()
	return in.imagePath
}

// Restored is what the memory image it started from held (zero when it
// booted).
func (in *Instance) Restored() Memory { return in.restored }

// Resume implements runtime.Pauser: a new agent serves on the socket.
func (in *Instance) Resume(context.Context) error {
	in.op.Lock()
	defer in.op.Unlock()
	switch {
	case in.ended():
		return errors.New("the sandbox has ended")
	case in.cur != nil:
		return nil
	}
	if err := in.serve(); err != nil {
		return err
	}
	if in.imagePath != "" {
		os.Remove(in.imagePath)
		in.imagePath = ""
	}
	return nil
}

func (in *Instance) ended() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// State implements runtime.Instance.
func (in *Instance) State() []byte {
	b, _ := json.Marshal(state{ID: in.id})
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

// Quiesce implements runtime.Instance, as Freeze.
func (in *Instance) Quiesce(ctx context.Context, path string) (func() error, error) {
	return in.Freeze(ctx, path)
}

// Stop implements runtime.Instance.
func (in *Instance) Stop(context.Context) error {
	in.end()
	return nil
}

// Crash ends the sandbox as if its init had died on its own.
func (in *Instance) Crash() { in.end() }

func (in *Instance) end() {
	in.op.Lock()
	defer in.op.Unlock()
	in.once.Do(func() {
		if ru := in.cur; ru != nil {
			ru.cancel()
			ru.srv.Close()
			in.cur = nil
		}
		in.r.mu.Lock()
		if in.r.live[in.id] == in {
			delete(in.r.live, in.id)
		}
		in.r.mu.Unlock()
		close(in.done)
	})
}
