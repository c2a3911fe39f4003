//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	processpb "warren/internal/agent/pb/process"
)

const (
	// defaultPath is PATH of every process unless Init or the request set it.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// drainGrace is how long the output pipes may stay silent after the
	// process exited before the end is sent: background children that
	// inherited the pipes must not hold the end back.
	drainGrace = 200 * time.Millisecond
	// drainLimit bounds the output still published after the process exited
	// (what was left in the pipes, plus what background children add).
	drainLimit = 4 << 20
	readChunk  = 32 << 10
)

// proc is a process the agent started. Its lifecycle: running (forked,
// registered with the reaper) → exited (reaped: exited is closed) → ended
// (its output drained, the end published: done is closed) → released
// (forgotten by the table: its pipes are closed).
type proc struct {
	pid     uint32
	tag     *string
	config  *processpb.ProcessConfig
	started time.Time
	out     *output

	// stdout and stderr are the read ends, owned by the readers. A process
	// on a pty has one output, its master, which is both stdout and stdin
	// here (stderr is nil); the master is closed where stdin is.
	stdout, stderr *os.File
	pty            *ptyState // nil without a pty

	exited  chan struct{} // closed by the reaper's callback
	done    chan struct{} // closed once the end was published
	readers sync.WaitGroup

	// stdinSem (capacity 1) is held by whoever writes to or closes stdin, so
	// input stays in order; a channel, so waiting for it can be cancelled.
	stdinSem chan struct{}

	mu       sync.Mutex // guards the fields below
	status   unix.WaitStatus
	exitedAt time.Time
	timedOut bool
	timer    *time.Timer
	stdin    *os.File // write end; nil once closed
	end      *processpb.ProcessEvent_EndEvent
	endedAt  time.Time
}

// notStarted is a command that could not be executed: like a shell, the
// agent reports it as a process that ended with code 127 (not found) or 126
// (found but not executable), with a message on stderr.
type notStarted struct {
	code int32
	msg  string
}

