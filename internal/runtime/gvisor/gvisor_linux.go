//go:build linux

// Package gvisor is warren's gVisor runtime: each sandbox runs under runsc,
// gVisor's OCI runtime, whose user-space kernel (the Sentry, on the systrap
// platform, no KVM needed) serves the sandbox's system calls. Sandboxed
// code never reaches the host kernel directly: an exploit lands in the
// Sentry, a ring-3 process that is itself confined by namespaces, a
// seccomp filter and the sandbox's cgroup, so an escape needs two steps.
// It sits between the container runtime (one step: the host kernel) and a
// microVM under real KVM.
//
// What a sandbox shares with the other runtimes: the guest agent is PID 1
// (package gvisorinit is its half in the sandbox); the root is the
// sandbox's own raw ext4 disk image, loop-mounted on the host in the
// sandbox's private directory and given to runsc as its root with runsc's
// overlay off, so writes reach the image and snapshots clone it as any
// other; the workspace disk is mounted the same way and bound at
// /workspace; the network is the sandbox's router, linked to a network
// namespace of the sandbox's own whose interface runsc's network stack
// takes over; the limits are the sandbox's cgroup, which runsc joins (CPU
// and memory there, the Sentry sizing its memory from it), with pids
// limited in the Sentry's own pids cgroup (gvisorinit).
//
// The agent dials the runtime (gvisorinit says why): the runtime listens on
// a unix socket in a directory bound into the sandbox, and reaches the
// agent over HTTP/2 on the connection it accepts (agentconn.NewH2C).
//
// Sandboxes survive a daemon restart: runsc's sandbox process does not
// depend on the daemon, and Adopt finds it by pid and start time and
// listens again for the agent, which dials the new socket.
//
// Memory checkpoints (runsc checkpoint and restore) make a sandbox pause
// with its processes (runtime.Pauser), fork with its memory
// (runtime.Forker) and start from a memory image (runtime.Imager):
// checkpoint_linux.go.
package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/agentconn"
	"warren/internal/cgroup"
	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/disk"
	"warren/internal/fsfreeze"
	"warren/internal/guestnet"
	"warren/internal/mountinfo"
	"warren/internal/netnsfile"
	"warren/internal/osthread"
	"warren/internal/procid"
	"warren/internal/runtime"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/gvisor/gvisorinit"
)

// Platform is the Sentry's platform: systrap intercepts system calls with
// seccomp traps and needs no hardware virtualization.
const Platform = "systrap"

// Isolation is how this runtime describes its boundary, everywhere.
const Isolation = "gvisor (user-space kernel, " + Platform + ")"

// minVersion is the oldest runsc release warren runs: Debian 13's. Debian
// 12's (20221219) has no systrap platform and cannot checkpoint a sandbox
// whose disk is bound from the host.
const minVersion = 20240729

// Names in a sandbox's private directory.
const (
	rootfsDir    = "rootfs"    // the root disk's mount point; the bundle is the directory itself
	workspaceDir = "workspace" // the workspace disk's mount point
	chanDir      = "chan"      // bound at gvisorinit.ChanDir; holds the agent's socket
	netnsFile    = "netns"     // the sandbox's network namespace
	consoleFIFO  = "console.fifo"
	consoleLog   = "console.log"
	runscLog     = "runsc.log"
)

// hostTasksPerPid is how many host tasks (the Sentry's threads and systrap
// stubs) one task in the sandbox may take; hostTasksBase is the Sentry's
// own. The host's pids limit of the sandbox's cgroup is set from them, so
// that it never binds before the sandbox's own limit in the Sentry does:
// a Sentry that cannot make a thread dies, and the sandbox with it.
const (
	hostTasksPerPid = 8
	hostTasksBase   = 1024
)

// Options configure the runtime.
type Options struct {
	// Dir holds the runtime's own files: runsc's state (its --root) and a
	// copy of the agent binary. It must outlive daemon restarts. Required.
	Dir string
	// Runsc is the runsc binary; default: "runsc" on PATH.
	Runsc string
	// SpillAfter is how long a paused sandbox stays frozen, its memory
	// held and a resume a matter of milliseconds, before its memory is
	// saved to an image and its process ended (checkpoint_linux.go);
	// 0: at once, before Pause returns.
	SpillAfter time.Duration
}

