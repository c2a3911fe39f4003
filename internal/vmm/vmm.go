// Package vmm is the contract between warren's microVM runtime
// (runtime/vm) and the virtual machine monitors that run its guests: what a
// machine is made of (Config), how it starts (StartOptions), and what the
// runtime may do to a running one (Machine). Each VMM lives in its own
// package whose machines satisfy Machine: vmm/qemu today, Firecracker or
// Cloud Hypervisor later. There is no VMM interface: starting and attaching
// take arguments only one VMM knows (qemu's jail uid and start time), and
// runtime/vm, its only user, calls vmm/qemu directly. How a machine's vCPUs run (KVM or TCG) is decided by
// vmm/accel.
//
// It is not the runtime: it knows nothing of sandboxes, guest agents, disk
// pools or snapshot lineages, and it does not decide where files live. Apart
// from Config.Validate's stat calls it does no I/O.
//
// # Machine states
//
// A Machine is created running by its VMM's Start (or paused, with
// StartOptions.Paused), or found running by a VMM that attaches to a
// machine an earlier process started (vmm/qemu's VMM.Attach), and ends
// exactly once, when its VMM process exits:
//
//	Start ──▶ running ◀──Resume/Pause──▶ paused ──SaveMemory──▶ paused
//	              │                         │
//	              └──── Stop / Kill / guest poweroff / crash ───▶ exited
//
// While the VMM process lives, Status reports StateRunning, StatePaused or
// StateFailed (the VMM stopped the vCPUs because of a fault). Once it has
// exited, every method but Wait, Done, Stop and Kill fails with ErrExited.
package vmm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"warren/internal/vmm/accel"
)

// Errors returned by VMMs and machines, testable with errors.Is.
var (
	// ErrInvalidConfig means a Config or StartOptions was refused before
	// anything was started.
	ErrInvalidConfig = errors.New("invalid machine config")
	// ErrExited means the machine's VMM process has exited: the machine
	// can no longer be queried or changed.
	ErrExited = errors.New("machine has exited")
	// ErrCrashed means the VMM process ended without being asked to and not
	// by a clean guest poweroff. The error is an *ExitError.
	ErrCrashed = errors.New("vmm crashed")
)

// Limits on Config values. They are sanity bounds, not capacity planning.
const (
	MinMemoryMiB = 16
	MaxMemoryMiB = 1 << 20 // 1 TiB
	MaxVCPUs     = 255     // x86 without interrupt remapping
	// maxSocketPath is the size of sun_path less its terminating NUL.
	maxSocketPath = 107
	// maxIDLen is the cgroup name limit (internal/cgroup).
	maxIDLen = 128
)

// Config describes one machine. Paths are host paths; a VMM shows its
// process only what it needs of them (see its package comment). The same
// Config, with the machine's disk as it was, restores a memory snapshot.
type Config struct {
	// ID names the machine in logs and names its cgroup: ASCII letters,
	// digits, '_' and '-', 1 to 128 bytes. Two live machines on a host never
	// share an ID.
	ID string
	// Kernel is the guest kernel image. Empty boots the machine's firmware
	// alone (SeaBIOS under q35), which the tests use; a microvm needs one.
	Kernel string
	// Initrd is the initial ramdisk, or "" for none. Needs Kernel.
	Initrd string
	// Cmdline is the kernel command line. Needs Kernel.
	Cmdline string
	// Disk is the root disk: a raw image, opened read-write. Required. The
	// guest sees it as its first disk.
	Disk string
	// DiskNBD says Disk is a unix socket serving the root disk over NBD,
	// which the machine's own NBD client attaches, instead of an image.
	DiskNBD bool
	// Workspace is an optional second disk, a raw image opened read-write
	// like Disk; the guest sees it as its second disk. "" for none.
	Workspace string
	// MemoryMiB is the guest's memory, MinMemoryMiB to MaxMemoryMiB.
	MemoryMiB int
	// VCPUs is the number of virtual CPUs, 1 to MaxVCPUs.
	VCPUs int
	// Accel is accel.KVM or accel.TCG, as accel.Detect decided.
	Accel string
	// AgentSocket is where the machine binds the unix socket of the guest
	// agent's channel (a virtio-serial port under QEMU): the host connects
	// to it, the guest agent opens the port. It must not exist; the machine
	// removes it when it ends. At most 107 bytes.
	AgentSocket string
	// ConsoleLog is the file the guest's serial console is appended to; it
	// is created (0600) if missing and kept when the machine ends. QEMU
	// writes into a FIFO in WorkDir that the machine drains into it
	// (package consolelog), so it holds at most consolelog.Max bytes,
	// the newest.
	ConsoleLog string
	// RNG gives the guest a virtio-rng device fed by the host's getrandom,
	// so that its entropy pool fills at boot.
	RNG bool
	// Net gives the guest a virtio-net device, whose host end is the tap
	// device StartOptions.Tap names (a new one at each start: the same
	// Config restores a memory snapshot with a fresh tap).
	Net bool
	// WorkDir is an existing directory private to the node (never visible
	// to the guest or to other machines) for the VMM's own files: its API
	// socket and its stderr log. The machine leaves the log there.
	WorkDir string
}

