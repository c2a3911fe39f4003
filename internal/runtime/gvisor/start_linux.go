//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/disk"
	"warren/internal/guest"
	"warren/internal/netnsfile"
	"warren/internal/osthread"
	"warren/internal/procid"
	"warren/internal/runtime"
	"warren/internal/runtime/gvisor/gvisorinit"
)

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
	if err := inNetNS(netns, func() error { return guest.Up("lo") }); err != nil {
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
