//go:build linux

// Package container is warren's container runtime: each sandbox runs in its
// own user, pid, mount, uts, ipc, net and cgroup namespaces, under a cgroup
// with CPU, memory and pids limits, a seccomp filter, no_new_privs and a
// reduced capability set, with the guest agent as PID 1 and the sandbox's
// raw ext4 disk image as its root filesystem.
//
// It is the fallback for hosts without usable hardware virtualization and it
// is weaker than a microVM: sandboxed code talks to the host kernel directly,
// so one kernel bug is an escape. It says so in Isolation.
//
// How a sandbox starts (parent = the daemon; child = the guest agent binary,
// started as the sandbox's init; its half is package containerinit):
//
//  1. The parent creates the sandbox's cgroup, attaches the disk image to a
//     loop device (autoclear) and binds the agent's unix socket in the
//     sandbox's private host directory.
//  2. It starts the agent from a sealed memfd in new namespaces; the user
//     namespace maps the sandbox's uids 0-65535 to a host range of its own
//     (by slot), so root in the sandbox is an unprivileged, unique host uid.
//  3. On cgroup v1 the child was put in a cgroup of its own when it was
//     spawned (warm inits ahead of any create: moving a process into a
//     group waits for an RCU grace period), which now gets the sandbox's
//     limits and is renamed after it; on v2 the parent creates the cgroup
//     and moves the child in. The parent makes the cgroup's work subgroup
//     (v1), mounts the loop device as a detached ext4 mount, idmapped into
//     the child's user namespace (files stay owned by uid 0 on disk, so the
//     same image boots in a VM), and passes the mount and the work
//     subgroup's tasks files to the child over a socketpair.
//  4. The child attaches the mount, mounts /proc, /sys (read-only), /dev
//     (a tmpfs with a few host device nodes bound in), devpts, /dev/shm and
//     /run, masks sensitive /proc files, pivots into the disk, sets the
//     hostname, writes /etc/hosts and /etc/resolv.conf when the sandbox has
//     a network (the parent linked its namespace to the sandbox's router
//     before sending the root), enters a new cgroup namespace, moves the
//     agent's spawning thread into the work subgroup (so every sandbox
//     process starts there, and the agent keeps its reserve), drops
//     capabilities, sets no_new_privs and installs seccomp, then closes its
//     end of the socketpair and goes on as the agent (PID 1), serving on the
//     inherited listening socket. (It brought loopback up first of all.)
//  5. The parent reads EOF on success, or the child's error message.
//
// The root mount lives only in the sandbox's mount namespace: when its last
// process dies the mount goes, and the loop device detaches itself. Nothing
// is mounted on the host per sandbox.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/agentconn"
	"warren/internal/cgroup"
	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/disk"
	"warren/internal/hostclaim"
	"warren/internal/procid"
	"warren/internal/runtime"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/container/spawner"
	"warren/internal/warmpool"
)

// Isolation is how this runtime describes its boundary, everywhere.
const Isolation = "container (shared host kernel)"

// uidBase is the first host uid of slot 0; each slot owns uidsPerSandbox
// host uids. Far above any uid a host hands out. maxSlots keeps the last
// range below 2^32 - 1. A slot is claimed host-wide (package hostclaim), so
// no two warren servers give two sandboxes the same host uids; its init
// holds the claim as containerinit.FdClaim for as long as it lives.
const (
	uidBase        = 200_000_000
	uidsPerSandbox = 65536
	maxSlots       = 60_000
)

// Options configure the runtime.
type Options struct {
	// Warm is how many inits are kept spawned ahead of time, so that a
	// create skips process start-up (0: none).
	Warm int
	// WarmDir holds the warm inits' sockets and logs; it is emptied at New.
	// Required when Warm > 0. Its path also names the inits' cgroups
	// (initTag), so two runtimes on one host never share one.
	WarmDir string
}

// Runtime is the container runtime. It is safe for concurrent use.
type Runtime struct {
	log     *slog.Logger
	cgroups *cgroup.Hierarchy
	opts    Options
	// agent is the guest agent binary in a sealed memfd. Each sandbox's init
	// is executed from it and, after setting the sandbox up, goes on as the
	// agent.
	agent *os.File

	claims  *hostclaim.Set   // uid ranges, unique on the host across warren servers
	slotsMu sync.Mutex       // guards slots
	slots   map[int]*os.File // uid ranges held by live sandboxes and spawned inits, with their host-wide claims

	pool    *warmpool.Pool[*initProc] // inits spawned ahead of time, waiting for a sandbox
	spawner *spawner.Client           // starts the inits
	initTag string                    // names the inits' cgroups (initCgroupName)
}

