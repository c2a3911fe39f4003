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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"warren/internal/agentconn"
	"warren/internal/cgroup"
	"warren/internal/consolelog"
	"warren/internal/imagefmt"
	"warren/internal/procid"
	"warren/internal/runtime"
	"warren/internal/runtime/container/containerinit"
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
	// format is the format of its memory images ("" when it cannot be
	// told, and no image restores elsewhere).
	format func() string
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
	r.format = sync.OnceValue(func() string {
		f, err := imagefmt.Of(r.Name(), []string{strconv.Itoa(r.version)}, r.runsc, r.agent)
		if err != nil {
			r.log.Warn("gvisor memory images restore on this node only", "err", err)
		}
		return f
	})
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