// Runtime is the gVisor runtime. It is safe for concurrent use.
type Runtime struct {
	log     *slog.Logger
	cgroups *cgroup.Hierarchy
	opts    Options
	runsc   string // the binary, or "" when none was found
	version int    // its release date, YYYYMMDD; 0 when unknown
	agent   string // the agent binary bound into every sandbox
	state   string // runsc --root
}

var _ runtime.Runtime = (*Runtime)(nil)

// New makes the runtime. A host without a usable runsc still gets one,
// whose Available says why.
func New(log *slog.Logger, cgroups *cgroup.Hierarchy, agentBinary string, opts Options) (*Runtime, error) {
	if opts.Dir == "" {
		return nil, errors.New("gvisor runtime: a Dir is required")
	}
	r := &Runtime{log: log, cgroups: cgroups, opts: opts, state: filepath.Join(opts.Dir, "state"),
		agent: filepath.Join(opts.Dir, "warren-agent")}
	if err := os.MkdirAll(r.state, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor runtime: %w", err)
	}
	// The agent is copied in, not bound from where it was built: a sandbox
	// started now keeps its binary whatever the host later does to that
	// path. A running sandbox holds the old file open; the new one is
	// renamed over it.
	if err := copyAgent(agentBinary, r.agent); err != nil {
		return nil, fmt.Errorf("gvisor runtime: %w", err)
	}
	bin := opts.Runsc
	if bin == "" {
		bin = "runsc"
	}
	if path, err := exec.LookPath(bin); err == nil {
		r.runsc = path
		r.version = runscVersion(path)
	}
	return r, nil
}

// copyAgent copies the agent binary to path, read-only, replacing it.
func copyAgent(from, path string) error {
	src, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	defer src.Close()
	tmp := path + ".new"
	os.Remove(tmp)
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		os.Remove(tmp)
		return err
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// versionRE finds the release date in `runsc --version`: "runsc version
// release-20240729.0" upstream, "runsc version 0.0~20240729.0" in Debian.
var versionRE = regexp.MustCompile(`runsc version \S*?(20\d{6})`)

func runscVersion(bin string) int {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return 0
	}
	return parseVersion(string(out))
}

func parseVersion(out string) int {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// Isolation implements runtime.Runtime.
func (r *Runtime) Isolation() string { return Isolation }

// Available implements runtime.Runtime: it needs root, a runsc of Debian
// 13's release or later, and user namespaces (runsc confines its own
// processes in them).
func (r *Runtime) Available() error {
	switch {
	case os.Geteuid() != 0:
		return errors.New("the gvisor runtime needs root")
	case r.runsc == "":
		return errors.New("runsc is not installed (Debian 13's package runsc; scripts/deps.sh installs it)")
	case r.version < minVersion:
		return fmt.Errorf("%s is release %d; warren needs %d or later (Debian 13's), with the systrap platform", r.runsc, r.version, minVersion)
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("user namespaces are disabled (user.max_user_namespaces = 0)")
	}
	return nil
}

// state is what Adopt needs after a daemon restart.
type state struct {
	// PID and StartTime name the sandbox's runsc sandbox process (the
	// Sentry); 0 while paused.
	PID       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start_time,omitempty"`
	// Network says the sandbox has a router (runsc --network=sandbox).
	Network bool `json:"network,omitempty"`
	// Paused says the sandbox is paused (checkpoint_linux.go): frozen,
	// its Sentry alive (PID) with every task stopped, when Frozen; else
	// saved in its directory, with no process.
	Paused bool `json:"paused,omitempty"`
	Frozen bool `json:"frozen,omitempty"`
	// Token is what the agent proves on each connection to its channel.
	Token string `json:"token"`
}

// instance is one gVisor sandbox.
type instance struct {
	r     *Runtime
	id    string
	dir   string
	agent *channel

	done     chan struct{} // closed when the sandbox ends, not when a pause ends its process
	doneOnce sync.Once

	// opMu serializes Pause, Resume, Hold and Stop; it guards the fields
	// below, mu guards them for State.
	opMu    sync.Mutex
	mu      sync.Mutex
	st      state
	proc    *procid.Process // the running Sentry; nil while paused
	console *consolelog.Drain
	spill   *time.Timer // saves a frozen sandbox's memory (armSpill)
	stopped bool
	stopErr error
}

func (in *instance) State() []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	b, _ := json.Marshal(in.st) // ints and bools always marshal
	return b
}

