//go:build linux

// Package vm is warren's microVM runtime: each sandbox is a QEMU machine
// (internal/vmm/qemu, jailed: own namespaces, cgroup, seccomp, an
// unprivileged uid of its own) that boots the guest kernel found by package
// guest with an initramfs whose /init is the guest agent. The agent sets the
// guest up (package vminit: modules, the root disk /dev/vda, the workspace
// disk /dev/vdb on /workspace when there is one, hostname) and serves the
// sandbox API as PID 1 over a virtio-serial port bridged to a unix socket
// in the sandbox's private directory (package vmport, reached with
// agentconn.DialVMPort). The root disk is the sandbox's own raw ext4 image,
// the same one the container runtime boots, as virtio-blk; so is the
// workspace disk.
//
// The vCPUs run under KVM only where hardware virtualization really works
// (vmm/accel), else under QEMU's TCG: software emulation, a boundary of
// QEMU's emulator code and seconds per boot, for testing rather than
// production. Isolation says which.
//
// A sandbox can pause with its memory (runtime.Pauser): QEMU migrates the
// machine to a file in the sandbox's directory and exits; Resume starts a
// new QEMU from that file.
//
// Sandboxes survive a daemon restart: QEMU does not depend on the daemon
// (vmm/jail), so Adopt attaches to it again from the state the instance
// reported (pid, start time, uid: qemu.VMM.Attach), and the agent's port
// takes the new daemon's session through its handshake. A paused sandbox
// has no QEMU, only its memory file: it is adopted paused.
//
// It is not the VMM (vmm/qemu) and does not build kernels or initramfs
// contents (package guest).
package vm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agentconn"
	"warren/internal/cgroup"
	"warren/internal/imagefmt"
	"warren/internal/runtime"
	"warren/internal/runtime/vm/guest"
	"warren/internal/runtime/vm/vminit"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
	"warren/internal/vmm/qemu"
)

// Defaults and bounds.
const (
	// DefaultMemoryMiB is a guest's memory when its limits set none.
	DefaultMemoryMiB = 512
	// stopGrace bounds the guest agent's graceful shutdown before the VMM
	// is stopped and then killed.
	stopGrace = 2 * time.Second
	// killWait bounds the wait for a killed VMM to be released.
	killWait = 10 * time.Second
	// consoleTail is how much of the console a failed boot reports.
	consoleTail = 1500
)

// Options configure the runtime.
type Options struct {
	// KernelDir holds the extracted guest kernel; default guest.DefaultDir.
	KernelDir string
	// QEMU is the QEMU system emulator; default qemu.DefaultBinary.
	QEMU string
	// Dir is a directory private to the node for the runtime's own files
	// (the initramfs, built once at New). Required.
	Dir string
	// Accel forces accel.KVM or accel.TCG; "" detects (vmm/accel).
	Accel string
}

// Runtime is the microVM runtime. It is safe for concurrent use.
type Runtime struct {
	log     *slog.Logger
	cgroups *cgroup.Hierarchy
	// unavailable says why the node cannot run VMs; when it is set the
	// fields below may be zero.
	unavailable error
	kernel      guest.Kernel
	initrd      string
	accel       accel.Accel
	vmm         *qemu.VMM
	qemu        string // the binary
	// format is the format of its memory images ("" when it cannot be
	// told, and no image restores elsewhere).
	format func() string
}

var _ runtime.Runtime = (*Runtime)(nil)