// Validate checks c without starting anything: value ranges, and that the
// files it names exist (or, for the ones the machine creates, do not) and
// are of the right kind. Every error wraps ErrInvalidConfig.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c *Config) validate() error {
	if err := validateID(c.ID); err != nil {
		return err
	}
	switch {
	case c.MemoryMiB < MinMemoryMiB || c.MemoryMiB > MaxMemoryMiB:
		return fmt.Errorf("memory %d MiB out of range [%d, %d]", c.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	case c.VCPUs < 1 || c.VCPUs > MaxVCPUs:
		return fmt.Errorf("vcpus %d out of range [1, %d]", c.VCPUs, MaxVCPUs)
	case c.Accel != accel.KVM && c.Accel != accel.TCG:
		return fmt.Errorf("accel %q is neither %q nor %q", c.Accel, accel.KVM, accel.TCG)
	case c.Kernel == "" && (c.Initrd != "" || c.Cmdline != ""):
		return errors.New("an initrd or a kernel command line needs a kernel")
	}
	if c.DiskNBD {
		if fi, err := os.Stat(c.Disk); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("disk %s is not an NBD socket (%v)", c.Disk, err)
		}
	} else if err := regularFile("disk", c.Disk); err != nil {
		return err
	}
	if c.Workspace != "" {
		if err := regularFile("workspace disk", c.Workspace); err != nil {
			return err
		}
	}
	if c.Kernel != "" {
		if err := regularFile("kernel", c.Kernel); err != nil {
			return err
		}
	}
	if c.Initrd != "" {
		if err := regularFile("initrd", c.Initrd); err != nil {
			return err
		}
	}
	if err := directory("work dir", c.WorkDir); err != nil {
		return err
	}
	if err := newPath("agent socket", c.AgentSocket); err != nil {
		return err
	}
	if len(c.AgentSocket) > maxSocketPath {
		return fmt.Errorf("agent socket path %q is longer than %d bytes", c.AgentSocket, maxSocketPath)
	}
	if c.ConsoleLog == "" {
		return errors.New("console log path is empty")
	}
	if err := directory("console log's directory", filepath.Dir(c.ConsoleLog)); err != nil {
		return err
	}
	if fi, err := os.Stat(c.ConsoleLog); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("console log %s is not a regular file", c.ConsoleLog)
	}
	return nil
}

// validateID applies internal/cgroup's name rule, so that an ID is always
// a usable cgroup name and one safe path component.
func validateID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("id %q: length must be 1 to %d", id, maxIDLen)
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("id %q: only letters, digits, '_' and '-' are allowed", id)
		}
	}
	return nil
}

func regularFile(what, path string) error {
	if path == "" {
		return fmt.Errorf("%s path is empty", what)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s is not a regular file", what, path)
	}
	return nil
}

func directory(what, path string) error {
	if path == "" {
		return fmt.Errorf("%s path is empty", what)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a directory", what, path)
	}
	return nil
}