// startProcess forks the process of req, subscribed to its output when
// subscribe is set (so the caller sees every byte), and returns it running.
// An RPC error means nothing was started; a notStarted means the command
// could not be executed.
func (s *Server) startProcess(req *processpb.StartRequest, subscribe bool) (*proc, *subscriber, *notStarted, error) {
	cfg := req.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return nil, nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	if err := checkStrings(cfg); err != nil {
		return nil, nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	s.processDefaults(cfg)
	acc, err := s.users.lookup(cfg.GetUser())
	if err != nil {
		return nil, nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	euid := uint32(os.Geteuid())
	if euid != 0 && acc.uid != euid {
		return nil, nil, nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("the agent cannot run processes as user %q", cfg.GetUser()))
	}
	env := s.processEnv(acc, cfg.GetEnvs())
	cwd, err := processDir(cfg, acc)
	if err != nil {
		return nil, nil, nil, err
	}
	bin, ns := lookPath(cfg.GetCmd(), envValue(env, "PATH"), cwd)
	if ns != nil {
		return nil, nil, ns, nil
	}
	if req.Tag != nil && s.procs.runningTag(req.GetTag()) {
		return nil, nil, nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a running process has tag %q", req.GetTag()))
	}

	var stdio *procIO
	if req.Pty != nil {
		env = withTERM(env)
		stdio, err = s.openPTY(req.GetPty(), acc.uid)
	} else {
		stdio, err = pipes(len(req.GetStdinData()) > 0 || req.GetStdin())
	}
	if err != nil {
		return nil, nil, nil, err
	}

	var cred *syscall.Credential
	if euid == 0 {
		cred = &syscall.Credential{Uid: acc.uid, Gid: acc.gid, Groups: acc.groups}
	}
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: stdio.childFDs(),
		Sys:   stdio.sysProcAttr(cred),
	}
	p := &proc{
		tag:      req.Tag,
		config:   proto.CloneOf(cfg),
		out:      newOutput(&s.output),
		stdout:   stdio.stdout,
		stderr:   stdio.stderr,
		stdin:    stdio.stdin,
		pty:      stdio.pty,
		exited:   make(chan struct{}),
		done:     make(chan struct{}),
		stdinSem: make(chan struct{}, 1),
	}
	p.config.Cwd = &cwd
	var sub *subscriber
	if subscribe {
		sub = p.out.subscribe(false)
	}

	argv := append([]string{cfg.GetCmd()}, cfg.GetArgs()...)
	s.reaper.forkMu.RLock()
	p.started = time.Now()
	pid, err := s.forkExec(bin, argv, attr)
	if err == nil {
		p.pid = uint32(pid)
		s.reaper.register(pid, p.onExit)
		s.procs.add(p)
	}
	s.reaper.forkMu.RUnlock()
	stdio.closeChild()
	if err != nil {
		stdio.closeAll()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			switch errno {
			case unix.ENOENT:
				return nil, nil, &notStarted{127, fmt.Sprintf("warren-agent: %s: %v\n", cfg.GetCmd(), errno)}, nil
			case unix.EACCES, unix.EPERM, unix.ENOEXEC, unix.EISDIR, unix.ETXTBSY, unix.ELOOP, unix.ENOTDIR, unix.E2BIG:
				return nil, nil, &notStarted{126, fmt.Sprintf("warren-agent: %s: %v\n", cfg.GetCmd(), errno)}, nil
			}
		}
		return nil, nil, nil, connect.NewError(errnoCode(err), fmt.Errorf("start %s: %w", cfg.GetCmd(), err))
	}

	if d := cfg.GetTimeoutMs(); d > 0 {
		p.mu.Lock()
		if p.exitedAt.IsZero() { // else onExit has run: nothing to time out
			p.timer = time.AfterFunc(time.Duration(min(d, uint64(1<<62/time.Millisecond)))*time.Millisecond, p.onTimeout)
		}
		p.mu.Unlock()
	}
	// A process without input was given a closed stdin (pipes); a pty's
	// master, its stdin, stays open until the process ends.
	if data := req.GetStdinData(); len(data) > 0 {
		s.goFeedStdin(p, data, req.GetStdin() || p.pty != nil)
	}
	if p.pty != nil {
		p.readers.Add(1)
		go p.read(p.stdout, streamPTY)
	} else {
		p.readers.Add(2)
		go p.read(p.stdout, streamStdout)
		go p.read(p.stderr, streamStderr)
	}
	go s.wait(p)
	return p, sub, nil, nil
}

// goFeedStdin writes stdin_data, then closes stdin unless it is to stay open.
// It holds stdinSem, so later input waits for it.
func (s *Server) goFeedStdin(p *proc, data []byte, keep bool) {
	p.stdinSem <- struct{}{}
	go func() {
		defer func() { <-p.stdinSem }()
		if f := p.stdinFile(); f != nil {
			if _, err := f.Write(data); err != nil {
				s.log.Debug("write stdin_data", "pid", p.pid, "err", err)
			}
		}
		if !keep {
			p.closeStdin()
		}
	}()
}

func checkStrings(cfg *processpb.ProcessConfig) error {
	bad := func(s string) bool { return strings.IndexByte(s, 0) >= 0 }
	if bad(cfg.GetCmd()) || bad(cfg.GetCwd()) || bad(cfg.GetUser()) || slices.ContainsFunc(cfg.GetArgs(), bad) {
		return errors.New("NUL byte in process config")
	}
	for k, v := range cfg.GetEnvs() {
		if k == "" || strings.ContainsRune(k, '=') || bad(k) || bad(v) {
			return fmt.Errorf("bad environment variable name %q", k)
		}
	}
	return nil
}

