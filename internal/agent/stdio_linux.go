//go:build linux

package agent

import (
	"fmt"
	"os"
	"slices"
	"syscall"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// procIO is the stdio of a process being started: the descriptors its
// child gets (closed here once it is forked) and the ends the agent keeps.
// The child's are plain descriptors, never registered with Go's poller:
// the agent only passes them on.
type procIO struct {
	child                 [3]int   // the child's 0, 1 and 2; -1 until opened
	stdin, stdout, stderr *os.File // kept; stdin nil when the child takes no input; for a pty, stdin and stdout are its master, stderr is nil
	pty                   *ptyState
}

func newProcIO() *procIO { return &procIO{child: [3]int{-1, -1, -1}} }

// closeChild closes the child's descriptors in the agent (for a pty, the
// one slave, given thrice, once).
func (io *procIO) closeChild() {
	for i, fd := range io.child {
		if fd >= 0 && !slices.Contains(io.child[:i], fd) {
			unix.Close(fd)
		}
	}
	io.child = [3]int{-1, -1, -1}
}

// closeAll closes every end; the process was not started.
func (io *procIO) closeAll() {
	io.closeChild()
	for _, f := range []*os.File{io.stdin, io.stdout, io.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if io.pty != nil {
		io.pty.closed()
	}
}

// sysProcAttr is how the child starts: in a process group of its own, or
// for a pty in a session of its own with the slave (its fd 0) as its
// controlling terminal.
func (io *procIO) sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	if io.pty != nil {
		return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred}
	}
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// childFDs are the child's 0, 1 and 2 for syscall.ProcAttr.
func (io *procIO) childFDs() []uintptr {
	return []uintptr{uintptr(io.child[0]), uintptr(io.child[1]), uintptr(io.child[2])}
}

// pipes makes the stdio of a process without a pty: a pipe each. When the
// process takes no input (stdin false), the agent closes its end of the
// stdin pipe at once: the process reads end of file. (Not the sandbox's
// /dev/null: that is the tenant's file, which may be anything by now.)
func pipes(stdin bool) (*procIO, error) {
	io := newProcIO()
	fail := func(op string, err error) (*procIO, error) {
		io.closeAll()
		return nil, connect.NewError(errnoCode(err), fmt.Errorf("%s: %w", op, err))
	}
	var err error
	if stdin {
		if io.child[0], io.stdin, err = pipe("|0", true); err != nil {
			return fail("make the stdin pipe", err)
		}
	} else {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fail("make the stdin pipe", err)
		}
		unix.Close(p[1])
		io.child[0] = p[0]
	}
	if io.child[1], io.stdout, err = pipe("|1", false); err != nil {
		return fail("make the stdout pipe", err)
	}
	if io.child[2], io.stderr, err = pipe("|2", false); err != nil {
		return fail("make the stderr pipe", err)
	}
	return io, nil
}

// pipe makes a pipe between a child and the agent, which reads it or, when
// agentWrites, writes it. The agent's end is non-blocking, so that
// os.NewFile puts it on Go's poller; the child's stays blocking, as
// programs expect of their stdio.
func pipe(name string, agentWrites bool) (child int, agent *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	child, end := p[1], p[0]
	if agentWrites {
		child, end = p[0], p[1]
	}
	if err := unix.SetNonblock(end, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, err
	}
	return child, os.NewFile(uintptr(end), name), nil
}