// New makes the runtime: it finds the guest kernel, builds the initramfs
// (with agentBinary as /init) into opts.Dir, decides the accelerator and
// prepares the QEMU VMM. A node that lacks any of them still gets a Runtime,
// whose Available says what is missing; New fails only on bad options.
func New(log *slog.Logger, cgroups *cgroup.Hierarchy, agentBinary string, opts Options) (*Runtime, error) {
	if opts.Dir == "" {
		return nil, errors.New("vm runtime: Options.Dir is required")
	}
	if cgroups == nil {
		return nil, errors.New("vm runtime: a cgroup hierarchy is required")
	}
	if opts.KernelDir == "" {
		opts.KernelDir = guest.DefaultDir
	}
	r := &Runtime{log: log, cgroups: cgroups}
	r.format = sync.OnceValue(func() string {
		f, err := imagefmt.Of(r.Name(), []string{r.accel.Name, r.kernel.Version}, r.qemu, r.kernel.Vmlinuz, r.initrd)
		if err != nil {
			r.log.Warn("vm memory images restore on this node only", "err", err)
		}
		return f
	})
	r.unavailable = r.prepare(agentBinary, opts)
	if r.unavailable != nil {
		log.Info("vm runtime unavailable", "reason", r.unavailable)
	} else {
		log.Info("vm runtime ready", "kernel", r.kernel.Version, "accel", r.accel.Name, "accel_reason", r.accel.Reason)
	}
	return r, nil
}

func (r *Runtime) prepare(agentBinary string, opts Options) error {
	if os.Geteuid() != 0 {
		return errors.New("the vm runtime needs root (to jail the VMM)")
	}
	k, err := guest.Find(opts.KernelDir)
	if err != nil {
		return err
	}
	r.kernel = k
	v, err := qemu.New(qemu.Options{Binary: opts.QEMU, Cgroups: r.cgroups, Log: r.log})
	if err != nil {
		return fmt.Errorf("%w (Debian package qemu-system-x86; scripts/deps.sh installs it)", err)
	}
	r.vmm = v
	r.qemu = cmp.Or(opts.QEMU, qemu.DefaultBinary)
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return fmt.Errorf("vm runtime dir: %w", err)
	}
	r.initrd = filepath.Join(opts.Dir, "initramfs")
	if err := buildInitramfs(r.initrd, agentBinary, k); err != nil {
		return err
	}
	switch opts.Accel {
	case "":
		r.accel = accel.Detect(context.Background())
	case accel.KVM, accel.TCG:
		r.accel = accel.Accel{Name: opts.Accel, Reason: "set by the operator"}
	default:
		return fmt.Errorf("unknown accelerator %q", opts.Accel)
	}
	return nil
}

// buildInitramfs writes the initramfs to path whole: under a temporary name,
// then renamed. It is world-readable: each QEMU runs as an unprivileged uid
// of its own and opens it (bound read-only into its jail); it holds only the
// agent binary and kernel modules, nothing secret.
func buildInitramfs(path, agentBinary string, k guest.Kernel) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	err = f.Chmod(0o644) // whatever the umask
	if err == nil {
		err = guest.BuildInitramfs(f, agentBinary, k)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "vm" }

// Accel is the accelerator the runtime's machines run under (accel.KVM or
// accel.TCG), "" when the runtime is unavailable.
func (r *Runtime) Accel() string { return r.accel.Name }

// Isolation implements runtime.Runtime.
func (r *Runtime) Isolation() string {
	switch r.accel.Name {
	case accel.KVM:
		return "vm (QEMU, kvm)"
	case accel.TCG:
		return "vm (QEMU, tcg software emulation: for testing, not production)"
	}
	return "vm (QEMU)"
}

// Available implements runtime.Runtime.
func (r *Runtime) Available() error { return r.unavailable }

// state is what Adopt needs to find an earlier daemon's machine.
type state struct {
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat: with the pid it names one
	// process, never a later one that reused the pid.
	StartTime uint64 `json:"start_time"`
	// UID is the host uid QEMU runs as, which no other machine may take.
	UID    uint32 `json:"uid"`
	Socket string `json:"socket"`
	Accel  string `json:"accel"`
	// Paused says the sandbox has no QEMU (PID, StartTime and UID are 0),
	// only its memory file in its directory.
	Paused bool `json:"paused,omitempty"`
}

// memoryFile is the name of a paused sandbox's memory snapshot in its
// private directory.
const memoryFile = "memory.snap"