func (in *instance) AgentSocket() string   { return in.agent.path }
func (in *instance) Dial() *agentconn.Conn { return in.agent.conn }
func (in *instance) Done() <-chan struct{} { return in.done }

func (in *instance) closeDone() { in.doneOnce.Do(func() { close(in.done) }) }

// follow ends the sandbox when p exits, unless a pause ended it.
func (in *instance) follow(p *procid.Process) {
	<-p.Done()
	in.mu.Lock()
	planned := in.proc != p
	in.mu.Unlock()
	if !planned {
		in.closeDone()
	}
}

// run makes p the instance's running Sentry.
func (in *instance) run(p *procid.Process, pid int, start uint64) {
	in.mu.Lock()
	in.proc, in.st.PID, in.st.StartTime, in.st.Paused, in.st.Frozen = p, pid, start, false, false
	in.mu.Unlock()
	go in.follow(p)
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	if spec.DiskNBD {
		return nil, errors.New("gvisor runtime: the root disk must be an image")
	}
	var undo cleanup.Stack
	defer undo.RunIf(&err)
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, done: make(chan struct{}), st: state{Network: spec.Network != nil}}
	undo.Add(func() { r.release(context.WithoutCancel(ctx), spec.ID, spec.Dir) })
	if err := r.prepare(spec); err != nil {
		return nil, err
	}
	if spec.Network != nil {
		if err := spec.Network.PlugNetNS(filepath.Join(spec.Dir, netnsFile)); err != nil {
			return nil, err
		}
	}
	// A sandbox from a memory image has its agent's token already; a new
	// agent reads one from the channel's directory.
	if spec.Memory != "" {
		b, err := os.ReadFile(filepath.Join(spec.Memory, imageTokenFile))
		if err != nil {
			return nil, fmt.Errorf("memory image's agent token: %w", err)
		}
		in.st.Token = string(b)
	} else if in.st.Token, err = newToken(filepath.Join(spec.Dir, chanDir, gvisorinit.TokenFile)); err != nil {
		return nil, err
	}
	if in.agent, err = listen(spec.Dir, in.st.Token); err != nil {
		return nil, err
	}
	if in.console, err = consolelog.Start(filepath.Join(spec.Dir, consoleFIFO), filepath.Join(spec.Dir, consoleLog), 0); err != nil {
		return nil, err
	}
	undo.Add(in.console.Stop)
	args := []string{"run", "--detach", "--bundle", spec.Dir, spec.ID}
	if spec.Memory != "" {
		args = []string{"restore", "--detach", "--bundle", spec.Dir, "--image-path", spec.Memory, spec.ID}
	}
	if err := in.runsc(ctx, args...); err != nil {
		return nil, err
	}
	if err := in.attach(ctx); err != nil {
		return nil, err
	}
	if err := r.raise(spec); err != nil {
		return nil, err
	}
	r.log.Debug("gvisor sandbox started", "sandbox", spec.ID, "pid", in.st.PID, "from_memory", spec.Memory != "")
	return in, nil
}

