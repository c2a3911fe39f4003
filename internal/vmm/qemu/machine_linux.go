//go:build linux

package qemu

import (
	"context"
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/cgroup"
	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/hostclaim"
	"warren/internal/procid"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
	"warren/internal/vmm/jail"
)

// Defaults of Options.
const (
	DefaultBinary         = "/usr/bin/qemu-system-x86_64"
	DefaultJailMountpoint = "/run/warren/vmm-root"
	// DefaultUIDBase is far above any uid a host hands out, and above the
	// container runtime's ranges (200,000,000 + 65,536 per sandbox).
	DefaultUIDBase  = 3_000_000_000
	DefaultUIDCount = 65536
)

// Resource limits beyond what the guest was given.
const (
	// memOverhead is the VMM's own memory: QEMU's heap, device emulation,
	// firmware copies, I/O buffers. Measured under TCG with a 128 MiB guest
	// running SeaBIOS: 24 MiB charged; the rest is headroom. The guest's
	// memory itself is charged as it is touched, and all of it may be: a
	// memory save reads every page, which on some kernels (the PVM hosts
	// warren is built on) allocates even the pages the guest never used.
	memOverhead = 96 << 20
	// tcgOverhead is TCG's translated-code buffer (tb-size), touched as
	// the guest runs.
	tcgOverhead = tcgTBSizeMiB << 20
	// pidsOverhead covers QEMU's threads besides one per vCPU: main loop,
	// RCU, migration, and up to 64 block I/O workers.
	pidsOverhead = 96
)

// Timeouts.
const (
	// quitWait bounds Stop's wait after QMP quit before it kills.
	quitWait = 3 * time.Second
	// killWait bounds the wait for a killed VMM to be reaped and released.
	killWait = 10 * time.Second
	// exitGrace is how long a failed QMP call waits to see whether the
	// VMM died (so that it reports the exit, not a bare EOF).
	exitGrace = 2 * time.Second
	// stderrTail is how much of QEMU's stderr a crash report carries.
	stderrTail = 2048
	// callTimeout bounds one QMP command when the caller's ctx has no
	// deadline: a VMM that stops answering (stuck, or compromised) must
	// not hang its caller.
	callTimeout = 30 * time.Second
	// startTimeout bounds Start when ctx has no deadline. A restore under
	// TCG reads the whole snapshot, seconds per GiB on slow hosts.
	startTimeout = 2 * time.Minute
)

// QEMU's own files in Config.WorkDir.
const (
	qmpSockName     = "qmp.sock"     // QMP's listening socket
	qemuLogName     = "qemu.log"     // QEMU's stdout and stderr
	consoleFIFOName = "console.fifo" // the serial console, drained into Config.ConsoleLog
)

// Options configure the QEMU VMM.
type Options struct {
	// Binary is the QEMU system emulator, under /usr (the jail shows only
	// /usr). Default DefaultBinary.
	Binary string
	// Cgroups is the host's cgroup hierarchy; each machine gets the group
	// named by its Config.ID. Required.
	Cgroups *cgroup.Hierarchy
	// UIDBase and UIDCount are the host uids (used as gids too) machines
	// run as: each live machine takes the lowest free one, so no two
	// machines share a uid. Defaults DefaultUIDBase and DefaultUIDCount.
	UIDBase, UIDCount uint32
	// JailMountpoint is an empty directory jails mount their roots on, in
	// their own mount namespaces only. Default DefaultJailMountpoint; New
	// creates it.
	JailMountpoint string
	// Log receives the VMM's logs; nil discards them.
	Log *slog.Logger
}

// VMM starts QEMU machines. It is safe for concurrent use.
type VMM struct {
	opts Options
	log  *slog.Logger

	claims *hostclaim.Set      // the uids, unique on the host across warren servers
	uidMu  sync.Mutex          // guards uids
	uids   map[uint32]*os.File // uids held by live machines, with their host-wide claims
}

// fdClaim is QEMU's descriptor of its uid's host-wide claim (package
// hostclaim), which it holds, unused, for its life: the first it inherits.
const fdClaim = 3