// instance is one VM sandbox: running, or paused with its memory in a file
// and no QEMU process (runtime.Pauser).
type instance struct {
	r    *Runtime
	id   string
	dir  string
	cfg  vmm.Config      // the machine's config, for Resume
	net  runtime.Network // the sandbox's router, or nil; each QEMU gets a new tap
	conn *agentconn.Conn // the one connection to the agent's port (see Dial)

	done     chan struct{} // closed when the sandbox ends, not when Pause ends its QEMU
	doneOnce sync.Once

	// opMu serializes Pause, Resume and Stop; it guards the fields below,
	// mu guards them for State.
	opMu sync.Mutex
	mu   sync.Mutex
	st   state
	cur  *machine // nil while paused or stopped
	// exitReason says how the sandbox ended on its own, once it has.
	exitReason string
	paused     bool
	stopped    bool

	stopErr error
}

// machine is one QEMU process of an instance; planned is set when the
// instance ends it on purpose (Pause), so that its exit does not end the
// sandbox.
type machine struct {
	m       *qemu.Machine
	planned atomic.Bool
}

var (
	_ runtime.Pauser    = (*instance)(nil)
	_ runtime.Forker    = (*instance)(nil)
	_ runtime.Explainer = (*instance)(nil)
)

func (in *instance) State() []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	b, _ := json.Marshal(in.st) // ints and strings always marshal
	return b
}

func (in *instance) AgentSocket() string   { return in.cfg.AgentSocket }
func (in *instance) Done() <-chan struct{} { return in.done }

func (in *instance) closeDone() { in.doneOnce.Do(func() { close(in.done) }) }

// follow ends the sandbox when mc's QEMU exits, unless Pause ended it.
func (in *instance) follow(mc *machine) {
	<-mc.m.Done()
	if mc.planned.Load() {
		return
	}
	exit, _ := mc.m.Wait(context.Background()) // done: returns at once
	reason := "the guest powered off or rebooted: " + exit.String()
	if exit.Crashed() {
		reason = "its VMM (QEMU) crashed: " + exit.String()
	}
	in.mu.Lock()
	in.exitReason = reason
	in.mu.Unlock()
	in.closeDone()
}

// ExitReason implements runtime.Explainer.
func (in *instance) ExitReason() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.exitReason
}

// adopt makes m the instance's running machine.
func (in *instance) adopt(m *qemu.Machine) {
	mc := &machine{m: m}
	in.mu.Lock()
	in.cur, in.paused = mc, false
	in.st.PID, in.st.StartTime, in.st.UID, in.st.Paused = m.PID(), m.StartTime(), m.UID(), false
	in.mu.Unlock()
	go in.follow(mc)
}

// Dial implements runtime.Instance. The agent's channel is a virtio-serial
// port, which carries one HTTP/2 session at a time: a second connection
// would take the port from the first. So every Dial returns the instance's
// one Conn, the one Start waited on and Freeze and Stop use; closing it
// only drops its session, and the next call opens a new one (after a
// Resume, to the new QEMU's port).
func (in *instance) Dial() *agentconn.Conn { return in.conn }

// Quiesce implements runtime.Instance: a Freeze, which flushes the guest's
// cache (a sync from the host would not).
func (in *instance) Quiesce(ctx context.Context, path string) (func() error, error) {
	return in.Freeze(ctx, path)
}

// Freeze implements runtime.Instance through the guest agent, which is root
// in its own kernel: FIFREEZE works there, and the host cannot reach the
// guest's filesystem anyway.
func (in *instance) Freeze(ctx context.Context, path string) (func() error, error) {
	if _, err := in.conn.Control.Freeze(ctx, connect.NewRequest(&controlpb.FreezeRequest{Path: path})); err != nil {
		return nil, fmt.Errorf("freeze %s in the guest: %w", path, err)
	}
	return func() error {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := in.conn.Control.Thaw(tctx, connect.NewRequest(&controlpb.ThawRequest{Path: path})); err != nil {
			return fmt.Errorf("thaw %s in the guest: %w", path, err)
		}
		return nil
	}, nil
}

