//go:build linux

// Package spawner starts the container runtime's sandbox inits from a
// small helper process instead of from the daemon.
//
// An init starts in a new user namespace. Go starts such a child with a
// full fork of its parent, since a vfork could not wait for the uid map
// to be written before the exec. From the daemon, whose heap is tens of
// MiB, each start copied its page tables, and then took a copy-on-write
// fault on each page it wrote. That was a quarter of the CPU of starting
// 100 sandboxes at once (docs/BENCHMARKS.md, "Snapshots").
//
// The helper is the guest agent binary, executed from the runtime's sealed
// memfd under argv[0] Arg0, with a heap of a few MiB. It runs as root on
// the host, takes requests from the daemon only (a socketpair it inherits),
// reaps the inits it starts, and exits when the daemon's end closes. The
// inits it started live on (as they do when the daemon exits).
//
// Each child is cloned from a thread of its own, which first takes the
// child's scheduling class and joins the cgroup the daemon sent the tasks
// files of: the child is born there, and the thread ends before the
// spawner answers.
package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/osthread"
)

// Arg0 is argv[0] the runtime starts the agent binary with to make it the
// spawner.
const Arg0 = "warren-container-spawner"

// fdConn is the spawner's end of its socketpair with the daemon.
const fdConn = 3

// Request is one init to start.
type Request struct {
	// Path and Args are what to execute; Path is resolved in the child,
	// after its descriptors are in place (so /proc/self/fd/N names one of
	// the files the request carries).
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// HostID is the first host uid and gid of the child's range, and Size
	// the range's length: uid and gid 0 in the child's new user namespace
	// is HostID.
	HostID int `json:"host_id"`
	Size   int `json:"size"`
	// Cloneflags are the child's new namespaces; they must include
	// CLONE_NEWUSER.
	Cloneflags uintptr `json:"cloneflags"`
	// Idle starts the child in scheduling class SCHED_IDLE.
	Idle bool `json:"idle"`
	// Join is how many of the request's last files are tasks files of the
	// cgroup the child is born in (Spawn's join); they are not the child's.
	Join int `json:"join"`
}

// answerTimeout bounds the wait for the spawner's answer.
const answerTimeout = 30 * time.Second

// maxFiles bounds the files one request carries: its stdout and stderr,
// the child's extra files and the tasks files of its cgroup (one per
// cgroup v1 mount).
const maxFiles = 16

// reply is the spawner's answer; on success a pidfd of the child comes
// with it.
type reply struct {
	Pid   int    `json:"pid"`
	Error string `json:"error,omitempty"`
}

// Started reports whether this process is the spawner; it must then call
// Main.
func Started() bool { return len(os.Args) > 0 && os.Args[0] == Arg0 }

// Main serves the daemon's requests until it goes, then returns the exit
// status.
func Main() int {
	unix.CloseOnExec(fdConn)
	unix.Close(fdConn + 1) // the binary it was executed from
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace((2+maxFiles)*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fdConn, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the daemon closed its end, or went
		}
		fds, err := rights(oob[:oobn])
		if err != nil || len(fds) < 2 {
			closeFds(fds)
			continue // nowhere to answer
		}
		var req Request
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			answer(fds[0], reply{Error: fmt.Sprintf("bad request: %v", err)}, -1)
			closeFds(fds)
			continue
		}
		go serve(req, fds[0], fds[1], fds[2:])
	}
}

// serve starts one child, answers on replyFd, and reaps the child.
func serve(req Request, replyFd, out int, files []int) {
	defer unix.Close(replyFd)
	if req.Join < 0 || req.Join > len(files) {
		closeFds(append(files, out))
		answer(replyFd, reply{Error: fmt.Sprintf("bad request: %d cgroup files of %d", req.Join, len(files))}, -1)
		return
	}
	extra, join := files[:len(files)-req.Join], files[len(files)-req.Join:]
	defer closeFds(join)
	outFile := os.NewFile(uintptr(out), "out")
	extraFiles := make([]*os.File, len(extra))
	for i, fd := range extra {
		extraFiles[i] = os.NewFile(uintptr(fd), fmt.Sprintf("extra-%d", i))
	}
	pidfd := -1
	cmd := &exec.Cmd{
		Path: req.Path, Args: req.Args, Env: req.Env,
		Stdout: outFile, Stderr: outFile, ExtraFiles: extraFiles,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 req.Cloneflags,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.HostID, Size: req.Size}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.HostID, Size: req.Size}},
			GidMappingsEnableSetgroups: true,
			// Root of the new user namespace: without it the child keeps
			// host uid 0, which is unmapped there, and exec drops every
			// capability it has there.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:     true,
			PidFD:      &pidfd,
		},
	}
	// The child is born in the scheduling class and the cgroups of the
	// thread that clones it: a thread of its own, which ends after. The
	// answer waits for its end: until then it is in the child's cgroup,
	// where the daemon, killing the group at once, would find the spawner.
	var err error
	tid := 0
	osthread.Throwaway(func() {
		tid = unix.Gettid()
		err = startFrom(cmd, req.Idle, join)
	})
	if len(join) > 0 {
		awaitThreadEnd(tid)
	}
	outFile.Close()
	for _, f := range extraFiles {
		f.Close()
	}
	if err == nil && pidfd < 0 {
		cmd.Process.Kill()
		err = errors.New("no pidfd of the child (Linux 5.3 or later is needed)")
	}
	if err != nil {
		answer(replyFd, reply{Error: err.Error()}, -1)
		if cmd.Process != nil {
			cmd.Wait()
		}
		return
	}
	answer(replyFd, reply{Pid: cmd.Process.Pid}, pidfd)
	unix.Close(pidfd)
	cmd.Wait()
}