var _ runtime.Runtime = (*Runtime)(nil)

// New makes the runtime. agentBinary is the static guest agent; it is copied
// into a sealed memfd that every sandbox executes, so the agent always
// matches the daemon and no host path of it is visible in a sandbox.
//
// Warm inits start being spawned after the first Sweep, once every sandbox
// of an earlier daemon process has been adopted and its uid range is known.
func New(log *slog.Logger, cgroups *cgroup.Hierarchy, agentBinary string, opts Options) (*Runtime, error) {
	if err := os.MkdirAll(containerinit.Mountpoint, 0o711); err != nil {
		return nil, fmt.Errorf("root mountpoint: %w", err)
	}
	if opts.Warm > 0 {
		if opts.WarmDir == "" {
			return nil, errors.New("container runtime: warm inits need a WarmDir")
		}
		// Inits a previous daemon process left warm exit by themselves when
		// their sync socket closes; their files go here.
		if err := os.RemoveAll(opts.WarmDir); err != nil {
			return nil, fmt.Errorf("warm dir: %w", err)
		}
		if err := os.MkdirAll(opts.WarmDir, 0o700); err != nil {
			return nil, fmt.Errorf("warm dir: %w", err)
		}
	}
	claims, err := hostclaim.Open("container-uids")
	if err != nil {
		return nil, err
	}
	agent, err := sealedCopy(agentBinary)
	if err != nil {
		return nil, err
	}
	r := &Runtime{log: log, cgroups: cgroups, opts: opts, agent: agent, claims: claims, slots: map[int]*os.File{},
		spawner: spawner.NewClient(agent), initTag: initTag(opts.WarmDir)}
	r.pool = r.newPool()
	return r, nil
}

// Close kills the warm inits and stops the spawner. Running sandboxes are
// not touched: a later Runtime adopts them.
func (r *Runtime) Close() error {
	return errors.Join(r.pool.Close(), r.spawner.Close()) // a Sweep after Close starts nothing
}

// sealedCopy copies the file at path into a memfd that nobody can change.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open agent binary: %w", err)
	}
	defer src.Close()
	fd, err := unix.MemfdCreate("warren-agent", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("warren-agent", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd for agent: %w", err)
	}
	f := os.NewFile(uintptr(fd), "warren-agent")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("copy agent binary: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal agent memfd: %w", err)
	}
	return f, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "container" }

// Isolation implements runtime.Runtime.
func (r *Runtime) Isolation() string { return Isolation }

// Available implements runtime.Runtime: it needs root (to attach loop devices
// and write uid maps) and user namespaces.
func (r *Runtime) Available() error {
	if os.Geteuid() != 0 {
		return errors.New("the container runtime needs root")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("user namespaces are disabled (user.max_user_namespaces = 0)")
	}
	return nil
}

// state is what Adopt needs to find a sandbox again after a daemon restart.
type state struct {
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat: with the pid it names one
	// process, never a later one that reused the pid.
	StartTime uint64 `json:"start_time"`
	Socket    string `json:"socket"`
	// Slot is the sandbox's host uid range (see uidBase).
	Slot int `json:"slot"`
}

// instance is one running container sandbox.
type instance struct {
	r       *Runtime
	id      string
	dir     string
	st      state
	done    <-chan struct{}
	console *consolelog.Drain // nil for an adopted sandbox of a daemon before consolelog

	stopOnce sync.Once
	stopErr  error
}

func (in *instance) State() []byte {
	b, _ := json.Marshal(in.st) // a struct of ints and strings always marshals
	return b
}

func (in *instance) AgentSocket() string   { return in.st.Socket }
func (in *instance) Dial() *agentconn.Conn { return agentconn.DialUnix(in.st.Socket) }
func (in *instance) Done() <-chan struct{} { return in.done }

// Stop kills every process in the sandbox's cgroup, waits for its init to
// go, and removes the cgroup and the private directory. The root mount and
// the loop device go away with the last process.
func (in *instance) Stop(ctx context.Context) error {
	in.stopOnce.Do(func() {
		ctx := context.WithoutCancel(ctx)
		in.stopErr = in.r.destroy(ctx, in.id, in.dir)
		if in.console != nil {
			in.console.Stop()
		}
		select {
		case <-in.done:
			in.r.freeSlot(in.st.Slot)
		case <-time.After(10 * time.Second):
			// Its uid range stays taken: something of it may still run.
			in.stopErr = errors.Join(in.stopErr, fmt.Errorf("sandbox %s: init did not exit after kill", in.id))
		}
	})
	return in.stopErr
}