// OwnClock implements runtime.Clocked: a guest keeps its own clock.
func (in *instance) OwnClock() bool { return true }

// Pause implements runtime.Pauser: the machine's memory is saved (QEMU
// migration to a file, which leaves the vCPUs stopped) to memory.snap in
// the sandbox's directory, then the QEMU process is ended. If the save
// fails the machine runs again.
func (in *instance) Pause(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.paused && !in.stopped {
		return nil
	}
	return in.save(ctx, filepath.Join(in.dir, memoryFile), true, "vm paused")
}

// Hold implements runtime.Forker: the memory is saved as a pause saves it,
// but QEMU goes on, its vCPUs stopped until resume (QEMU's cont, which
// takes back the disks the save let go of).
func (in *instance) Hold(ctx context.Context, path string) (func() error, error) {
	in.opMu.Lock()
	switch {
	case in.stopped:
		in.opMu.Unlock()
		return nil, errors.New("the sandbox is stopped")
	case in.paused:
		in.opMu.Unlock()
		return nil, errors.New("the sandbox is paused")
	}
	mc := in.cur
	resume := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		return mc.m.Resume(rctx)
	}
	if err := mc.m.SaveMemory(ctx, path, false); err != nil { // the children read it at once
		defer in.opMu.Unlock()
		if rerr := resume(); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("run the vm again: %w", rerr))
		}
		return nil, err
	}
	return func() error {
		defer in.opMu.Unlock()
		if err := resume(); err != nil {
			return fmt.Errorf("run the vm again after its fork: %w", err)
		}
		return nil
	}, nil
}

// ImageFormat implements runtime.Imager: the accelerator, the guest
// kernel, QEMU's binary and the initramfs (the agent), and the host's CPU.
func (r *Runtime) ImageFormat() string {
	if r.unavailable != nil {
		return ""
	}
	return r.format()
}

// Image implements runtime.Pauser.
func (in *instance) Image() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.paused || in.stopped {
		return ""
	}
	return filepath.Join(in.dir, memoryFile)
}

// SaveImage implements runtime.Imager.
func (r *Runtime) SaveImage(ctx context.Context, inst runtime.Instance, path string) error {
	in, ok := inst.(*instance)
	if !ok {
		return fmt.Errorf("save image: %T is not a vm sandbox", inst)
	}
	in.opMu.Lock()
	defer in.opMu.Unlock()
	return in.save(ctx, path, false, "vm saved as an image") // images do not outlive the daemon
}

// save saves the machine's memory to mem (durable: synced, for a pause,
// which outlives the daemon) and ends its QEMU, leaving the instance
// paused; what is logged with the figures. in.opMu is held.
func (in *instance) save(ctx context.Context, mem string, durable bool, what string) error {
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case in.paused:
		return errors.New("the sandbox is paused")
	}
	mc := in.cur
	select {
	case <-mc.m.Done():
		return fmt.Errorf("pause: %w", vmm.ErrExited)
	default:
	}
	t0 := time.Now()
	if err := mc.m.SaveMemory(ctx, mem, durable); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		if rerr := mc.m.Resume(rctx); rerr != nil {
			return errors.Join(err, fmt.Errorf("run the vm again: %w", rerr))
		}
		return err
	}
	tSave := time.Now()
	mc.planned.Store(true)
	in.conn.Close()
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait+stopGrace)
	defer cancel()
	if err := mc.m.Stop(kctx, 0); err != nil {
		if kerr := mc.m.Kill(kctx); kerr != nil {
			// The machine is still there, stopped: it is not paused.
			mc.planned.Store(false)
			os.Remove(mem)
			return errors.Join(err, kerr)
		}
	}
	in.mu.Lock()
	in.cur, in.paused = nil, true
	in.st.PID, in.st.StartTime, in.st.UID, in.st.Paused = 0, 0, 0, true
	in.mu.Unlock()
	var size int64
	if fi, err := os.Stat(mem); err == nil {
		size = fi.Size()
	}
	in.r.log.Info(what, "sandbox", in.id, "memory_mib", in.cfg.MemoryMiB, "file_bytes", size,
		"save", tSave.Sub(t0), "stop", time.Since(tSave))
	return nil
}