// prepare makes what a sandbox needs before runsc starts it: its mounts,
// cgroup, network namespace and bundle.
func (r *Runtime) prepare(spec runtime.Spec) error {
	if err := mountImage(spec.Disk, filepath.Join(spec.Dir, rootfsDir)); err != nil {
		return err
	}
	if spec.Workspace != "" {
		if err := mountImage(spec.Workspace, filepath.Join(spec.Dir, workspaceDir)); err != nil {
			return err
		}
	}
	// The Sentry sizes its memory from the limit the cgroup has when it
	// boots: the sandbox's and the agent's reserve (the agent holds the
	// sandbox to it, gvisorinit). Once it runs, the limit grows by the
	// Sentry's own (raise).
	l := cgroup.Limits{CPUs: spec.Limits.CPUs, MemoryBytes: spec.Limits.MemoryBytes}
	if l.MemoryBytes > 0 {
		l.MemoryBytes += runtime.AgentMemoryMB << 20
	}
	if spec.Limits.Pids > 0 {
		l.Pids = hostTasksBase + hostTasksPerPid*(spec.Limits.Pids+runtime.AgentPids)
	}
	cg, err := r.cgroups.Create(spec.ID, l)
	if err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	// runsc's network stack takes the namespace's interfaces that are up,
	// loopback included.
	netns := filepath.Join(spec.Dir, netnsFile)
	if err := netnsfile.Make(netns, nil); err != nil {
		return err
	}
	if err := inNetNS(netns, func() error { return guestnet.Up("lo") }); err != nil {
		return fmt.Errorf("sandbox loopback: %w", err)
	}
	if err := os.Mkdir(filepath.Join(spec.Dir, chanDir), 0o755); err != nil {
		return err
	}
	return r.bundle(spec.Dir, spec, cg.Path(), netns)
}

// raise makes room in the sandbox's cgroup for the Sentry's own memory,
// beside what the Sentry gives the sandbox (prepare).
func (r *Runtime) raise(spec runtime.Spec) error {
	if spec.Limits.MemoryBytes == 0 {
		return nil
	}
	cg, err := r.cgroups.Open(spec.ID)
	if err != nil {
		return err
	}
	return cg.Limit(cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes + (runtime.AgentMemoryMB+runtime.SentryMemoryMB)<<20})
}

// inNetNS runs f on a thread of its own in the network namespace at netns.
func inNetNS(netns string, f func() error) (err error) {
	osthread.Throwaway(func() {
		var fd int
		if fd, err = unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return
		}
		defer unix.Close(fd)
		if err = unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return
		}
		err = f()
	})
	return err
}

// mountImage mounts the ext4 image at dir (made if missing), nosuid and
// nodev: only runsc's file server reaches it there.
func mountImage(image, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fd, err := disk.MountImage(image)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount disk: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount disk at %s: %w", dir, err)
	}
	return nil
}

// runsc runs a runsc command for the sandbox, with the flags every command
// of it takes. Its stdio is the sandbox's console; runsc itself logs to
// runsc.log in the sandbox's directory.
func (in *instance) runsc(ctx context.Context, args ...string) error {
	network := "none"
	if in.st.Network {
		network = "sandbox"
	}
	flags := []string{
		"--root", in.r.state, "--platform", Platform,
		// Writes go to the disk, not to a memory overlay.
		"--overlay2", "none",
		// The agent may connect to the runtime's socket, bound into the
		// sandbox, and to no other host socket: nothing else is bound in.
		"--host-uds", "open",
		"--network", network,
		// gVisor cannot save a connected TCP endpoint: a checkpoint
		// (pause, fork, image) resets the sandbox's open connections,
		// where it would otherwise fail and end the sandbox.
		"--net-disconnect-ok",
		"--log", filepath.Join(in.dir, runscLog),
	}
	args = slices.Clone(args)
	var extra []*os.File
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "--image-path" {
			continue
		}
		// An image's directory is handed to runsc open: in runsc's mount
		// namespace the disk pool's mount, where images are kept, is
		// detached (detachPinning), and the path would name the
		// directory beneath it, on the host's root filesystem.
		dir, err := os.Open(args[i+1])
		if err != nil {
			return fmt.Errorf("runsc %s: %w", args[0], err)
		}
		defer dir.Close()
		extra = append(extra, dir)
		args[i+1] = fmt.Sprintf("/proc/self/fd/%d", 2+len(extra))
	}
	cmd := exec.CommandContext(ctx, in.r.runsc, append(flags, args...)...)
	cmd.ExtraFiles = extra
	console, err := consolelog.Writer(filepath.Join(in.dir, consoleFIFO))
	if err != nil {
		return err
	}
	defer console.Close()
	// Files, not pipes: the sandbox inherits them and outlives the command.
	cmd.Stdout, cmd.Stderr = console, console
	// The sandbox's processes must not die with the daemon, nor take its
	// signals.
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	err = startRunsc(cmd, in.dir)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, in.runscError())
	}
	return nil
}