// startFrom starts cmd from the calling thread, which it first puts in
// the idle class when idle and in the cgroup whose tasks files are join.
// Moving itself, the thread takes no host-wide lock, where moving the
// child after its start would (on cgroup v1, an RCU grace period).
func startFrom(cmd *exec.Cmd, idle bool, join []int) error {
	if idle {
		if err := SetIdleClass(0, true); err != nil {
			return fmt.Errorf("idle class: %w", err)
		}
	}
	for _, fd := range join {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return fmt.Errorf("join the child's cgroup: %w", err)
		}
	}
	return cmd.Start()
}

// threadEndWait bounds the wait for a thread of the spawner to end.
const threadEndWait = time.Second

// awaitThreadEnd waits until the spawner's thread tid has ended.
func awaitThreadEnd(tid int) {
	ctx, cancel := context.WithTimeout(context.Background(), threadEndWait)
	defer cancel()
	pid := unix.Getpid()
	backoff.Poll(ctx, backoff.Backoff{Base: 20 * time.Microsecond, Max: time.Millisecond}, func() (bool, error) {
		return unix.Tgkill(pid, tid, 0) == unix.ESRCH, nil
	})
}

func answer(fd int, r reply, pidfd int) {
	b, _ := json.Marshal(r)
	var oob []byte
	if pidfd >= 0 {
		oob = unix.UnixRights(pidfd)
	}
	unix.Sendmsg(fd, b, oob, nil, 0)
}

// rights returns the descriptors of the SCM_RIGHTS messages in oob.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Client is the daemon's side: it starts the spawner and sends it
// requests. It is safe for concurrent use.
type Client struct {
	binary *os.File // the agent binary, executed as the spawner

	mu     sync.Mutex
	conn   *os.File      // the daemon's end of the socketpair; nil when closed
	exited chan struct{} // closed when the current spawner has exited
}

// NewClient returns a Client that runs binary (an open executable, such as
// the runtime's sealed memfd of the agent) as the spawner, started at the
// first Spawn and again whenever it has gone.
func NewClient(binary *os.File) *Client { return &Client{binary: binary} }

// start starts the spawner; c.mu is held.
func (c *Client) start() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spawner socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-child")
	defer theirs.Close()
	cmd := &exec.Cmd{
		Path:       fmt.Sprintf("/proc/self/fd/%d", fdConn+1),
		Args:       []string{Arg0},
		ExtraFiles: []*os.File{theirs, c.binary}, // fdConn, fdConn+1 (closed on exec)
	}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return fmt.Errorf("start spawner: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	c.conn, c.exited = ours, exited
	return nil
}

// Spawn starts req's child with out as its stdout and stderr and extra as
// its descriptors 3 and on, born in the cgroup whose tasks files are join
// (cgroup.Group.Tasks; none: the spawner's). It returns the child's pid and
// a pidfd of it, which the caller owns.
func (c *Client) Spawn(req Request, out *os.File, extra, join []*os.File) (pid, pidfd int, err error) {
	if req.Cloneflags&unix.CLONE_NEWUSER == 0 {
		return 0, -1, errors.New("spawn: the child needs a user namespace of its own")
	}
	if n := 1 + len(extra) + len(join); n > maxFiles {
		return 0, -1, fmt.Errorf("spawn: %d files, at most %d", n, maxFiles)
	}
	req.Join = len(join)
	b, err := json.Marshal(req)
	if err != nil {
		return 0, -1, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, -1, fmt.Errorf("spawn: socketpair: %w", err)
	}
	answers, theirs := os.NewFile(uintptr(fds[0]), "spawn-reply"), fds[1]
	defer answers.Close()
	pass := []int{theirs, int(out.Fd())}
	for _, f := range slices.Concat(extra, join) {
		pass = append(pass, int(f.Fd()))
	}
	err = c.send(b, unix.UnixRights(pass...))
	unix.Close(theirs)
	goruntime.KeepAlive(out)
	goruntime.KeepAlive(extra)
	goruntime.KeepAlive(join)
	if err != nil {
		return 0, -1, err
	}
	// A spawner that hangs must not hang the create.
	tv := unix.NsecToTimeval(answerTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(int(answers.Fd()), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, -1, fmt.Errorf("spawn: %w", err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(answers.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return 0, -1, fmt.Errorf("spawn: no answer from the spawner (%v)", err)
	}
	got, _ := rights(oob[:oobn])
	var r reply
	err = json.Unmarshal(buf[:n], &r)
	switch {
	case err != nil:
	case r.Error != "":
		err = errors.New(r.Error)
	case r.Pid <= 0 || len(got) != 1:
		err = fmt.Errorf("pid %d with %d pidfds", r.Pid, len(got))
	default:
		return r.Pid, got[0], nil
	}
	closeFds(got)
	return 0, -1, fmt.Errorf("spawn: %w", err)
}

// send sends one request, starting the spawner first if it is not running.
func (c *Client) send(b, oob []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		select {
		case <-c.exited:
			c.conn.Close()
			c.conn = nil
		default:
		}
	}
	if c.conn == nil {
		if err := c.start(); err != nil {
			return err
		}
	}
	if err := unix.Sendmsg(int(c.conn.Fd()), b, oob, nil, 0); err != nil {
		return fmt.Errorf("spawn: send to the spawner: %w", err)
	}
	return nil
}

// Close stops the spawner (its children live on) and waits for it to exit.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	<-c.exited
	c.conn = nil
	return err
}

// SetIdleClass puts thread tid (0: the calling thread) in scheduling class
// SCHED_IDLE, or back in SCHED_OTHER.
func SetIdleClass(tid int, idle bool) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 0} // SCHED_OTHER
	if idle {
		attr.Policy = unix.SCHED_IDLE
	}
	return unix.SchedSetAttr(tid, &attr, 0)
}
