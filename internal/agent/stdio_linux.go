//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"connectrpc.com/connect"
)

// procIO is the stdio of a process being started: the ends its child gets
// (closed here once it is forked) and the ends the agent keeps.
type procIO struct {
	child                 [3]*os.File // the child's 0, 1 and 2
	stdin, stdout, stderr *os.File    // kept; for a pty, stdin and stdout are its master, stderr is nil
	pty                   *ptyState
}

// closeChild closes the child's ends in the agent (for a pty, the one
// slave thrice: closing a closed file does nothing).
func (io *procIO) closeChild() {
	for _, f := range io.child {
		if f != nil {
			f.Close()
		}
	}
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
	return []uintptr{io.child[0].Fd(), io.child[1].Fd(), io.child[2].Fd()}
}

// pipes makes the stdio of a process without a pty: a pipe each.
func pipes() (*procIO, error) {
	io := &procIO{}
	var errs [3]error
	io.child[0], io.stdin, errs[0] = os.Pipe()
	io.stdout, io.child[1], errs[1] = os.Pipe()
	io.stderr, io.child[2], errs[2] = os.Pipe()
	if err := errors.Join(errs[:]...); err != nil {
		io.closeAll()
		return nil, connect.NewError(errnoCode(err), fmt.Errorf("make pipes: %w", err))
	}
	return io, nil
}