// Resume implements runtime.Pauser: a new QEMU with the same config loads
// memory.snap, the agent's channel reconnects, and the file is removed.
func (in *instance) Resume(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case !in.paused:
		return nil
	}
	mem := filepath.Join(in.dir, memoryFile)
	t0 := time.Now()
	m, err := in.r.startMachine(ctx, in.cfg, in.net, vmm.StartOptions{RestoreFrom: mem})
	if err != nil {
		// Nothing ran: the sandbox stays paused.
		return fmt.Errorf("restore vm: %w", err)
	}
	tRestore := time.Now()
	if err := waitAgent(ctx, m, in.conn); err != nil {
		// The guest ran on (and may have written to its disk): the memory
		// file no longer matches the disk, so the sandbox is lost.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		m.Kill(kctx)
		cancel()
		in.conn.Close()
		os.Remove(mem)
		in.paused, in.stopped = false, true
		in.closeDone()
		return fmt.Errorf("resumed vm: %w; console: %s", err, tail(in.cfg.ConsoleLog, consoleTail))
	}
	in.adopt(m)
	go in.r.watch(in.id, m)
	if err := os.Remove(mem); err != nil {
		in.r.log.Warn("remove memory snapshot", "sandbox", in.id, "err", err)
	}
	in.r.log.Info("vm resumed", "sandbox", in.id, "memory_mib", in.cfg.MemoryMiB,
		"restore", tRestore.Sub(t0), "agent", time.Since(tRestore))
	return nil
}

// Stop implements runtime.Instance: the guest agent's shutdown (which
// syncs and powers off) for up to stopGrace, then the VMM's stop, then
// kill. A paused sandbox has no VMM: its memory file is removed. The disk
// is left where it is.
func (in *instance) Stop(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.stopped {
		return in.stopErr
	}
	in.stopped = true
	ctx = context.WithoutCancel(ctx)
	defer in.closeDone()
	defer in.conn.Close()
	if err := os.Remove(filepath.Join(in.dir, memoryFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		in.stopErr = err
	}
	mc := in.cur
	if mc == nil {
		return in.stopErr
	}
	select {
	case <-mc.m.Done():
	default:
		sctx, cancel := context.WithTimeout(ctx, stopGrace)
		_, err := in.conn.Control.Shutdown(sctx, connect.NewRequest(&controlpb.ShutdownRequest{GraceMs: 500}))
		if err == nil {
			select {
			case <-mc.m.Done():
			case <-sctx.Done():
			}
		}
		cancel()
	}
	in.conn.Close()
	kctx, cancel := context.WithTimeout(ctx, killWait+stopGrace)
	defer cancel()
	// A paused or unresponsive guest: Stop skips to quit, then kill.
	err := mc.m.Stop(kctx, 0)
	if err != nil {
		err = errors.Join(err, mc.m.Kill(kctx))
	}
	in.stopErr = errors.Join(in.stopErr, err)
	return in.stopErr
}

// Start implements runtime.Runtime: it boots the machine, or restores
// spec.Memory, and returns once the guest agent answers through its port
// (bounded by ctx).
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	if r.unavailable != nil {
		return nil, fmt.Errorf("vm runtime unavailable: %w", r.unavailable)
	}
	cfg := r.config(spec)
	if err := os.Mkdir(cfg.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("vmm dir: %w", err)
	}
	t0 := time.Now()
	m, err := r.startMachine(ctx, cfg, spec.Network, vmm.StartOptions{RestoreFrom: spec.Memory})
	if err != nil {
		return nil, fmt.Errorf("start vm: %w", err)
	}
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, cfg: cfg, net: spec.Network, done: make(chan struct{}),
		st:   state{Socket: cfg.AgentSocket, Accel: cfg.Accel},
		conn: agentconn.DialVMPort(cfg.AgentSocket)}
	defer func() {
		if err != nil {
			in.conn.Close()
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
			m.Kill(kctx)
			cancel()
		}
	}()
	if err := waitAgent(ctx, m, in.conn); err != nil {
		return nil, fmt.Errorf("%w; console: %s", err, tail(cfg.ConsoleLog, consoleTail))
	}
	in.adopt(m)
	r.log.Debug("vm booted", "sandbox", spec.ID, "accel", cfg.Accel, "workspace", cfg.Workspace != "", "from_memory", spec.Memory != "",
		"boot_to_agent", time.Since(t0))
	go r.watch(spec.ID, m)
	return in, nil
}