// New checks opts and prepares the jail mountpoint.
func New(opts Options) (*VMM, error) {
	if opts.Cgroups == nil {
		return nil, errors.New("qemu: Options.Cgroups is required")
	}
	if opts.Binary == "" {
		opts.Binary = DefaultBinary
	}
	if opts.UIDBase == 0 {
		opts.UIDBase = DefaultUIDBase
	}
	if opts.UIDCount == 0 {
		opts.UIDCount = DefaultUIDCount
	}
	if uint64(opts.UIDBase)+uint64(opts.UIDCount) > 1<<32-1 {
		return nil, fmt.Errorf("qemu: uid range %d+%d overflows", opts.UIDBase, opts.UIDCount)
	}
	if opts.JailMountpoint == "" {
		opts.JailMountpoint = DefaultJailMountpoint
	}
	if fi, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	} else if fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("qemu: %s is not executable", opts.Binary)
	}
	if err := os.MkdirAll(opts.JailMountpoint, 0o755); err != nil {
		return nil, fmt.Errorf("qemu: jail mountpoint: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	claims, err := hostclaim.Open(fmt.Sprintf("vm-uids-%d", opts.UIDBase))
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return &VMM{opts: opts, log: log.With("vmm", "qemu"), claims: claims, uids: map[uint32]*os.File{}}, nil
}

func (v *VMM) allocUID() (uint32, *os.File, error) {
	v.uidMu.Lock()
	defer v.uidMu.Unlock()
	i, claim, err := v.claims.Take(int(v.opts.UIDCount), func(i int) bool {
		_, held := v.uids[v.opts.UIDBase+uint32(i)]
		return held
	})
	if err != nil {
		return 0, nil, fmt.Errorf("machine uid: %w", err)
	}
	uid := v.opts.UIDBase + uint32(i)
	v.uids[uid] = claim
	return uid, claim, nil
}

// reserveUID marks uid, of the VMM's range, held by the machine of process
// pidfd, taking its host-wide claim back from it (a QEMU of a daemon from
// before the claims holds none: the uid is then claimed here if no one
// else has it).
func (v *VMM) reserveUID(uid uint32, pidfd int) error {
	if uid < v.opts.UIDBase || uid-v.opts.UIDBase >= v.opts.UIDCount {
		return fmt.Errorf("uid %d is not one of the machine uids [%d, %d)", uid, v.opts.UIDBase, uint64(v.opts.UIDBase)+uint64(v.opts.UIDCount))
	}
	v.uidMu.Lock()
	defer v.uidMu.Unlock()
	if _, held := v.uids[uid]; held {
		return fmt.Errorf("uid %d is held by another machine", uid)
	}
	i := int(uid - v.opts.UIDBase)
	claim, err := v.claims.Adopt(i, pidfd, fdClaim)
	if err != nil {
		var taken error
		if _, claim, taken = v.claims.Take(i+1, func(j int) bool { return j != i }); taken != nil {
			v.log.Error("attached machine's uid is not claimed host-wide", "uid", uid, "err", errors.Join(err, taken))
		}
	}
	v.uids[uid] = claim
	return nil
}

func (v *VMM) freeUID(uid uint32) {
	v.uidMu.Lock()
	claim := v.uids[uid]
	delete(v.uids, uid)
	v.uidMu.Unlock()
	if claim != nil {
		claim.Close()
	}
}

// limits are the cgroup limits of a machine.
func limits(cfg *vmm.Config) cgroup.Limits {
	mem := int64(cfg.MemoryMiB)<<20 + memOverhead
	if cfg.Accel == accel.TCG {
		mem += tcgOverhead
	}
	return cgroup.Limits{
		// The VMM's own threads share the vCPUs' budget: a machine never
		// uses more CPU than it was given.
		CPUs:        float64(cfg.VCPUs),
		MemoryBytes: mem,
		Pids:        int64(cfg.VCPUs) + pidsOverhead,
	}
}

// Machine is one QEMU process and its guest: started by Start, or
// attached to by Attach after the process that started it went away. Both
// kinds signal QEMU through a pidfd and release the same things when it
// ends; they differ only in how they learn of its end (see waitProcess).
type Machine struct {
	v       *VMM
	cfg     vmm.Config
	log     *slog.Logger
	cmd     *exec.Cmd // nil when attached: QEMU is not this process's child
	pid     int
	start   uint64 // field 22 of /proc/PID/stat: with pid, names QEMU
	uid     uint32
	cg      *cgroup.Group
	qmp     *Client // connected before Start or Attach returns; never changes
	qmpSock string
	stderr  string            // path of QEMU's stderr log
	console *consolelog.Drain // the serial console into Config.ConsoleLog; nil if not drained

	// pidMu guards pidfd, QEMU's pidfd, which reap closes (-1) once QEMU
	// has exited. waitProcess polls it unlocked: reap closes it only after.
	pidMu sync.Mutex
	pidfd int

	// requested is set by Stop and Kill before they act: the exit that
	// follows is not a crash.
	requested atomic.Bool

	// opMu serializes Pause, Resume and SaveMemory.
	opMu sync.Mutex
	// migrationSet says SaveMemory has set the migration parameters;
	// guarded by opMu.
	migrationSet bool

	exitMu sync.Mutex // guards exit and exitErr
	exit   vmm.Exit
	// exitErr is Wait's error: an *vmm.ExitError after a crash, else nil.
	exitErr error

	exited      chan struct{} // closed once QEMU has exited and exit is set
	watcherDone chan struct{} // closed when the event watcher has stopped
	done        chan struct{} // closed once everything is released
}

var _ vmm.Machine = (*Machine)(nil)

// Start validates cfg and opts (an error wrapping vmm.ErrInvalidConfig
// before anything starts), launches QEMU in its jail, and returns once the
// machine runs, or is paused when opts.Paused, or has loaded
// opts.RestoreFrom. ctx bounds the start; it does not bound the machine's
// life. On error nothing is left behind (no process, cgroup or socket) but
// the logs in WorkDir and ConsoleLog. It may be called concurrently.
func (v *VMM) Start(ctx context.Context, cfg vmm.Config, opts vmm.StartOptions) (_ *Machine, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	qmpSock := filepath.Join(cfg.WorkDir, qmpSockName)
	if err := checkStart(&cfg, opts, qmpSock); err != nil {
		return nil, fmt.Errorf("%w: %w", vmm.ErrInvalidConfig, err)
	}
	log := v.log.With("sandbox", cfg.ID)
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}

	var undo cleanup.Stack
	defer undo.RunIf(&err)
	// Our copies of what QEMU inherits; QEMU has its own once started.
	var parentFiles []*os.File
	defer func() {
		for _, f := range parentFiles {
			f.Close()
		}
	}()
	keep := func(f *os.File) { parentFiles = append(parentFiles, f) }

	uid, claim, err := v.allocUID()
	if err != nil {
		return nil, err
	}
	undo.Add(func() { v.freeUID(uid) })

	qmpLn, err := listen(qmpSock)
	if err != nil {
		return nil, err
	}
	keep(qmpLn)
	undo.Add(func() { os.Remove(qmpSock) })
	agentLn, err := listen(cfg.AgentSocket)
	if err != nil {
		return nil, err
	}
	keep(agentLn)
	undo.Add(func() { os.Remove(cfg.AgentSocket) })
	var root diskFDs
	var diskRW, diskRO, nbdConn *os.File
	cache := ""
	if cfg.DiskNBD {
		if nbdConn, err = dialNBD(cfg.Disk); err != nil {
			return nil, err
		}
		keep(nbdConn)
	} else {
		if diskRW, diskRO, cache, err = openDisk(cfg.Disk); err != nil {
			return nil, err
		}
		keep(diskRW)
		keep(diskRO)
	}
	var wsRW, wsRO *os.File
	wsCache := ""
	if cfg.Workspace != "" {
		if wsRW, wsRO, wsCache, err = openDisk(cfg.Workspace); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		keep(wsRW)
		keep(wsRO)
	}
	// QEMU writes the serial console into a FIFO that this process (and a
	// later one, after Attach) drains into the log, which so stays bounded
	// whatever the guest writes to its serial port.
	consoleFIFO := filepath.Join(cfg.WorkDir, consoleFIFOName)
	drain, err := consolelog.Start(consoleFIFO, cfg.ConsoleLog, 0)
	if err != nil {
		return nil, err
	}
	undo.Add(drain.Stop)
	console, err := consolelog.Writer(consoleFIFO)
	if err != nil {
		return nil, err
	}
	keep(console)
	stderrPath := filepath.Join(cfg.WorkDir, qemuLogName)
	stderr, err := os.OpenFile(stderrPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open qemu log: %w", err)
	}
	keep(stderr)
	// QEMU's descriptors: ExtraFiles are 3, 4, ... in the child.
	var extra []*os.File
	inherit := func(f *os.File) int {
		extra = append(extra, f)
		return 3 + len(extra) - 1
	}
	inherit(claim) // the first: fdClaim
	l := layout{
		qmpFD:     inherit(qmpLn),
		agentFD:   inherit(agentLn),
		consoleFD: inherit(console),
	}
	if nbdConn != nil {
		root.nbd = inherit(nbdConn)
	} else {
		root = diskFDs{rw: inherit(diskRW), ro: inherit(diskRO), cache: cache}
	}
	l.root = root
	if wsRW != nil {
		l.workspace = diskFDs{rw: inherit(wsRW), ro: inherit(wsRO), cache: wsCache}
	}
	if opts.Tap != nil {
		l.tapFD = inherit(opts.Tap)
	}
	restoreFD := 0
	if opts.RestoreFrom != "" {
		f, err := os.Open(opts.RestoreFrom)
		if err != nil {
			return nil, fmt.Errorf("open memory snapshot: %w", err)
		}
		keep(f)
		restoreFD = inherit(f)
		l.restore = true
	}

	spec := jail.Spec{
		Path:       v.opts.Binary,
		Args:       commandLine(&cfg, l),
		Env:        []string{},
		ExtraFiles: extra,
		Stdout:     stderr,
		Stderr:     stderr,
		UID:        uid,
		GID:        uid,
		Mountpoint: v.opts.JailMountpoint,
	}
	if cfg.Kernel != "" {
		spec.Files = append(spec.Files, jail.File{Source: cfg.Kernel, Target: jailKernel})
	}
	if cfg.Initrd != "" {
		spec.Files = append(spec.Files, jail.File{Source: cfg.Initrd, Target: jailInitrd})
	}
	if cfg.Accel == accel.KVM {
		var st unix.Stat_t
		if err := unix.Stat("/dev/kvm", &st); err != nil {
			return nil, fmt.Errorf("kvm: %w", err)
		}
		spec.Devices = []string{"/dev/kvm"}
		spec.Groups = []uint32{st.Gid} // /dev/kvm is rw for its group
	}

	cg, err := v.opts.Cgroups.Create(cfg.ID, limits(&cfg))
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	undo.Add(func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		if err := cg.Destroy(dctx); err != nil {
			log.Error("destroy cgroup after failed start", "err", err)
		}
	})

	cmd, err := jail.Start(spec)
	if err != nil {
		return nil, err
	}
	// QEMU is our child and not reaped yet: its pid cannot name another
	// process before cmd.Wait, so the pidfd and the start time are its.
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("vmm pidfd: %w", err)
	}
	m := v.newMachine(cfg, log, pid, pidfd, uid, cg)
	m.cmd, m.console = cmd, drain
	go m.waitProcess()
	undo.Add(func() {
		m.signal(unix.SIGKILL)
		<-m.exited
		m.closePidfd()
	})
	if m.start, err = procid.StartTime(pid); err != nil {
		return nil, fmt.Errorf("vmm process: %w", err)
	}
	// QEMU now holds its copies of the sockets: when it dies, the QMP
	// listener dies with it and a pending connection sees EOF.
	for _, f := range parentFiles {
		f.Close()
	}
	parentFiles = nil

	// Before the guest runs anything (-S).
	if err := cg.AddProc(m.pid); err != nil {
		return nil, fmt.Errorf("join cgroup: %w", err)
	}
	qmp, err := Dial(ctx, qmpSock, log)
	if err != nil {
		return nil, m.explain(fmt.Errorf("connect qmp: %w", err))
	}
	m.qmp = qmp
	undo.Add(func() { qmp.Close() })
	events, _ := qmp.Subscribe(64)
	go m.watchEvents(events)

	if l.restore {
		if err := m.restore(ctx, restoreFD); err != nil {
			return nil, m.explain(err)
		}
	}
	if !opts.Paused {
		if err := qmp.Execute(ctx, "cont", nil, nil); err != nil {
			return nil, m.explain(fmt.Errorf("run vcpus: %w", err))
		}
	}
	go m.reap()
	log.Info("machine started", "pid", m.pid, "uid", uid, "accel", cfg.Accel, "memory_mib", cfg.MemoryMiB,
		"vcpus", cfg.VCPUs, "cache", cache, "workspace", cfg.Workspace != "", "paused", opts.Paused, "restored", opts.RestoreFrom != "",
		"took", time.Since(start))
	return m, nil
}