// runscError is the error runsc logged last in runsc.log (a stream of
// JSON records; "FATAL ERROR: " precedes a fatal one), its first line, or
// the log's tail if it holds none.
func (in *instance) runscError() string {
	b, err := os.ReadFile(filepath.Join(in.dir, runscLog))
	if err != nil {
		return ""
	}
	var last string
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var rec struct{ Msg, Level string }
		if err := dec.Decode(&rec); err != nil {
			break
		}
		if rec.Level == "error" || rec.Level == "warning" {
			last = rec.Msg
		}
	}
	if last == "" {
		return tail(string(b))
	}
	if _, fatal, ok := strings.Cut(last, "FATAL ERROR: "); ok {
		last = fatal
	}
	last, _, _ = strings.Cut(last, "\n")
	if len(last) > 1000 {
		last = last[:1000] + "…"
	}
	return last
}

// tail is the last line or so of runsc's error output.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 500 {
		s = "…" + s[len(s)-500:]
	}
	return s
}

// attach finds the sandbox's process after runsc started it and follows it.
func (in *instance) attach(ctx context.Context) error {
	pid, err := in.r.sandboxPID(ctx, in.id)
	if err != nil {
		return err
	}
	start, err := procid.StartTime(pid)
	if err != nil {
		return fmt.Errorf("sandbox process: %w", err)
	}
	pidfd, err := procid.Open(pid, start)
	if err != nil {
		return fmt.Errorf("sandbox process: %w", err)
	}
	in.run(procid.Watch(pidfd), pid, start)
	return nil
}

// runscState is what runsc records of container id.
type runscState struct {
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// stateOf reads runsc's record of container id.
func (r *Runtime) stateOf(ctx context.Context, id string) (runscState, error) {
	var st runscState
	out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "state", id).Output()
	if err != nil {
		return st, fmt.Errorf("runsc state: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state: %w", err)
	}
	return st, nil
}

// sandboxPID is the host pid of the sandbox process of container id, from
// runsc's state.
func (r *Runtime) sandboxPID(ctx context.Context, id string) (int, error) {
	st, err := r.stateOf(ctx, id)
	if err != nil {
		return 0, err
	}
	if st.Pid <= 0 || st.Status != "running" {
		return 0, fmt.Errorf("runsc state: sandbox %s is %s", id, st.Status)
	}
	return st.Pid, nil
}

// Adopt implements runtime.Runtime.
func (r *Runtime) Adopt(ctx context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || (st.PID <= 0 && !st.Paused) || st.Token == "" {
		return nil, errors.Join(runtime.ErrGone, r.release(ctx, spec.ID, spec.Dir))
	}
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, done: make(chan struct{}), st: st}
	var err error
	if in.agent, err = listen(spec.Dir, st.Token); err != nil {
		return nil, errors.Join(err, r.release(ctx, spec.ID, spec.Dir))
	}
	if in.console, err = consolelog.Start(filepath.Join(spec.Dir, consoleFIFO), filepath.Join(spec.Dir, consoleLog), 0); err != nil {
		r.log.Warn("adopted sandbox's console not drained", "sandbox", spec.ID, "err", err)
	}
	if st.Paused && !st.Frozen {
		return in, nil
	}
	pidfd, err := procid.Open(st.PID, st.StartTime)
	if err != nil {
		in.agent.release(0)
		return nil, errors.Join(runtime.ErrGone, r.release(ctx, spec.ID, spec.Dir))
	}
	p := procid.Watch(pidfd)
	if st.Frozen {
		// Its agent has let go of the channel; it dials again at the
		// resume. The memory is saved after a whole SpillAfter again.
		in.agent.release(0)
		in.proc = p
		go in.follow(p)
		in.opMu.Lock()
		in.armSpill()
		in.opMu.Unlock()
		return in, nil
	}
	in.run(p, st.PID, st.StartTime)
	// A daemon that died between a freeze and its thaw left a disk frozen.
	for _, d := range []string{rootfsDir, workspaceDir} {
		in.thawHost(filepath.Join(spec.Dir, d))
	}
	return in, nil
}