// startMachine starts a QEMU for cfg, with a new tap of net when the
// sandbox has a network.
func (r *Runtime) startMachine(ctx context.Context, cfg vmm.Config, net runtime.Network, opts vmm.StartOptions) (*qemu.Machine, error) {
	if net != nil {
		tap, err := net.Tap()
		if err != nil {
			return nil, err
		}
		defer tap.Close() // QEMU has its own copy
		opts.Tap = tap
	}
	return r.vmm.Start(ctx, cfg, opts)
}

// config is the machine of spec, for Start and, after a restart, for
// Adopt: with this process's kernel and initramfs, which only a later
// boot or memory restore reads.
func (r *Runtime) config(spec runtime.Spec) vmm.Config {
	mem := int(spec.Limits.MemoryBytes >> 20)
	if mem == 0 {
		mem = DefaultMemoryMiB
	}
	return vmm.Config{
		ID:          spec.ID,
		Kernel:      r.kernel.Vmlinuz,
		Initrd:      r.initrd,
		Cmdline:     cmdline(spec.Hostname, spec.Workspace != "", spec.Network != nil),
		Disk:        spec.Disk,
		DiskNBD:     spec.DiskNBD,
		Workspace:   spec.Workspace,
		MemoryMiB:   mem,
		VCPUs:       max(1, int(math.Ceil(spec.Limits.CPUs))),
		Accel:       r.accel.Name,
		AgentSocket: filepath.Join(spec.Dir, "agent.sock"),
		ConsoleLog:  filepath.Join(spec.Dir, "console.log"),
		RNG:         true,
		Net:         spec.Network != nil,
		WorkDir:     filepath.Join(spec.Dir, "vmm"),
	}
}

// cmdline is the guest kernel's command line.
func cmdline(hostname string, workspace, network bool) string {
	c := "console=ttyS0 panic=-1 " + vminit.ParamVM + "=1 " + vminit.ParamHostname + "=" + hostname
	if workspace {
		c += " " + vminit.ParamWorkspace + "=1"
	}
	if network {
		c += " " + vminit.ParamNetwork + "=1"
	}
	return c
}

// waitAgent polls the agent until it answers, the machine ends, or ctx ends.
func waitAgent(ctx context.Context, m vmm.Machine, conn *agentconn.Conn) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	err := conn.WaitReady(wctx)
	select {
	case <-m.Done():
		exit, werr := m.Wait(context.Background())
		return fmt.Errorf("vm ended before its agent answered (%v): %w", exit, errors.Join(werr, vmm.ErrExited))
	default:
	}
	if err != nil {
		return fmt.Errorf("wait for the guest agent: %w", err)
	}
	return nil
}

// watch logs how a machine ended when it crashed: the manager sees Done
// close and marks the sandbox failed.
func (r *Runtime) watch(id string, m vmm.Machine) {
	exit, err := m.Wait(context.Background())
	if exit.Crashed() {
		r.log.Warn("vmm crashed", "sandbox", id, "exit", exit.String(), "err", err)
	} else {
		r.log.Debug("vm ended", "sandbox", id, "exit", exit.String())
	}
}