// newMachine is a Machine of a QEMU process that runs; the caller sets
// cmd, start and qmp, and starts the goroutines.
func (v *VMM) newMachine(cfg vmm.Config, log *slog.Logger, pid, pidfd int, uid uint32, cg *cgroup.Group) *Machine {
	return &Machine{
		v: v, cfg: cfg, log: log, pid: pid, pidfd: pidfd, uid: uid, cg: cg,
		qmpSock: filepath.Join(cfg.WorkDir, qmpSockName), stderr: filepath.Join(cfg.WorkDir, qemuLogName),
		exited: make(chan struct{}), watcherDone: make(chan struct{}), done: make(chan struct{}),
	}
}

// Attach takes over a machine that another process started with this
// VMM's options (an earlier daemon: QEMU outlives it, see vmm/jail) and
// that still runs: process pid, whose start time (field 22 of
// /proc/PID/stat, Machine.StartTime) was startTime, running as uid
// (Machine.UID). cfg must be the Config it was started with; Attach uses
// its ID (the cgroup), WorkDir (the QMP socket and QEMU's log) and
// AgentSocket (removed when the machine ends), and checks none of its
// files. It reserves uid (an error if it is outside the VMM's range or a
// live machine holds it), opens the machine's cgroup and connects to QMP:
// QEMU's QMP socket takes a new client once the earlier one is gone. ctx
// bounds the attach (default callTimeout), not the machine's life.
//
// If the process has exited, or pid now names another process, the error
// wraps vmm.ErrExited. On any error Attach leaves the process alone: the
// caller decides whether to kill it (its cgroup holds it).
//
// The machine then behaves as a started one, except that its exit status
// cannot be read (vmm.Exit.StatusUnknown; see waitProcess).
func (v *VMM) Attach(ctx context.Context, cfg vmm.Config, pid int, startTime uint64, uid uint32) (_ *Machine, err error) {
	if pid <= 0 {
		return nil, fmt.Errorf("attach machine %s: %w: no pid", cfg.ID, vmm.ErrExited)
	}
	log := v.log.With("sandbox", cfg.ID)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	var undo cleanup.Stack
	defer undo.RunIf(&err)
	defer func() {
		if err != nil {
			err = fmt.Errorf("attach machine %s: %w", cfg.ID, err)
		}
	}()

	pidfd, err := procid.Open(pid, startTime)
	if errors.Is(err, procid.ErrGone) {
		return nil, fmt.Errorf("%w: process %d is not the machine's any more", vmm.ErrExited, pid)
	}
	if err != nil {
		return nil, err
	}
	undo.Add(func() { unix.Close(pidfd) })
	if procid.Exited(pidfd) {
		return nil, fmt.Errorf("%w: process %d ended", vmm.ErrExited, pid)
	}
	if err := v.reserveUID(uid, pidfd); err != nil {
		return nil, err
	}
	undo.Add(func() { v.freeUID(uid) })
	cg, err := v.opts.Cgroups.Open(cfg.ID)
	if err != nil {
		return nil, err
	}
	m := v.newMachine(cfg, log, pid, pidfd, uid, cg)
	m.start = startTime
	if fifo := filepath.Join(cfg.WorkDir, consoleFIFOName); isFIFO(fifo) {
		if m.console, err = consolelog.Start(fifo, cfg.ConsoleLog, 0); err != nil {
			log.Warn("console not drained", "err", err)
		}
		undo.Add(func() {
			if m.console != nil {
				m.console.Stop()
			}
		})
	}
	qmp, err := Dial(ctx, m.qmpSock, log)
	if err != nil && procid.Exited(pidfd) {
		err = fmt.Errorf("%w: process %d ended", vmm.ErrExited, pid)
	}
	if err != nil {
		return nil, fmt.Errorf("connect qmp: %w", err)
	}
	m.qmp = qmp
	events, _ := qmp.Subscribe(64)
	go m.watchEvents(events)
	go m.waitProcess()
	go m.reap()
	log.Info("machine attached", "pid", pid, "uid", uid)
	return m, nil
}