// Sweep implements runtime.Runtime: it deletes runsc's containers of every
// sandbox that is not kept, with their mounts, and the cgroups of known
// ones. runsc's state directory is this data directory's own, so a
// container there that the store does not know as this node's is a sandbox
// that moved to another node while the daemon was down: its processes end
// here, but its cgroup, named by its ID, is left alone, for another node on
// this host may run it now.
func (r *Runtime) Sweep(ctx context.Context, known, keep map[string]bool) error {
	entries, err := os.ReadDir(r.state)
	if err != nil {
		return err
	}
	var errs []error
	seen := map[string]bool{}
	for _, e := range entries {
		id := containerID(e.Name())
		if id == "" || keep[id] || seen[id] {
			continue
		}
		seen[id] = true
		st, _ := r.stateOf(ctx, id) // no record: no bundle to clean
		if !known[id] {
			r.log.Info("removing a gvisor sandbox that moved away", "sandbox", id)
			errs = append(errs, r.forget(ctx, id, st), clearDir(st.Bundle))
			continue
		}
		r.log.Info("removing leftover gvisor sandbox", "sandbox", id)
		errs = append(errs, r.release(ctx, id, st.Bundle))
	}
	return errors.Join(errs...)
}

// containerID is the container a file of runsc's state directory belongs
// to ("ID_sandbox:ID.state", "ID_sandbox:ID.lock" and the like, and its
// sandbox's control socket "runsc-ID.sock"), or "".
func containerID(name string) string {
	if id, ok := strings.CutPrefix(name, "runsc-"); ok {
		id, ok = strings.CutSuffix(id, ".sock")
		if ok {
			return id
		}
		return ""
	}
	id, _, ok := strings.Cut(name, "_sandbox:")
	if !ok {
		return ""
	}
	return id
}

// Stop implements runtime.Instance.
func (in *instance) Stop(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.stopped {
		return in.stopErr
	}
	in.stopped = true
	if in.spill != nil {
		in.spill.Stop()
	}
	ctx = context.WithoutCancel(ctx)
	in.agent.release(0)
	in.stopErr = in.r.release(ctx, in.id, in.dir)
	in.mu.Lock()
	p := in.proc
	in.mu.Unlock()
	if p != nil {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			in.stopErr = errors.Join(in.stopErr, fmt.Errorf("sandbox %s: its process did not exit after kill", in.id))
		}
	}
	if in.console != nil {
		in.console.Stop()
	}
	in.closeDone()
	return in.stopErr
}

// release kills the sandbox of container id and removes what it held: its
// runsc container, cgroup, mounts, network namespace and (when dir is not
// "") its directory's contents. It is idempotent.
func (r *Runtime) release(ctx context.Context, id, dir string) error {
	errs := []error{r.deleteContainer(ctx, id), r.removeRecords(id)}
	cg, err := r.cgroups.Open(id)
	switch {
	case err == nil:
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, cg.Destroy(kctx), removeRunscCgroups(cg.Path()))
		cancel()
	case !errors.Is(err, cgroup.ErrNotFound):
		errs = append(errs, err)
	}
	return errors.Join(append(errs, clearDir(dir))...)
}

// removeRunscCgroups removes the directories at path that runsc made in
// the host's cgroup v1 hierarchies warren's own groups do not use (blkio,
// devices, name=systemd and the like; Destroy removed the rest). runsc's
// delete removes them only if the container made them, and a container
// that a restore started found them there.
func removeRunscCgroups(path string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		if err := os.Remove(filepath.Join(m.Point, path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteContainer kills the sandbox of container id and has runsc forget
// it; a container runsc does not know is not an error.
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	if r.runsc == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "delete", "--force", id).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("does not exist")) && !bytes.Contains(out, []byte("not found")) {
		return fmt.Errorf("runsc delete: %w: %s", err, tail(string(out)))
	}
	return nil
}