// Adopt implements runtime.Runtime. A running sandbox's QEMU is attached
// to again (qemu.VMM.Attach: the recorded process only, by pid and start
// time); its agent then answers on a new session of its port. A paused
// sandbox comes back paused, with its memory file, for Resume. If the
// machine is gone (QEMU exited, its pid names another process, the memory
// file is missing or was being resumed from), or cannot be attached, what is left is removed (the
// cgroup and whatever runs in it, the sandbox's directory): ErrGone when
// it was gone, the attach error otherwise.
func (r *Runtime) Adopt(ctx context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	in, err := r.reattach(ctx, spec, raw)
	if err == nil {
		return in, nil
	}
	cerr := r.destroy(ctx, spec.ID)
	if spec.Dir != "" {
		cerr = errors.Join(cerr, os.RemoveAll(spec.Dir))
	}
	return nil, errors.Join(err, cerr)
}

func (r *Runtime) reattach(ctx context.Context, spec runtime.Spec, raw []byte) (*instance, error) {
	if r.unavailable != nil {
		return nil, fmt.Errorf("vm runtime unavailable: %w", r.unavailable)
	}
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("vm state: %w", err)
	}
	cfg := r.config(spec)
	if st.Accel != "" {
		cfg.Accel = st.Accel // the machine's, as it was started
	}
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, cfg: cfg, net: spec.Network, done: make(chan struct{}), st: st,
		conn: agentconn.DialVMPort(cfg.AgentSocket)}
	if st.Paused {
		if _, err := os.Stat(filepath.Join(spec.Dir, memoryFile)); err != nil {
			return nil, fmt.Errorf("%w: paused vm without its memory: %w", runtime.ErrGone, err)
		}
		// A paused sandbox has no QEMU, so no cgroup (its last QEMU's
		// went with it). One means an earlier daemon died resuming it: a
		// QEMU loaded the memory file and may have run the guest on, and
		// written its disk, so the file no longer matches the disk.
		if _, err := r.cgroups.Open(spec.ID); !errors.Is(err, cgroup.ErrNotFound) {
			return nil, fmt.Errorf("%w: an earlier daemon died resuming the paused vm", runtime.ErrGone)
		}
		in.paused = true
		return in, nil
	}
	m, err := r.vmm.Attach(ctx, cfg, st.PID, st.StartTime, st.UID)
	if errors.Is(err, vmm.ErrExited) {
		return nil, errors.Join(runtime.ErrGone, err)
	}
	if err != nil {
		return nil, err
	}
	// A daemon that died pausing the sandbox may have left its vCPUs
	// stopped (a memory save stops them first); it is recorded running.
	if vs, err := m.Status(ctx); err == nil && vs.State == vmm.StatePaused {
		r.log.Warn("adopted vm was left paused; running it", "sandbox", spec.ID, "detail", vs.Detail)
		if err := m.Resume(ctx); err != nil {
			r.log.Warn("run adopted vm", "sandbox", spec.ID, "err", err)
		}
	}
	in.adopt(m)
	go r.watch(spec.ID, m)
	r.log.Info("vm adopted", "sandbox", spec.ID, "pid", st.PID)
	return in, nil
}

// destroy kills what runs in the sandbox's cgroup and removes it.
func (r *Runtime) destroy(ctx context.Context, id string) error {
	cg, err := r.cgroups.Open(id)
	if errors.Is(err, cgroup.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	kctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	return cg.Destroy(kctx)
}

// Sweep implements runtime.Runtime: the cgroup of every known sandbox that
// is not kept is destroyed, killing a QEMU still in it.
func (r *Runtime) Sweep(ctx context.Context, known, keep map[string]bool) error {
	names, err := r.cgroups.List()
	if err != nil {
		return fmt.Errorf("list cgroups: %w", err)
	}
	var errs []error
	for _, name := range names {
		if !known[name] || keep[name] {
			continue
		}
		r.log.Info("removing leftover vm cgroup", "sandbox", name)
		errs = append(errs, r.destroy(ctx, name))
	}
	return errors.Join(errs...)
}

// tail is the last n bytes of the file at path, for error reports.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return strings.TrimSpace(string(b))
}
