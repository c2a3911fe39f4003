//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"warren/internal/agent/pb/control/controlpbconnect"
	"warren/internal/agent/pb/filesystem/filesystempbconnect"
	"warren/internal/agent/pb/process/processpbconnect"
)

const (
	// maxMessage bounds one RPC message (stdin_data, SendInput).
	maxMessage = 64 << 20
	// shutdownDrain bounds how long stopping lets answers in flight finish.
	shutdownDrain = 2 * time.Second
	// closeWait bounds how long Close waits for killed processes to be
	// reaped.
	closeWait = 5 * time.Second
)

// Options configure a Server. The zero value works.
type Options struct {
	// Version is reported by Info.
	Version string
	// SandboxID is reported by Info until Init sets another.
	SandboxID string
	// Env is the default environment of started processes (over PATH, HOME,
	// USER, LOGNAME) until Init replaces it.
	Env map[string]string
	// OnShutdown is called once a Shutdown (the call, or Server.Shutdown)
	// has terminated every process, synced, and stopped serving. The binary
	// decides what it does: exit in a container, power off in a VM.
	OnShutdown func()
	// KeepAlive is how long a process event stream may stay silent before a
	// keep-alive event is sent (default 30 s).
	KeepAlive time.Duration
	// StartHold is how long a process's start event may wait for its end,
	// so that a short process is answered in one write (default 2 ms: about
	// what a short command takes). A start whose stdin stays open is not
	// held.
	StartHold time.Duration
	// FreezeTimeout is how long a filesystem stays frozen before the agent
	// thaws it by itself, so that a node that died mid-snapshot cannot leave
	// the sandbox frozen (default 60 s).
	FreezeTimeout time.Duration
	// KeepHostname makes Init leave the process's hostname as it is: for an
	// agent serving in another program's process (internal/runtime/inproc),
	// whose hostname is the host's.
	KeepHostname bool
	// OwnsRoot says the agent's root is its sandbox's own (the container
	// runtime's init set it up, or it is a VM's guest): Init may then write
	// the identity files in /etc (machine-id, hostname). Without it they
	// are the host's, or a test's, and left alone.
	OwnsRoot bool
	// Guest says the agent is PID 1 of a VM's own kernel, its root the
	// guest's: Init may then step the clock, reseed the kernel's generator
	// and rewrite /etc/hosts (identity_linux.go). It implies OwnsRoot.
	Guest bool
	// OwnKernel says the agent's kernel is the sandbox's own, as a
	// guest's is, though not a machine's: gVisor's. /proc then describes
	// the sandbox (metrics_linux.go), and Init rewrites /etc/hosts for a
	// new hostname (a gVisor sandbox may wake from a memory image with the
	// image's). Guest implies it.
	OwnKernel bool
}

// Server is the guest agent. Its methods may be called concurrently.
type Server struct {
	opts    Options
	log     *slog.Logger
	started time.Time
	users   *userDB
	procs   *procTable
	output  outputMemory // every process's output, together
	ptys    atomic.Int32 // open pty masters, at most maxPTYs (pty_linux.go)
	spawn   chan func()  // runs forks on the thread in the work cgroup (JoinWork); nil without one
	reaper  *reaper
	watches *watchTable
	cpu     cpuMeter // the previous CPU sample of Metrics (metrics_linux.go)
	handler http.Handler

	mu  sync.Mutex // guards the fields below
	env map[string]string
	// defaultCwd and defaultUser are a process's when it names none, and
	// templateStarted is set once the template's start command ran
	// (template_linux.go).
	defaultCwd, defaultUser string
	templateStarted         bool
	sandboxID               string
	servers                 map[*http.Server]struct{}
	closed                  bool
	shuttingDown            bool

	freezeMu sync.Mutex           // serializes freeze and thaw; guards frozen
	frozen   map[uint64]*frozenFS // by device

	shutdownOnce sync.Once
	shutdownDone chan struct{} // closed after OnShutdown returned
	closeOnce    sync.Once
}

// New makes a Server and starts reaping children (see the package comment).
// Close releases it.
func New(opts Options, log *slog.Logger) *Server {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 30 * time.Second
	}
	if opts.StartHold <= 0 {
		opts.StartHold = 2 * time.Millisecond
	}
	if opts.FreezeTimeout <= 0 {
		opts.FreezeTimeout = 60 * time.Second
	}
	s := &Server{
		opts:         opts,
		log:          log,
		started:      time.Now(),
		users:        newUserDB("/etc/passwd", "/etc/group"),
		procs:        newProcTable(),
		env:          maps.Clone(opts.Env),
		sandboxID:    opts.SandboxID,
		servers:      make(map[*http.Server]struct{}),
		frozen:       make(map[uint64]*frozenFS),
		watches:      newWatchTable(),
		shutdownDone: make(chan struct{}),
	}
	s.reaper = acquireReaper(log)
	s.handler = s.newHandler()
	return s
}

func (s *Server) newHandler() http.Handler {
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(maxMessage),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, v any) error {
			s.log.Error("panic in handler", "procedure", spec.Procedure, "panic", v)
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(processService{s}, opts...))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(fsService{s}, opts...))
	mux.Handle(controlpbconnect.NewControlHandler(controlService{s}, opts...))
	mux.HandleFunc("/files", s.serveFiles)
	return gateFlushes(mux)
}

// Handler is the agent's whole API as one handler, for callers that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers on l (HTTP/1.1 and unencrypted HTTP/2, which client-streaming
// calls need) until ctx ends, Close is called or a Shutdown stops it. After a
// Shutdown it returns once Options.OnShutdown has returned. An orderly stop
// returns nil.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           s.handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       10 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	if s.closed || s.shuttingDown {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.servers[srv] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.servers, srv)
		s.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(l)
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	s.mu.Lock()
	shuttingDown := s.shuttingDown
	s.mu.Unlock()
	if shuttingDown {
		<-s.shutdownDone
	}
	return nil
}

// Close stops serving, ends the polling directory watchers, kills the
// processes the server started that still run (waiting a bounded time for
// them to be reaped), thaws what it froze and stops reaping. It does not call Options.OnShutdown. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		servers := make([]*http.Server, 0, len(s.servers))
		for srv := range s.servers {
			servers = append(servers, srv)
		}
		s.mu.Unlock()
		for _, srv := range servers {
			srv.Close()
		}
		s.watches.closeAll()
		running := s.procs.running()
		for _, p := range running {
			_ = p.signal(unix.SIGKILL)
		}
		deadline := time.After(closeWait)
	wait:
		for _, p := range running {
			select {
			case <-p.done:
			case <-deadline:
				s.log.Warn("processes not reaped in time", "wait", closeWait)
				break wait
			}
		}
		s.thawAll()
		s.procs.releaseAll()
		releaseReaper()
	})
	return nil
}
