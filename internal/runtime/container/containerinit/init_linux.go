//go:build linux

// Package containerinit is the half of the container runtime that runs
// inside a new sandbox: the guest agent binary, started by the runtime in
// fresh namespaces, calls Setup before it serves; it attaches the sandbox's root,
// builds /proc, /sys and /dev, pivots into the disk, drops privileges and
// installs seccomp, and then returns so the same process goes on as the
// agent (PID 1). Doing the setup in the agent itself saves a second exec and
// Go start-up per sandbox.
//
// It is imported by the agent, so it stays small: x/sys and internal/seccomp.
// It is not for anything that runs on the host side (that is package
// container).
package containerinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"warren/internal/guest"
	"warren/internal/seccomp"
)

// Arg0 is argv[0] the runtime starts the agent with to ask for the setup.
const Arg0 = "warren-container-init"

// Mountpoint is where each sandbox's init attaches its root, in its own
// mount namespace only, before pivoting into it: one empty directory for all
// sandboxes. It must be reachable by the init's unprivileged host uid (so
// not inside the 0700 data directory); it never holds anything on the host.
const Mountpoint = "/run/warren/rootfs"

// File descriptors the runtime hands the init (exec.Cmd.ExtraFiles order).
const (
	FdListener = 3 // the agent's listening socket; the agent serves on it
	FdSync     = 4 // socketpair to the runtime: Config and the root mount come in, an error or EOF goes out
	FdSelf     = 5 // the agent binary (a sealed memfd) the init was executed from; closed at once
	FdClaim    = 6 // the host-wide claim of the sandbox's uid range (package hostclaim): held for the init's life, never inherited
)

// Config is what the runtime tells the init, as JSON in the message that
// carries the root mount.
type Config struct {
	Hostname string `json:"hostname"`
	// Workspace says a second mount follows the root's in the same message:
	// the workspace disk, mounted at /workspace.
	Workspace bool `json:"workspace,omitempty"`
	// Network says the runtime linked the sandbox to its router: the
	// sandbox's /etc/hosts and /etc/resolv.conf are written for it.
	Network bool `json:"network,omitempty"`
	// Work is how many tasks files of the cgroup's work subgroup follow the
	// mounts (cgroup.Group.Work): Setup's joinWork gets them.
	Work int `json:"work,omitempty"`
	// CgroupNamespaced says the init was born in its cgroup with a cgroup
	// namespace rooted there (cgroup v1). Otherwise the runtime moved it
	// into its cgroup, and Setup makes the namespace.
	CgroupNamespaced bool `json:"cgroup_namespaced,omitempty"`
}

// maxWork bounds Config.Work: one tasks file per controller of a work
// subgroup.
const maxWork = 2

// WorkspaceDir is where the workspace disk is mounted in the sandbox.
const WorkspaceDir = "workspace"

// Started reports whether this process was started by the container runtime
// as a sandbox's init; it must then call Setup before it serves.
func Started() bool { return len(os.Args) > 0 && os.Args[0] == Arg0 }

// Early does the part of the setup that goes over every thread of the
// process and needs nothing from the runtime: it shrinks the capability
// bounding set, one capability and one signal to each thread at a time.
// The agent calls it first thing in main, while the Go runtime has few
// threads (later ones inherit the set from the thread that makes them),
// before Setup. On failure it reports the error to the runtime and exits.
func Early() {
	if err := shrinkBoundingSet(); err != nil {
		unix.Write(FdSync, []byte(err.Error()))
		os.Exit(1)
	}
}

// Setup sets the sandbox up from inside its new namespaces and returns when
// it is ready for the agent to serve. joinWork gets the work subgroup's
// tasks files, when the runtime sent them, and must move the thread the
// agent starts processes from into it; Setup closes them after. On failure
// it reports the error to the runtime and exits.
func Setup(joinWork func(tasks []int) error) {
	unix.Close(FdSelf)
	unix.CloseOnExec(FdClaim)
	if err := setup(joinWork); err != nil {
		unix.Write(FdSync, []byte(err.Error()))
		os.Exit(1)
	}
	// EOF on the sync socket tells the runtime the sandbox is set up.
	unix.Close(FdSync)
}

// setup builds the sandbox from inside its new namespaces.
func setup(joinWork func(tasks []int) error) error {
	// Work that needs neither the root nor the cgroup is done before the
	// root arrives, which for a warm init is before any sandbox waits for
	// it (as is Early's). Loopback belongs to the sandbox's own network
	// namespace; bringing it up takes the kernel's global network lock,
	// better taken now than while a create waits.
	if err := guest.Up("lo"); err != nil {
		return err
	}
	msg, fds, err := recvFds(FdSync)
	if err != nil {
		return fmt.Errorf("receive root mount: %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(msg, &cfg); err != nil {
		return fmt.Errorf("init config: %w", err)
	}
	mounts := 1
	if cfg.Workspace {
		mounts++
	}
	if cfg.Work < 0 || cfg.Work > maxWork || len(fds) != mounts+cfg.Work {
		return fmt.Errorf("init config: workspace %v and %d work files with %d descriptors", cfg.Workspace, cfg.Work, len(fds))
	}
	root, work := fds[0], fds[mounts:]
	defer func() {
		for _, fd := range work {
			unix.Close(fd)
		}
	}()
	// Nothing mounted from here on may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.MoveMount(root, "", unix.AT_FDCWD, Mountpoint, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach root: %w", err)
	}
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter root: %w", err)
	}
	unix.Close(root)
	if cfg.Workspace {
		if err := ensureDir(WorkspaceDir, 0o755); err != nil {
			return err
		}
		if err := unix.MoveMount(fds[1], "", unix.AT_FDCWD, WorkspaceDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach workspace: %w", err)
		}
		unix.Close(fds[1])
	}
	if err := mountSystem(); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is stacked under the new one; detach it so nothing of the
	// host's filesystem stays reachable.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	if cfg.Network {
		if err := guest.WriteFiles("/", cfg.Hostname); err != nil {
			return fmt.Errorf("network files: %w", err)
		}
	}
	// Namespaces, capabilities and no_new_privs belong to each thread, and
	// the agent forks from any of its threads, so each step runs on every
	// thread: each is a signal to each thread, but for no_new_privs, which
	// the seccomp filter's TSYNC carries to every thread. An init not born
	// in its cgroup namespace was moved into the sandbox's cgroup before
	// the root came: a cgroup namespace made now shows that cgroup as "/".
	if !cfg.CgroupNamespaced {
		if err := allThreads(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP, 0, 0); err != nil {
			return fmt.Errorf("cgroup namespace: %w", err)
		}
	}
	if err := mountCgroups(); err != nil {
		return err
	}
	if len(work) > 0 {
		if err := joinWork(work); err != nil {
			return err
		}
	}
	if err := limitCapabilities(); err != nil {
		return err
	}
	// Last: the filter forbids much of the above. TSYNC applies it, and
	// no_new_privs, to every thread.
	if err := seccomp.Install(); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// allThreads makes the syscall on every OS thread of the process.
func allThreads(trap, a1, a2, a3 uintptr) error {
	if _, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}

// recvFds receives a message with file descriptors (SCM_RIGHTS) on fd: the
// root mount, the workspace mount if any, and the work subgroup's tasks
// files if any. An empty message means the runtime went away (its process
// ended).
func recvFds(fd int) ([]byte, []int, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace((2+maxWork)*4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, nil, err
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err == nil && len(fds) >= 1 {
			return buf[:n], fds, nil
		}
	}
	return nil, nil, errors.New("no root mount in message (the runtime went away)")
}