func isFIFO(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeNamedPipe
}

// checkStart checks what Config.Validate cannot: the start options and
// QEMU's own paths.
func checkStart(cfg *vmm.Config, opts vmm.StartOptions, qmpSock string) error {
	if len(qmpSock) > 107 {
		return fmt.Errorf("work dir %q is too long for a socket path inside it", cfg.WorkDir)
	}
	if _, err := os.Lstat(qmpSock); err == nil {
		return fmt.Errorf("%s already exists: work dir is not fresh", qmpSock)
	}
	if cfg.Net != (opts.Tap != nil) {
		return fmt.Errorf("a network device (Config.Net %v) needs a tap descriptor, and only it (StartOptions.Tap %v)", cfg.Net, opts.Tap != nil)
	}
	if opts.RestoreFrom != "" {
		fi, err := os.Stat(opts.RestoreFrom)
		switch {
		case err != nil:
			return fmt.Errorf("memory snapshot: %w", err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("memory snapshot %s is not a regular file", opts.RestoreFrom)
		case fi.Size() == 0:
			return fmt.Errorf("memory snapshot %s is empty", opts.RestoreFrom)
		}
	}
	return nil
}

// listen binds a unix socket at path, listening, and returns it as a file
// for QEMU to inherit. Only root may connect (0600).
func listen(path string) (*os.File, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen: %w", err)
	}
	f, err := ln.File()
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return f, nil
}