// processEnv is the environment of a new process: the defaults, then Init's
// variables, then the request's, each overriding the one before.
func (s *Server) processEnv(acc *account, req map[string]string) []string {
	m := map[string]string{
		"PATH":    defaultPath,
		"HOME":    acc.home,
		"USER":    acc.name,
		"LOGNAME": acc.name,
	}
	s.mu.Lock()
	maps.Copy(m, s.env)
	s.mu.Unlock()
	maps.Copy(m, req)
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// processDir is the working directory: the requested one, or the user's home
// (or "/" when the home does not exist).
func processDir(cfg *processpb.ProcessConfig, acc *account) (string, error) {
	if cfg.Cwd == nil || cfg.GetCwd() == "" {
		if fi, err := os.Stat(acc.home); err == nil && fi.IsDir() {
			return acc.home, nil
		}
		return "/", nil
	}
	dir, err := resolvePath(cfg.GetCwd(), acc.home)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s: %w", dir, unwrapPathError(err)))
	}
	if !fi.IsDir() {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s: not a directory", dir))
	}
	return dir, nil
}

// lookPath finds cmd as a shell would: a name with a slash is a path (from
// cwd when relative); otherwise the first executable file of that name in
// PATH.
func lookPath(cmd, pathEnv, cwd string) (string, *notStarted) {
	notFound := &notStarted{127, fmt.Sprintf("warren-agent: %s: command not found\n", cmd)}
	check := func(p string) (exec bool, exists bool, isDir bool) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return false, false, false
		}
		return fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0, true, fi.IsDir()
	}
	if strings.ContainsRune(cmd, '/') {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		exec, exists, isDir := check(p)
		switch {
		case !exists:
			return "", notFound
		case isDir:
			return "", &notStarted{126, fmt.Sprintf("warren-agent: %s: Is a directory\n", cmd)}
		case !exec:
			return "", &notStarted{126, fmt.Sprintf("warren-agent: %s: Permission denied\n", cmd)}
		}
		return p, nil
	}
	found := false
	for dir := range strings.SplitSeq(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		exec, exists, isDir := check(p)
		if exec {
			return p, nil
		}
		found = found || (exists && !isDir)
	}
	if found {
		return "", &notStarted{126, fmt.Sprintf("warren-agent: %s: Permission denied\n", cmd)}
	}
	return "", notFound
}

// onExit is the reaper's callback.
func (p *proc) onExit(ws unix.WaitStatus) {
	p.mu.Lock()
	p.status = ws
	p.exitedAt = time.Now()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	close(p.exited)
}

// onTimeout kills the process group when the timeout fires first.
func (p *proc) onTimeout() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exitedAt.IsZero() {
		return
	}
	p.timedOut = true
	p.signalForeground(unix.SIGKILL)
	_ = unix.Kill(-int(p.pid), unix.SIGKILL)
}

// signal sends sig to the process group (to the process alone when it left
// its group), and on a pty to the terminal's foreground group. The group is only signalled before the process is reaped, so a
// pid reused after that cannot be hit.
func (p *proc) signal(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exitedAt.IsZero() {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has ended", p.pid))
	}
	p.signalForeground(sig)
	err := unix.Kill(-int(p.pid), sig)
	if err == unix.ESRCH {
		err = unix.Kill(int(p.pid), sig)
	}
	if err != nil {
		return connect.NewError(errnoCode(err), fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return nil
}

func (p *proc) stdinFile() *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdin
}

// closeStdin closes stdin if still open; it reports whether it was.
func (p *proc) closeStdin() bool {
	p.mu.Lock()
	f := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if f == nil {
		return false
	}
	f.Close()
	if p.pty != nil {
		p.pty.closed()
	}
	return true
}

// lockStdin takes stdinSem, waiting for earlier input at most until ctx ends.
func (p *proc) lockStdin(ctx context.Context) error {
	select {
	case p.stdinSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("wait for earlier stdin input: %w", ctx.Err()))
	}
}