// newPath checks that path does not exist yet and that its directory does.
func newPath(what, path string) error {
	if path == "" {
		return fmt.Errorf("%s path is empty", what)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s %s already exists", what, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return directory(what+"'s directory", filepath.Dir(path))
}

// StartOptions say how a machine starts.
type StartOptions struct {
	// Paused leaves the vCPUs stopped when Start returns; Resume runs them.
	// The guest executes nothing before that.
	Paused bool
	// RestoreFrom is a memory snapshot written by Machine.SaveMemory. The
	// machine then resumes that state instead of booting: its Config must
	// describe the same machine (memory, vCPUs, accel, devices; paths may
	// differ) and its disk must hold what the saved machine's disk held
	// when the snapshot was taken, or the guest sees its disk change under
	// it. Restoring needs the same VMM build (and, under KVM, a compatible
	// CPU).
	RestoreFrom string
	// Tap is the descriptor of the tap device behind the machine's network
	// device (Config.Net); required with Net, nil without. The VMM process
	// gets a copy: the caller closes its own once Start returns.
	Tap *os.File
}

// State is what a live machine's vCPUs are doing.
type State string

const (
	// StateRunning: the vCPUs run.
	StateRunning State = "running"
	// StatePaused: the vCPUs are stopped and the guest's state is intact:
	// started paused, paused by Pause, or left paused by SaveMemory.
	// Resume runs them again.
	StatePaused State = "paused"
	// StateFailed: the VMM stopped the vCPUs because of a fault (a disk I/O
	// error, a guest panic, an emulation error). The guest is probably
	// lost; Status's Detail says which fault.
	StateFailed State = "failed"
)

// Status is a live machine's state.
type Status struct {
	State State
	// Detail is the VMM's own word for it, e.g. QEMU's "prelaunch",
	// "postmigrate" or "io-error".
	Detail string
}

// Exit is how a machine's VMM process ended.
type Exit struct {
	// Code is the exit code, -1 when a signal killed the process.
	Code int
	// Signal is the signal that killed it, 0 if it exited.
	Signal syscall.Signal
	// Requested says the exit was asked for by Stop or Kill.
	Requested bool
	// Reason is the VMM's own word for why it ended, when it said one
	// (QEMU's SHUTDOWN reasons: "guest-shutdown", "guest-reset",
	// "host-qmp-quit", "host-signal", ...), else "".
	Reason string
	// StatusUnknown says the exit status could not be read: the machine
	// was attached to (a VMM's Attach), not started, by this process, so
	// this process could not wait for it. Signal is then 0, and Code is 0
	// when the VMM announced a shutdown the guest asked for and -1
	// otherwise (a crash, unless Requested).
	StatusUnknown bool
	// Time is when the exit was noticed.
	Time time.Time
}

// Crashed reports whether the exit is a crash: not requested, and not a
// clean exit (code 0, which is how a VMM ends after a guest poweroff).
func (e Exit) Crashed() bool {
	return !e.Requested && (e.Signal != 0 || e.Code != 0)
}

func (e Exit) String() string {
	how := fmt.Sprintf("exit code %d", e.Code)
	switch {
	case e.StatusUnknown:
		how = "exit status unknown (the machine was attached, not started, by this process)"
	case e.Signal != 0:
		how = fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), e.Signal)
	}
	if e.Reason != "" {
		how += " (" + e.Reason + ")"
	}
	return how
}

// ExitError is the error of a crashed machine. It matches ErrCrashed and
// ErrExited with errors.Is.
type ExitError struct {
	Exit Exit
	// Stderr is the end of what the VMM wrote to its stderr: its last
	// words, when it had any. Internal detail: do not show it to API users.
	Stderr string
}

func (e *ExitError) Error() string {
	msg := "vmm crashed: " + e.Exit.String()
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// Is makes errors.Is(err, ErrCrashed) and errors.Is(err, ErrExited) hold.
func (e *ExitError) Is(target error) bool {
	return target == ErrCrashed || target == ErrExited
}

// Machine is one running VMM process and its guest. All methods are safe
// for concurrent use; Pause, Resume and SaveMemory are serialized. A VMM
// that stops answering never hangs a caller: each request to it ends with
// ctx (or after an implementation's default bound when ctx has none), and
// its death is an error, never a panic. Dropping a Machine does not stop
// it: the guest runs until Stop or Kill (the VMM process does not depend on
// the caller's).
type Machine interface {
	// PID is the VMM process's pid in the caller's pid namespace.
	PID() int
	// Status queries the live machine. After the VMM has exited it returns
	// an error wrapping ErrExited (and ErrCrashed after a crash) without
	// blocking.
	Status(ctx context.Context) (Status, error)
	// Pause stops the vCPUs and returns once they are stopped. Pausing a
	// paused machine is a no-op.
	Pause(ctx context.Context) error
	// Resume runs the vCPUs, after a paused start, Pause or SaveMemory.
	// Resuming a running machine is a no-op.
	Resume(ctx context.Context) error
	// SaveMemory pauses the machine (if it runs) and writes its memory and
	// device state to path, which it creates (0600) or replaces; a file at
	// path is always whole: it is written under a temporary name and
	// renamed, and with durable synced first (with its directory), so that
	// it outlives a crash of the host. It returns once the file is
	// complete, leaving the machine paused: the caller clones the disk now
	// if it wants a consistent pair, then resumes or stops the machine. If
	// ctx ends first the save is cancelled and no file is left.
	SaveMemory(ctx context.Context, path string, durable bool) error
	// Stop shuts the machine down: it asks the guest to power off (ACPI)
	// and waits up to grace, then tells the VMM to quit, then kills it.
	// A paused guest cannot react, so Stop skips the grace for it. It
	// returns once the machine has ended (Done is closed), or with ctx's
	// error if ctx ends first, after killing the VMM. Stopping an ended
	// machine returns nil.
	Stop(ctx context.Context, grace time.Duration) error
	// Kill kills the VMM process at once and returns once the machine has
	// ended and its resources are released, or ctx's error if ctx ends
	// first (the kill is still under way). Killing an ended machine
	// returns nil.
	Kill(ctx context.Context) error
	// Wait blocks until the machine has ended and everything it held (its
	// cgroup, its sockets) is released, or until ctx ends (ctx's error).
	// It returns how the VMM ended, and an *ExitError (ErrCrashed) when it
	// crashed. It may be called any number of times.
	Wait(ctx context.Context) (Exit, error)
	// Done is closed when Wait would return at once.
	Done() <-chan struct{}
}