// openDisk opens the image read-write and read-only, with O_DIRECT when
// its filesystem supports it (cache=none), else through the page cache
// (cache=writeback).
func openDisk(path string) (rw, ro *os.File, cache string, err error) {
	open := func(flag int) (*os.File, error) { return os.OpenFile(path, flag, 0) }
	cache = cacheNone
	rw, err = open(os.O_RDWR | unix.O_DIRECT)
	if errors.Is(err, unix.EINVAL) {
		cache = cacheWriteback
		rw, err = open(os.O_RDWR)
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("open disk: %w", err)
	}
	flag := os.O_RDONLY
	if cache == cacheNone {
		flag |= unix.O_DIRECT
	}
	ro, err = open(flag)
	if err != nil {
		rw.Close()
		return nil, nil, "", fmt.Errorf("open disk: %w", err)
	}
	return rw, ro, cache, nil
}

// dialNBD connects to the NBD server on the unix socket at path, for QEMU
// to use: the machine's jail cannot reach the socket itself.
func dialNBD(path string) (*os.File, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("open disk: %w", err)
	}
	defer conn.Close()
	f, err := conn.(*net.UnixConn).File()
	if err != nil {
		return nil, fmt.Errorf("open disk: %w", err)
	}
	return f, nil
}

// restore feeds QEMU the memory snapshot at descriptor fd (its number in
// QEMU) and waits until it is loaded. QEMU exits if the snapshot does not
// load.
func (m *Machine) restore(ctx context.Context, fd int) error {
	uri := fmt.Sprintf("fd:%d", fd)
	if err := m.qmp.Execute(ctx, "migrate-incoming", map[string]string{"uri": uri}, nil); err != nil {
		return fmt.Errorf("restore memory: %w", err)
	}
	err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		var st struct{ Status string }
		if err := m.qmp.Execute(ctx, "query-status", nil, &st); err != nil {
			return false, err
		}
		return st.Status != "inmigrate", nil
	})
	if err != nil {
		return fmt.Errorf("restore memory: %w", err)
	}
	var mig migrationInfo
	if err := m.qmp.Execute(ctx, "query-migrate", nil, &mig); err != nil {
		return fmt.Errorf("restore memory: %w", err)
	}
	if mig.Status != "completed" {
		return fmt.Errorf("restore memory: migration %s %s", mig.Status, mig.ErrorDesc)
	}
	return nil
}

