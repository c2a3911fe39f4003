//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/cgroup"
	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/procid"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
	"warren/internal/vmm/jail"
)

// QEMU's own files in Config.WorkDir.
const (
	qmpSockName     = "qmp.sock"     // QMP's listening socket
	qemuLogName     = "qemu.log"     // QEMU's stdout and stderr
	consoleFIFOName = "console.fifo" // the serial console, drained into Config.ConsoleLog
)

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