// destroy kills and removes the sandbox's cgroup and its private directory.
func (r *Runtime) destroy(ctx context.Context, id, dir string) error {
	var errs []error
	cg, err := r.cgroups.Open(id)
	switch {
	case err == nil:
		killCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, cg.Destroy(killCtx))
		cancel()
	case !errors.Is(err, cgroup.ErrNotFound):
		errs = append(errs, err)
	}
	if dir != "" {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	if spec.Memory != "" {
		return nil, errors.New("container runtime: a container has no memory image to start from")
	}
	r.pool.Busy()
	var undo cleanup.Stack
	defer undo.RunIf(&err)

	// The disk and the init's cgroup do not depend on each other until the
	// mount is idmapped into the init's user namespace: prepare them at once.
	// Once the init has it (or the start failed), our fd of the mount goes.
	images := []string{spec.Disk}
	if spec.Workspace != "" {
		images = append(images, spec.Workspace)
	}
	mounted := make(chan []diskMount, 1)
	go func() {
		var ms []diskMount
		for _, img := range images {
			ms = append(ms, mountDisk(img))
		}
		mounted <- ms
	}()
	disksMounted := sync.OnceValue(func() []diskMount { return <-mounted })
	defer func() {
		for _, d := range disksMounted() {
			if d.err == nil {
				unix.Close(d.fd)
			}
		}
	}()

	p, err := r.take(spec.Dir)
	if err != nil {
		return nil, err
	}
	undo.Add(p.kill)
	// The sandbox's router may still be in the making (the manager makes
	// it while the disks mount): link the init to it meanwhile.
	plugged := func() error { return nil }
	if spec.Network != nil {
		done := make(chan error, 1)
		go func() { done <- spec.Network.PlugNetNS(fmt.Sprintf("/proc/%d/ns/net", p.pid)) }()
		plugged = sync.OnceValue(func() error { return <-done })
		defer plugged()
	}

	// The sandbox's processes get its limits in full, in the group's work
	// subgroup; the group adds the agent's reserve on top, so that nothing
	// the sandbox runs can take the agent's memory or its last pid. Without
	// a work subgroup (cgroup v2) they share the group's limits.
	limits := cgroup.Limits{CPUs: spec.Limits.CPUs, MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids}
	group := limits
	if r.cgroups.Version() == 1 {
		if group.MemoryBytes > 0 {
			group.MemoryBytes += runtime.AgentMemoryMB << 20
		}
		if group.Pids > 0 {
			group.Pids += runtime.AgentPids
		}
	}
	cg, err := r.sandboxCgroup(p, spec.ID, group)
	if err != nil {
		return nil, err
	}
	work, err := cg.Work(limits)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range work {
			f.Close()
		}
	}()

	var fds []int
	for _, d := range disksMounted() {
		if d.err != nil {
			return nil, d.err
		}
		if err := idmap(d.fd, fmt.Sprintf("/proc/%d/ns/user", p.pid)); err != nil {
			return nil, err
		}
		fds = append(fds, d.fd)
	}
	if err := plugged(); err != nil {
		return nil, err
	}
	for _, f := range work {
		fds = append(fds, int(f.Fd()))
	}
	cfg, _ := json.Marshal(containerinit.Config{
		Hostname: spec.Hostname, Workspace: spec.Workspace != "", Network: spec.Network != nil, Work: len(work),
		CgroupNamespaced: p.cgroupNS,
	})
	if err := unix.Sendmsg(int(p.sync.Fd()), cfg, unix.UnixRights(fds...), nil, 0); err != nil {
		return nil, fmt.Errorf("hand disks to init: %w", err)
	}
	if err := waitSetup(ctx, p.sync); err != nil {
		return nil, err
	}
	p.sync.Close()

	start, err := procid.StartTime(p.pid)
	if err != nil {
		return nil, fmt.Errorf("sandbox init: %w", err)
	}
	r.log.Debug("container started", "sandbox", spec.ID, "pid", p.pid, "host_uid", p.hostUID(), "warm", p.warm)
	return &instance{
		r: r, id: spec.ID, dir: spec.Dir, done: p.proc.Done(), console: p.console,
		st: state{PID: p.pid, StartTime: start, Socket: p.sock, Slot: p.slot},
	}, nil
}