// waitProcess waits for QEMU to exit and records how it ended. It runs
// from Start or Attach until the process is gone.
//
// A started QEMU is this process's child: cmd.Wait reaps it and tells its
// exit status. An attached one is not (it was reparented when the process
// that started it died): its pidfd turns readable when it exits and its
// status is not ours to read, so the exit counts as requested when Stop or
// Kill asked for it, as clean when QEMU announced a shutdown the guest
// asked for (SHUTDOWN with a guest-* reason, as after a guest poweroff,
// when a started QEMU exits 0), and as a crash otherwise.
func (m *Machine) waitProcess() {
	var exit vmm.Exit
	if m.cmd != nil {
		m.cmd.Wait()
		ps := m.cmd.ProcessState
		exit.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = ws.Signal()
		}
	} else {
		waitPidfd(m.pidfd)
		// QEMU sent its SHUTDOWN event before it exited; the watcher sees
		// it before the end of the connection, which QEMU's exit brings.
		select {
		case <-m.watcherDone:
		case <-time.After(exitGrace):
		}
		exit.StatusUnknown, exit.Code = true, -1
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	exit.Requested, exit.Time = m.requested.Load(), time.Now()
	exit.Reason = m.exit.Reason // a SHUTDOWN event may have come first
	if exit.StatusUnknown && strings.HasPrefix(exit.Reason, "guest-") {
		exit.Code = 0
	}
	m.exit, m.exitErr = exit, nil
	if exit.Crashed() {
		m.exitErr = &vmm.ExitError{Exit: exit, Stderr: tail(m.stderr, stderrTail)}
	}
	close(m.exited)
}

