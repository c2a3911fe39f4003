//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agent/pb/control/controlpbconnect"
	"warren/internal/backoff"
	"warren/internal/fsfreeze"
)

// controlService implements warren.agent.v1.Control.
type controlService struct{ s *Server }

var _ controlpbconnect.ControlHandler = controlService{}

// frozenFS is a filesystem this agent froze; fd (opened on the path that was
// frozen) is kept to thaw it without a lookup on the frozen filesystem.
type frozenFS struct {
	path  string
	fd    int
	timer *time.Timer // thaws by itself after Options.FreezeTimeout
}

// Info reports the agent's version and the sandbox's view of itself.
func (h controlService) Info(ctx context.Context, req *connect.Request[controlpb.InfoRequest]) (*connect.Response[controlpb.InfoResponse], error) {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	h.s.mu.Lock()
	id := h.s.sandboxID
	h.s.mu.Unlock()
	return connect.NewResponse(&controlpb.InfoResponse{
		Version:   h.s.opts.Version,
		Kernel:    unix.ByteSliceToString(uts.Release[:]),
		Hostname:  unix.ByteSliceToString(uts.Nodename[:]),
		Pid:       uint32(os.Getpid()),
		UptimeMs:  uint64(time.Since(h.s.started) / time.Millisecond),
		SandboxId: id,
	}), nil
}

// Init sets the sandbox's identity: the machine ID, clock and random seed
// of a restored guest (identity), the hostname (when given; /etc/hostname,
// and a guest's /etc/hosts, follow it), the default environment of later
// processes (replacing the previous one) and the sandbox id.
func (h controlService) Init(ctx context.Context, req *connect.Request[controlpb.InitRequest]) (*connect.Response[controlpb.InitResponse], error) {
	m := req.Msg
	for k, v := range m.GetEnvs() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad environment variable name %q", k))
		}
	}
	hn := m.GetHostname()
	if len(hn) > 64 || strings.ContainsAny(hn, "\x00\n\t /") {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad hostname %q", hn))
	}
	if err := h.s.identity(m); err != nil {
		return nil, err
	}
	// The container runtime sets the hostname before it drops the
	// capability to change it: setting the same name again is a no-op.
	if cur, err := os.Hostname(); hn != "" && !h.s.opts.KeepHostname && (err != nil || cur != hn) {
		if err := unix.Sethostname([]byte(hn)); err != nil {
			return nil, connect.NewError(errnoCode(err), fmt.Errorf("set hostname: %w", err))
		}
		if h.s.ownKernel() {
			h.s.identityFile("/etc/hosts", guestHosts(hn))
		}
	}
	if hn != "" && h.s.ownsRoot() {
		h.s.identityFile("/etc/hostname", hostnameFile(hn))
	}
	h.s.mu.Lock()
	if m.GetSandboxId() != "" {
		h.s.sandboxID = m.GetSandboxId()
	}
	h.s.mu.Unlock()
	h.s.applyTemplate(h.s.loadTemplate(), m.GetEnvs())
	h.s.log.Info("initialized", "sandbox", m.GetSandboxId(), "hostname", m.GetHostname())
	return connect.NewResponse(&controlpb.InitResponse{}), nil
}

// Freeze syncs and freezes the filesystem mounted at path.
func (h controlService) Freeze(ctx context.Context, req *connect.Request[controlpb.FreezeRequest]) (*connect.Response[controlpb.FreezeResponse], error) {
	if err := h.s.freeze(req.Msg.GetPath()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controlpb.FreezeResponse{}), nil
}

// Thaw thaws the filesystem mounted at path.
func (h controlService) Thaw(ctx context.Context, req *connect.Request[controlpb.ThawRequest]) (*connect.Response[controlpb.ThawResponse], error) {
	if err := h.s.thaw(req.Msg.GetPath()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controlpb.ThawResponse{}), nil
}

// Shutdown terminates every process, syncs, answers, and then stops the
// server and calls Options.OnShutdown.
func (h controlService) Shutdown(ctx context.Context, req *connect.Request[controlpb.ShutdownRequest]) (*connect.Response[controlpb.ShutdownResponse], error) {
	grace := time.Duration(min(req.Msg.GetGraceMs(), uint64(maxGrace/time.Millisecond))) * time.Millisecond
	h.s.terminate(ctx, grace)
	go h.s.finishShutdown()
	return connect.NewResponse(&controlpb.ShutdownResponse{}), nil
}

// maxGrace bounds the grace period a Shutdown may ask for.
const maxGrace = 10 * time.Minute

func freezePath(p string) (string, error) {
	if p == "" {
		p = "/"
	}
	return resolvePath(p, "/")
}

