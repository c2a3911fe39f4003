// Package runtime defines what a sandbox runtime must do for the sandbox
// manager: boot a sandbox from a disk image with its guest agent as PID 1,
// link it to its network, hand back a way to reach the agent, survive a
// daemon restart, and tear everything down without leaks. Each runtime lives in its own package
// (runtime/container, runtime/vm). This package does no I/O.
package runtime

import (
	"context"
	"errors"
	"os"

	"warren/internal/agentconn"
)

// ErrGone means a sandbox that an earlier daemon process started is no longer
// alive; Adopt has cleaned up what it left.
var ErrGone = errors.New("sandbox is gone")

// Limits are the resources one sandbox may use.
type Limits struct {
	CPUs        float64 // cores; 0 = unlimited
	MemoryBytes int64   // 0 = unlimited
	Pids        int64   // 0 = unlimited
}

// The agent's reserve: what a container sandbox's agent holds of the node
// beside the sandbox's own Limits, which its processes get in full (the
// container runtime keeps them in a subgroup; see cgroup.Group.Work). The
// node's admission counts it.
const (
	AgentMemoryMB = 64
	AgentPids     = 64
)

// SentryMemoryMB is what a gVisor sandbox's Sentry (its user-space kernel,
// package runtime/gvisor) holds of the node beside the sandbox's memory and
// the agent's reserve: its own heap and page tables, and the cache of the
// sandbox's disk. The node's admission counts it.
const SentryMemoryMB = 64

// Spec is everything a runtime needs to start one sandbox.
type Spec struct {
	ID string
	// Disk is the sandbox's own root disk image (raw ext4), already cloned
	// from its template. The runtime never deletes it.
	Disk string
	// DiskNBD says Disk is a unix socket that serves the root disk over NBD
	// (an always-on disk's, docs/ALWAYS-ON.md), not an image. Only the vm
	// runtime takes it.
	DiskNBD bool
	// Workspace is the sandbox's workspace disk image (raw ext4), mounted at
	// /workspace, or "" for none. The runtime never deletes it.
	Workspace string
	Hostname  string
	Limits    Limits
	// Dir is a directory private to the node (never visible inside the
	// sandbox) for the runtime's sockets and logs; it exists and is empty.
	Dir string
	// Network links the sandbox to its router, or is nil: the sandbox then
	// has loopback only.
	Network Network
	// Memory is a memory image to start from instead of booting: a Pauser's
	// memory file, saved by a sandbox whose Limits and Network (present or
	// not) were this one's, whose disk Disk is a clone of, taken after the
	// save. The sandbox wakes as that one was, with its identity: the
	// caller gives it its own through the agent (Init's machine ID, clock
	// and random seed) before anything else runs in it. The runtime only
	// reads it. The vm and gvisor runtimes take it ("" elsewhere).
	Memory string
}

// Network is a sandbox's router (package network), as a runtime links the
// sandbox to it. The sandbox's side is package guest's: the runtime sees
// that the sandbox's init writes its files, and a VM's guest configures
// its interface.
type Network interface {
	// PlugNetNS links the network namespace at path (a container's) to the
	// router: guest.Iface appears there, addressed and routed.
	PlugNetNS(path string) error
	// Tap makes the router's tap device for a VMM and returns its
	// descriptor (a new one each call: a resumed VM gets a new device).
	Tap() (*os.File, error)
}

// Runtime starts sandboxes of one kind. Its methods may be called
// concurrently for different sandboxes.
type Runtime interface {
	// Name is the runtime's name in the API: "container" or "vm".
	Name() string
	// Isolation describes the boundary honestly, e.g.
	// "container (shared host kernel)".
	Isolation() string
	// Available returns nil if this node can run the runtime, else an error
	// saying why not.
	Available() error
	// Start boots a sandbox and returns once its guest agent is listening
	// (the caller still waits for it to answer). On error nothing is left
	// behind.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Adopt reattaches to a sandbox started by an earlier daemon process from
	// the state its Instance reported. If the sandbox is no longer alive it
	// cleans up what it left and returns ErrGone.
	Adopt(ctx context.Context, spec Spec, state []byte) (Instance, error)
	// Sweep removes what sandboxes of this runtime left on the node
	// (cgroups, processes) for every sandbox in known that is not in keep.
	// Of a sandbox outside known it touches only what this data directory
	// records of it (a runtime's own state there, such as runsc's): another
	// warren server on the same host, with another data directory, or
	// another node on this host it moved to, may own the rest. It runs once
	// at daemon start, after every known sandbox was adopted or cleaned.
	Sweep(ctx context.Context, known, keep map[string]bool) error
}