// waitPidfd blocks until the process of pidfd has exited.
func waitPidfd(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || err != unix.EINTR && err != unix.EAGAIN {
			// Any other error would be a bad pidfd (it stays open until
			// this returns): the machine is then released, its cgroup
			// killed, rather than followed blind.
			return
		}
	}
}

// signal sends sig to QEMU through its pidfd, so never to a later process
// that reused its pid. Once QEMU has exited it does nothing.
func (m *Machine) signal(sig unix.Signal) error {
	m.pidMu.Lock()
	defer m.pidMu.Unlock()
	if m.pidfd < 0 {
		return nil
	}
	if err := unix.PidfdSendSignal(m.pidfd, sig, nil, 0); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

func (m *Machine) closePidfd() {
	m.pidMu.Lock()
	defer m.pidMu.Unlock()
	if m.pidfd >= 0 {
		unix.Close(m.pidfd)
		m.pidfd = -1
	}
}

// watchEvents records the reason of QEMU's SHUTDOWN event in the exit. It
// runs until the QMP connection ends.
func (m *Machine) watchEvents(events <-chan Event) {
	defer close(m.watcherDone)
	for ev := range events {
		if ev.Name != "SHUTDOWN" {
			continue
		}
		var d struct{ Reason string }
		json.Unmarshal(ev.Data, &d)
		m.exitMu.Lock()
		m.exit.Reason = d.Reason
		m.exitMu.Unlock()
		m.log.Info("machine shutting down", "reason", d.Reason)
	}
}

// reap releases what the machine holds once QEMU has exited. It runs from
// a successful Start until then.
func (m *Machine) reap() {
	<-m.exited
	m.closePidfd()
	m.qmp.Close()
	<-m.watcherDone
	// Nothing of the machine can run any more (QEMU was PID 1 of its pid
	// namespace), but the kernel may still be tearing it down.
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	if err := m.cg.Destroy(ctx); err != nil {
		m.log.Error("destroy machine cgroup", "err", err)
	}
	if m.console != nil {
		m.console.Stop()
	}
	for _, p := range []string{m.qmpSock, m.cfg.AgentSocket} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove socket", "path", p, "err", err)
		}
	}
	m.v.freeUID(m.uid)
	m.exitMu.Lock()
	exit, exitErr := m.exit, m.exitErr
	if e, ok := exitErr.(*vmm.ExitError); ok {
		e.Exit.Reason = exit.Reason
	}
	m.exitMu.Unlock()
	if exitErr != nil {
		m.log.Error("machine crashed", "exit", exit.String(), "err", exitErr)
	} else {
		m.log.Info("machine ended", "exit", exit.String(), "requested", exit.Requested)
	}
	close(m.done)
}

// gone returns nil while QEMU lives, else the error every query of an
// exited machine gets: wrapping vmm.ErrExited, and vmm.ErrCrashed (as an
// *vmm.ExitError) after a crash.
func (m *Machine) gone() error {
	select {
	case <-m.exited:
	default:
		return nil
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	if m.exitErr != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, m.exitErr)
	}
	return fmt.Errorf("machine %s: %w (%s)", m.cfg.ID, vmm.ErrExited, m.exit)
}

// explain turns a QMP failure caused by QEMU's death into the exit error:
// when the connection is gone it waits a moment for the process to be
// reaped.
func (m *Machine) explain(err error) error {
	if !errors.Is(err, ErrClosed) {
		return err
	}
	select {
	case <-m.exited:
		return m.gone()
	case <-time.After(exitGrace):
		return err
	}
}