func (s *Server) freeze(reqPath string) error {
	p, err := freezePath(reqPath)
	if err != nil {
		return err
	}
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fsError("freeze", p, err)
	}
	if _, ok := s.frozen[st.Dev]; ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("freeze %s: %w", p, fsfreeze.ErrFrozen))
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsError("freeze", p, err)
	}
	if err := unix.Syncfs(fd); err != nil {
		s.log.Warn("syncfs before freeze", "path", p, "err", err)
	}
	if err := fsfreeze.Freeze(fd); err != nil {
		unix.Close(fd)
		for _, known := range []error{fsfreeze.ErrFrozen, fsfreeze.ErrUnsupported} {
			if errors.Is(err, known) {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("freeze %s: %w", p, known))
			}
		}
		return fsError("freeze", p, err)
	}
	dev := st.Dev
	s.frozen[dev] = &frozenFS{
		path: p,
		fd:   fd,
		timer: time.AfterFunc(s.opts.FreezeTimeout, func() {
			s.freezeMu.Lock()
			defer s.freezeMu.Unlock()
			if f, ok := s.frozen[dev]; ok && f.fd == fd {
				s.log.Warn("thawing by itself: not thawed in time", "path", p, "after", s.opts.FreezeTimeout)
				s.thawLocked(dev)
			}
		}),
	}
	s.log.Info("frozen", "path", p)
	return nil
}

func (s *Server) thaw(reqPath string) error {
	p, err := freezePath(reqPath)
	if err != nil {
		return err
	}
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fsError("thaw", p, err)
	}
	if _, ok := s.frozen[st.Dev]; ok {
		return s.thawLocked(st.Dev)
	}
	// Not frozen by this agent; thaw it anyway if something else froze it.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsError("thaw", p, err)
	}
	defer unix.Close(fd)
	if err := fsfreeze.Thaw(fd); err != nil {
		if errors.Is(err, fsfreeze.ErrNotFrozen) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("thaw %s: %w", p, fsfreeze.ErrNotFrozen))
		}
		return fsError("thaw", p, err)
	}
	return nil
}

// thawLocked thaws a filesystem this agent froze. freezeMu must be held.
func (s *Server) thawLocked(dev uint64) error {
	f := s.frozen[dev]
	delete(s.frozen, dev)
	f.timer.Stop()
	err := fsfreeze.Thaw(f.fd)
	unix.Close(f.fd)
	if err != nil && !errors.Is(err, fsfreeze.ErrNotFrozen) { // thawed meanwhile by someone else
		return fsError("thaw", f.path, err)
	}
	s.log.Info("thawed", "path", f.path)
	return nil
}

// thawAll thaws every filesystem this agent froze.
func (s *Server) thawAll() {
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	for dev := range s.frozen {
		if err := s.thawLocked(dev); err != nil {
			s.log.Error("thaw", "err", err)
		}
	}
}

// terminate ends every process of the sandbox: SIGTERM, up to grace to exit,
// SIGKILL to the rest, then sync. As PID 1 (of a VM or a pid namespace) it
// signals everything with kill(-1); otherwise only the process groups it
// started.
func (s *Server) terminate(ctx context.Context, grace time.Duration) {
	s.thawAll()
	s.log.Info("terminating processes", "grace", grace)
	isInit := os.Getpid() == 1
	signalAll := func(sig unix.Signal) {
		if isInit {
			_ = unix.Kill(-1, sig)
			return
		}
		for _, p := range s.procs.running() {
			_ = p.signal(sig)
		}
	}
	gone := func() bool {
		if isInit {
			return unix.Kill(-1, 0) == unix.ESRCH
		}
		return len(s.procs.running()) == 0
	}
	waitGone := func(d time.Duration) {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_ = backoff.Poll(wctx, backoff.Backoff{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond}, func() (bool, error) { return gone(), nil })
	}
	signalAll(unix.SIGTERM)
	waitGone(grace)
	if !gone() {
		signalAll(unix.SIGKILL)
		waitGone(2 * time.Second)
	}
	unix.Sync()
}

// Shutdown does what the Shutdown call does, from inside (the binary calls it
// on SIGTERM): terminate every process within grace, sync, stop serving,
// call Options.OnShutdown. It returns after the hook returned.
func (s *Server) Shutdown(ctx context.Context, grace time.Duration) {
	s.terminate(ctx, grace)
	s.finishShutdown()
}

// finishShutdown stops serving (letting answers in flight, among them the
// Shutdown call's own, be sent) and calls the hook, once.
func (s *Server) finishShutdown() {
	s.shutdownOnce.Do(func() {
		s.mu.Lock()
		s.shuttingDown = true
		servers := make([]*http.Server, 0, len(s.servers))
		for srv := range s.servers {
			servers = append(servers, srv)
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownDrain)
		defer cancel()
		for _, srv := range servers {
			if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("stop serving", "err", err)
			}
			srv.Close()
		}
		if s.opts.OnShutdown != nil {
			s.opts.OnShutdown()
		}
		close(s.shutdownDone)
	})
}