// Instance is one running sandbox.
type Instance interface {
	// State is what Adopt needs after a daemon restart; the manager persists
	// it with the sandbox.
	State() []byte
	// AgentSocket is the host path of the unix socket of its guest agent's
	// channel: the agent's own listening socket for a container, the
	// virtio-serial port's socket for a VM. Reach the agent through Dial,
	// which knows how to speak over it.
	AgentSocket() string
	// Dial returns a connection to the guest agent (no I/O until its first
	// call). Closing it drops its idle connections; a later call connects
	// again. A runtime whose channel carries one session (a VM's
	// virtio-serial port) returns the same Conn each time.
	Dial() *agentconn.Conn
	// Done is closed when the sandbox's init (the agent) has exited, whether
	// asked to or not.
	Done() <-chan struct{}
	// Quiesce readies the filesystem mounted at path in the sandbox ("/" or
	// "/workspace") for a clone of its disk taken before resume is called:
	// the clone holds everything written before Quiesce, as a whole
	// filesystem, while the sandbox runs on. A container's is a sync, and
	// the sandbox never waits: its clone is the disk as a power cut after
	// the sync would leave it, which ext4's journal makes whole when it is
	// next mounted. A VM's is a Freeze in the guest (the host cannot flush
	// the guest's cache).
	Quiesce(ctx context.Context, path string) (resume func() error, err error)
	// Freeze flushes the filesystem mounted at path and blocks writes to it
	// until thaw is called: a clone taken meanwhile holds everything the
	// sandbox wrote, for a final snapshot before it stops (a move).
	// Processes keep running. The runtime decides who freezes: the host for
	// a container (the sandbox may not), the guest agent for a VM.
	Freeze(ctx context.Context, path string) (thaw func() error, err error)
	// Stop kills every process of the sandbox and releases everything the
	// runtime holds for it (cgroup, mounts, loop device, sockets). It is
	// idempotent and safe to call after Done.
	Stop(ctx context.Context) error
}

// Pauser is an Instance that can pause with its memory: Pause stops the
// sandbox's processes where they are, saves the whole machine (memory and
// device state) to an image in the sandbox's private directory, of its
// runtime's Imager format, syncs its disks, and ends the process that ran
// it, so a paused sandbox holds no CPU and no guest memory; Resume starts
// it again from that image on the same node, with the same disk, and
// returns once its agent answers. A runtime may keep a paused sandbox
// frozen, its process alive with its memory, for a while after the save
// (gvisor's Options.SpillAfter), and Resume then runs it on in place.
// Processes in the sandbox keep their state across the pair; open agent
// sessions (streams, waits) are cut by Pause.
//
// Image is the image's path while the sandbox is paused ("" otherwise): a
// sandbox started from a copy of it (Spec.Memory) and clones of the disks
// taken after Pause, on any node whose runtime has the same ImageFormat,
// runs on from where this one paused.
//
// While paused, Done does not fire (the process is gone on purpose) and
// Stop removes the image. Pause of a paused instance and Resume of a
// running one are no-ops. If Pause fails the sandbox still runs. If Resume
// fails before the guest ran again it stays paused and may be resumed
// again; if the guest ran but then failed, the instance ends (Done fires).
// The vm and gvisor runtimes implement it.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	Image() string
}

// Clocked is an Instance with a kernel, and so a clock and a random
// generator, of its own (a VM's), whose clock stands still while its
// machine is paused or held: the manager steps it to the host's (the
// agent's Init) when it boots and whenever it runs again, and reseeds the
// generator of one started from a memory image. OwnClock says whether it
// is one. (gVisor's kernel takes both from the host's.)
type Clocked interface {
	OwnClock() bool
}

// Restorer is a Runtime whose sandboxes start from memory images
// (Spec.Memory). ImageFormat names what restores its images: its own build
// and the host's CPU features. An image restores only where the format is
// the same; "" is no format, which restores nothing saved elsewhere.
type Restorer interface {
	ImageFormat() string
}

// Imager is a Restorer that saves memory images of its own. SaveImage
// saves running instance inst's memory to path, as Pause would, and ends
// its process: inst's disk then holds what a sandbox started from the
// image must have a clone of, and inst is left to Stop. The image at path
// is a file (the vm runtime's) or a directory (the gvisor runtime's):
// callers remove it with os.RemoveAll, as they do a Forker's. The vm and
// gvisor runtimes implement it.
type Imager interface {
	Restorer
	SaveImage(ctx context.Context, inst Instance, path string) error
}

// Forker is an Instance that forks with its memory (the vm runtime's):
// Hold saves the running machine's memory to path and keeps its vCPUs
// stopped until resume is called, so that a clone of its disk taken
// meanwhile is the disk that memory expects. Sandboxes started from the
// file (Spec.Memory) and clones of that disk are the machine as it was,
// its processes running on in each. Calls to the instance wait for resume.
type Forker interface {
	Hold(ctx context.Context, path string) (resume func() error, err error)
}

// Explainer is an Instance that can say why it ended on its own (after Done
// fired without Stop), for the sandbox's record: e.g. that its VMM crashed.
// "" when it cannot tell.
type Explainer interface {
	ExitReason() string
}

// Accel is the accelerator rt runs its sandboxes under ("kvm", "tcg": the
// vm runtime's), or "" for a runtime that has none.
func Accel(rt Runtime) string {
	if a, ok := rt.(interface{ Accel() string }); ok {
		return a.Accel()
	}
	return ""
}