// sandboxCgroup gives init p's cgroup the sandbox's name and limits l: on
// cgroup v1 the group p was spawned into, renamed; on v2 a new group, which
// p is moved into. p.kill destroys it until the sandbox owns it.
func (r *Runtime) sandboxCgroup(p *initProc, id string, l cgroup.Limits) (*cgroup.Group, error) {
	if p.cg == nil {
		cg, err := r.cgroups.Create(id, l)
		if err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		p.cg = cg
		if err := cg.AddProc(p.pid); err != nil {
			return nil, fmt.Errorf("join cgroup: %w", err)
		}
		return cg, nil
	}
	if err := p.cg.Limit(l); err != nil {
		return nil, err
	}
	cg, err := p.cg.Rename(id)
	if err != nil {
		return nil, err
	}
	p.cg = cg
	return cg, nil
}

// diskMount is a detached mount of a sandbox disk (disk.MountImage), or
// why there is none.
type diskMount struct {
	fd  int
	err error
}

func mountDisk(image string) diskMount {
	fd, err := disk.MountImage(image)
	return diskMount{fd: fd, err: err}
}

// idmap makes the detached mount show ownership through the user namespace
// at usernsPath: on-disk uid 0 is the sandbox's root, so files stay owned by
// uid 0 on disk and the same image boots in a VM.
func idmap(mnt int, usernsPath string) error {
	userns, err := unix.Open(usernsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(userns)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(mnt, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap disk mount: %w", err)
	}
	return nil
}

// waitSetup waits for the init to finish setting the sandbox up (EOF on the
// sync socket) or to report why it could not.
func waitSetup(ctx context.Context, sync *os.File) error {
	conn, err := net.FileConn(sync)
	if err != nil {
		return fmt.Errorf("sync with init: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	switch {
	case errors.Is(err, io.EOF) || (err == nil && n == 0):
		return nil
	case err != nil:
		return fmt.Errorf("wait for sandbox init: %w", err)
	default:
		return fmt.Errorf("sandbox init: %s", buf[:n])
	}
}

// Adopt implements runtime.Runtime.
func (r *Runtime) Adopt(ctx context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || st.PID <= 0 {
		r.destroy(ctx, spec.ID, spec.Dir)
		return nil, runtime.ErrGone
	}
	pidfd, err := procid.Open(st.PID, st.StartTime)
	if err != nil {
		return nil, errors.Join(runtime.ErrGone, r.destroy(ctx, spec.ID, spec.Dir))
	}
	r.useSlot(st.Slot, pidfd)
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, st: st, done: procid.Watch(pidfd).Done()}
	// The console goes on into its log, from the FIFO the init still holds.
	if fi, err := os.Lstat(filepath.Join(spec.Dir, consoleFIFO)); err == nil && fi.Mode().Type() == os.ModeNamedPipe {
		if in.console, err = consolelog.Start(filepath.Join(spec.Dir, consoleFIFO), filepath.Join(spec.Dir, consoleLog), 0); err != nil {
			r.log.Warn("adopted sandbox's console not drained", "sandbox", spec.ID, "err", err)
		}
	}
	// A daemon that died between a freeze and its thaw left the sandbox's
	// filesystem frozen.
	if err := in.thaw("/"); err != nil {
		r.log.Warn("thaw adopted sandbox", "sandbox", spec.ID, "err", err)
	}
	if spec.Workspace != "" {
		if err := in.thaw("/" + containerinit.WorkspaceDir); err != nil {
			r.log.Warn("thaw adopted sandbox's workspace", "sandbox", spec.ID, "err", err)
		}
	}
	return in, nil
}

// StartWarm starts keeping Options.Warm inits spawned. The daemon calls it
// once the sandboxes of an earlier process were adopted (their uid ranges
// are known) and the rest swept.
func (r *Runtime) StartWarm() { r.pool.Start() }

// Sweep implements runtime.Runtime: it destroys the cgroup of every known
// sandbox that is not kept, killing whatever still runs in it.
func (r *Runtime) Sweep(ctx context.Context, known, keep map[string]bool) error {
	names, err := r.cgroups.List()
	if err != nil {
		return fmt.Errorf("list cgroups: %w", err)
	}
	var errs []error
	for _, name := range names {
		if tag, slot, ok := parseInitCgroup(name); ok {
			errs = append(errs, r.sweepInitCgroup(ctx, name, tag, slot))
			continue
		}
		if !known[name] || keep[name] {
			continue
		}
		r.log.Info("removing leftover sandbox cgroup", "sandbox", name)
		errs = append(errs, r.destroy(ctx, name, ""))
	}
	return errors.Join(errs...)
}