// writeStdin writes data to stdin in order with other input; it gives up
// when ctx ends (a process that does not read its stdin cannot hang the
// call).
func (p *proc) writeStdin(ctx context.Context, data []byte) error {
	if err := p.lockStdin(ctx); err != nil {
		return err
	}
	defer func() { <-p.stdinSem }()
	f := p.stdinFile()
	if f == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("stdin of process %d is closed", p.pid))
	}
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := f.Write(data); err != nil {
		if ctx.Err() != nil {
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("write stdin: %w", ctx.Err()))
		}
		if errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EPIPE) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("stdin of process %d is closed", p.pid))
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("write stdin: %w", err))
	}
	return nil
}

// read publishes what the process writes to f. After the process exited it
// goes on while data keeps coming (at most drainLimit bytes, with gaps under
// drainGrace); then it stops publishing, and only discards until EOF, so a
// background child that inherited the pipe is not killed by SIGPIPE.
func (p *proc) read(f *os.File, stream streamID) {
	buf := make([]byte, readChunk)
	afterExit := 0
	for {
		exited := isClosed(p.exited)
		if exited {
			_ = f.SetReadDeadline(time.Now().Add(drainGrace))
		}
		n, err := f.Read(buf)
		if n > 0 {
			p.out.publish(stream, bytes.Clone(buf[:n]))
			if exited {
				afterExit += n
			}
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			p.readers.Done()
			// A pty's master (EIO: no slave left) is closed with stdin once
			// the process is reaped: closed before, it would hang up the
			// terminal of a session leader still on its way out (SIGHUP).
			if stream != streamPTY {
				f.Close()
			}
			return
		}
		if err != nil || afterExit > drainLimit {
			break
		}
	}
	p.readers.Done()
	if stream == streamPTY {
		// The master is closed with stdin: a background child that still
		// holds the slave gets EIO from then on, not a signal.
		return
	}
	for {
		_ = f.SetReadDeadline(time.Time{})
		if _, err := f.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
	}
	f.Close()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// wait runs the end of the process: once reaped and drained, it publishes
// the end and hands the process to the table's retention.
func (s *Server) wait(p *proc) {
	<-p.exited
	wake := time.Now().Add(drainGrace)
	_ = p.stdout.SetReadDeadline(wake)
	if p.stderr != nil {
		_ = p.stderr.SetReadDeadline(wake)
	}
	p.readers.Wait()
	p.closeStdin()

	p.mu.Lock()
	end := endEvent(p.status, p.exitedAt.Sub(p.started), p.timedOut)
	p.end = end
	p.endedAt = time.Now()
	p.mu.Unlock()
	p.out.finish(end)
	close(p.done)
	s.procs.markEnded(p)
	s.log.Debug("process ended", "pid", p.pid, "status", end.GetStatus())
}

// endEvent describes a wait status as a shell would: a signal's code is
// 128+signal.
func endEvent(ws unix.WaitStatus, d time.Duration, timedOut bool) *processpb.ProcessEvent_EndEvent {
	end := &processpb.ProcessEvent_EndEvent{TimedOut: timedOut, DurationUs: uint64(max(d, 0) / time.Microsecond)}
	switch {
	case ws.Exited():
		end.ExitCode = int32(ws.ExitStatus())
		end.Exited = true
		end.Status = fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		end.ExitCode = 128 + int32(ws.Signal())
		end.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			end.Status += " (core dumped)"
		}
	default:
		end.ExitCode = -1
		end.Status = fmt.Sprintf("unknown wait status %#x", uint32(ws))
	}
	return end
}

// release closes what the process still holds; the table calls it when it
// forgets an ended process.
func (p *proc) release() {
	p.closeStdin()
	p.stdout.Close()
	if p.stderr != nil {
		p.stderr.Close()
	}
}

// info describes the process for List.
func (p *proc) info() *processpb.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &processpb.ProcessInfo{
		Config:  p.config,
		Pid:     p.pid,
		Tag:     p.tag,
		Running: p.end == nil,
		End:     p.end,
	}
}