// call runs a QMP command on the live machine, for at most callTimeout
// when ctx has no deadline.
func (m *Machine) call(ctx context.Context, command string, args, result any) error {
	if err := m.gone(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	return m.explain(m.qmp.Execute(ctx, command, args, result))
}

// PID implements vmm.Machine.
func (m *Machine) PID() int { return m.pid }

// StartTime is QEMU's start time, field 22 of /proc/PID/stat: with PID it
// names the process for Attach, never a later one that reused the pid.
func (m *Machine) StartTime() uint64 { return m.start }

// UID is the host uid (and gid) QEMU runs as.
func (m *Machine) UID() uint32 { return m.uid }

// Events subscribes to the machine's QMP events (see Client.Subscribe).
func (m *Machine) Events(buffer int) (<-chan Event, func()) { return m.qmp.Subscribe(buffer) }

// Status implements vmm.Machine.
func (m *Machine) Status(ctx context.Context) (vmm.Status, error) {
	var r struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := m.call(ctx, "query-status", nil, &r); err != nil {
		return vmm.Status{}, fmt.Errorf("status: %w", err)
	}
	return statusOf(r.Status, r.Running), nil
}

// statusOf maps QEMU's run states (qapi/run-state.json) to vmm's.
func statusOf(s string, running bool) vmm.Status {
	switch s {
	case "running":
		return vmm.Status{State: vmm.StateRunning, Detail: s}
	case "io-error", "internal-error", "guest-panicked", "watchdog", "shutdown":
		return vmm.Status{State: vmm.StateFailed, Detail: s}
	case "paused", "prelaunch", "postmigrate", "finish-migrate", "inmigrate",
		"save-vm", "restore-vm", "suspended", "debug", "colo":
		return vmm.Status{State: vmm.StatePaused, Detail: s}
	}
	if running {
		return vmm.Status{State: vmm.StateRunning, Detail: s}
	}
	return vmm.Status{State: vmm.StatePaused, Detail: s}
}

// Pause implements vmm.Machine.
func (m *Machine) Pause(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.call(ctx, "stop", nil, nil); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume implements vmm.Machine.
func (m *Machine) Resume(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.call(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// Stop implements vmm.Machine.
func (m *Machine) Stop(ctx context.Context, grace time.Duration) error {
	m.requested.Store(true)
	if m.gone() != nil {
		return m.waitDone(ctx)
	}
	if st, err := m.Status(ctx); err == nil && st.State == vmm.StateRunning && grace > 0 {
		if err := m.call(ctx, "system_powerdown", nil, nil); err != nil {
			m.log.Warn("ACPI powerdown", "err", err)
		} else if m.waitExited(ctx, grace) {
			return m.waitDone(ctx)
		}
	}
	if ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, quitWait)
		err := m.call(qctx, "quit", nil, nil)
		cancel()
		if err == nil && m.waitExited(ctx, quitWait) {
			return m.waitDone(ctx)
		}
	}
	return m.Kill(ctx)
}

// waitExited waits up to d, or until ctx ends, for QEMU to exit.
func (m *Machine) waitExited(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// waitDone waits for the machine to be released, at most killWait, even
// when ctx has ended: callers come here once QEMU is dead or dying.
func (m *Machine) waitDone(ctx context.Context) error {
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-m.done:
		return nil
	case <-t.C:
		return fmt.Errorf("machine %s: not released %v after its end", m.cfg.ID, killWait)
	}
}

// Kill implements vmm.Machine.
func (m *Machine) Kill(ctx context.Context) error {
	m.requested.Store(true)
	if err := m.signal(unix.SIGKILL); err != nil {
		return fmt.Errorf("kill machine %s: %w", m.cfg.ID, err)
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait implements vmm.Machine.
func (m *Machine) Wait(ctx context.Context) (vmm.Exit, error) {
	select {
	case <-m.done:
	case <-ctx.Done():
		return vmm.Exit{}, ctx.Err()
	}
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	return m.exit, m.exitErr
}

// Done implements vmm.Machine.
func (m *Machine) Done() <-chan struct{} { return m.done }

// tail returns the last n bytes of the file at path, from a line start
// when it can, trimmed; "" if it cannot be read.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, n))
	if err != nil {
		return ""
	}
	s := string(b)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