// forget ends the sandbox of container id, whose runsc record is st,
// without runsc's delete, which would remove its cgroups (another node on
// this host may hold them now): the sandbox's init is killed, which ends
// the sandbox, and its record removed from the state directory.
func (r *Runtime) forget(ctx context.Context, id string, st runscState) error {
	if st.Status == "paused" {
		// A frozen sandbox takes no signal until it runs again.
		if out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "resume", id).CombinedOutput(); err != nil {
			r.log.Warn("resume a frozen sandbox that moved away", "sandbox", id, "err", err, "out", tail(string(out)))
		}
		st.Status = "running"
	}
	if st.Status == "running" {
		if out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "kill", id, "KILL").CombinedOutput(); err != nil {
			r.log.Warn("kill a sandbox that moved away", "sandbox", id, "err", err, "out", tail(string(out)))
		} else {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			exec.CommandContext(wctx, r.runsc, "--root", r.state, "wait", id).Run()
			cancel()
		}
	}
	return r.removeRecords(id)
}

// removeRecords removes runsc's files of container id from the state
// directory: its state, its lock and its sandbox's control socket, which
// runsc leaves when its sandbox was killed or never started.
func (r *Runtime) removeRecords(id string) error {
	entries, err := os.ReadDir(r.state)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if containerID(e.Name()) == id {
			errs = append(errs, os.RemoveAll(filepath.Join(r.state, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// clearDir unmounts a sandbox directory's disks, removes its network
// namespace and then its contents; "" is no directory.
func clearDir(dir string) error {
	if dir == "" {
		return nil
	}
	var errs []error
	for _, d := range []string{rootfsDir, workspaceDir} {
		errs = append(errs, unmount(filepath.Join(dir, d)))
	}
	errs = append(errs, netnsfile.Remove(filepath.Join(dir, netnsFile)))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// unmount unmounts what is mounted at dir (a disk, thawed first should a
// dead daemon have left it frozen), until dir is no mount point; a
// missing dir is not an error.
func unmount(dir string) error {
	for range 4 {
		mounted, err := isMountPoint(dir)
		if err != nil || !mounted {
			return err
		}
		if f, err := os.Open(dir); err == nil {
			fsfreeze.Thaw(int(f.Fd()))
			f.Close()
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", dir)
}

// isMountPoint says whether dir is on another filesystem than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// diskDir is the host mount point of the sandbox's disk mounted at path
// in it: "/" or "/workspace".
func (in *instance) diskDir(path string) (string, error) {
	switch path {
	case "", "/":
		return filepath.Join(in.dir, rootfsDir), nil
	case "/" + containerinit.WorkspaceDir:
		return filepath.Join(in.dir, workspaceDir), nil
	}
	return "", fmt.Errorf("no disk is mounted at %q", path)
}

// thawHost thaws the disk mounted at dir if it is frozen.
func (in *instance) thawHost(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	if err := fsfreeze.Thaw(int(f.Fd())); err != nil && !errors.Is(err, fsfreeze.ErrNotFrozen) {
		in.r.log.Warn("thaw adopted sandbox's disk", "sandbox", in.id, "dir", dir, "err", err)
	}
}

// channel is the host's end of the agent's channel: a listening socket in
// the sandbox's chan directory, and the Conn that speaks HTTP/2 over the
// connection the agent dials to it.
//
// Anything in the sandbox may dial the socket (its root can reach it), so
// a connection is the agent's only once it sent the agent's token first.
// The agent read the token from a file in the channel's directory before
// anything of the sandbox ran; the file goes once the agent has connected,
// before the sandbox runs anything. A sandbox from a memory image has its
// agent's token already (the image keeps it beside the memory).
type channel struct {
	path  string
	token string
	conn  *agentconn.Conn

	mu  sync.Mutex
	ln  *net.UnixListener // nil while closed (a pause)
	cur *watchedConn      // the agent's connection in use
}

// tokenWait bounds how long a connection may take to send its token.
const tokenWait = 5 * time.Second

// newToken makes a random token and writes it to path, readable by root
// only; the agent reads it at its start.
func newToken(path string) (string, error) {
	b := make([]byte, 32)
	rand.Read(b)
	token := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(token), 0o400); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return token, nil
}

// listen listens for the agent in dir's chan directory.
func listen(dir, token string) (*channel, error) {
	c := &channel{path: filepath.Join(dir, chanDir, gvisorinit.Socket), token: token}
	if err := c.open(); err != nil {
		return nil, err
	}
	c.conn = agentconn.NewH2C(c.accept)
	return c, nil
}

// open listens on the channel's socket, replacing a stale one (of a daemon
// that died) or its own.
func (c *channel) open() error {
	c.mu.Lock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	c.mu.Unlock()
	os.Remove(c.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen for agent: %w", err)
	}
	// The Sentry connects as the host's root; nothing else may.
	if err := os.Chmod(c.path, 0o600); err != nil {
		ln.Close()
		return err
	}
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	return nil
}

// accept takes the agent's next connection (agentconn.NewH2C's dial).
func (c *channel) accept(ctx context.Context) (net.Conn, error) {
	c.mu.Lock()
	ln := c.ln
	c.mu.Unlock()
	if ln == nil {
		return nil, errors.New("the sandbox is paused")
	}
	stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Now()) })
	defer stop()
	ln.SetDeadline(time.Time{})
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if !c.proves(conn) {
			conn.Close()
			continue
		}
		// The agent has its token: the file has served.
		os.Remove(filepath.Join(filepath.Dir(c.path), gvisorinit.TokenFile))
		w := &watchedConn{Conn: conn, gone: make(chan struct{})}
		c.mu.Lock()
		c.cur = w
		c.mu.Unlock()
		return w, nil
	}
}

// proves reads the token a connection must send first, and says whether
// it is the agent's.
func (c *channel) proves(conn net.Conn) bool {
	conn.SetReadDeadline(time.Now().Add(tokenWait))
	defer conn.SetReadDeadline(time.Time{})
	got := make([]byte, len(c.token))
	if _, err := io.ReadFull(conn, got); err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(got, []byte(c.token)) == 1
}

// release stops listening and ends the agent's connection, and waits up
// to wait until the agent has closed its end of it (and of one it made
// that was not taken yet), so that the Sentry holds no host socket of the
// channel. It reports whether the agent let go in time.
func (c *channel) release(wait time.Duration) bool {
	c.mu.Lock()
	ln, cur := c.ln, c.cur
	c.ln, c.cur = nil, nil
	c.mu.Unlock()
	deadline := time.Now().Add(wait)
	let := true
	if ln != nil {
		// A past deadline would fail the accept before it looked.
		ln.SetDeadline(time.Now().Add(time.Millisecond))
		if conn, err := ln.Accept(); err == nil {
			let = drain(conn, deadline)
		}
		ln.Close()
	}
	if cur != nil {
		cur.CloseWrite()
		select {
		case <-cur.gone:
		case <-time.After(time.Until(deadline)):
			let = false
		}
		cur.Close()
	}
	c.conn.Close()
	return let
}

// drain half-closes conn, reads it until the other end closes or the
// deadline, and closes it; it reports whether the other end closed.
func drain(conn net.Conn, deadline time.Time) bool {
	defer conn.Close()
	conn.(*net.UnixConn).CloseWrite()
	conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, conn)
	return err == nil
}

// watchedConn is the agent's connection in use: gone is closed once a
// read of it ended (the agent closed its end, or the host its own).
type watchedConn struct {
	net.Conn
	gone chan struct{}
	once sync.Once
}

func (w *watchedConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if err != nil {
		w.once.Do(func() { close(w.gone) })
	}
	return n, err
}

// CloseWrite ends the host's side of the connection; the agent reads the
// end, and closes its own.
func (w *watchedConn) CloseWrite() error { return w.Conn.(*net.UnixConn).CloseWrite() }
