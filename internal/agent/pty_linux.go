//go:build linux

package agent

import (
	"fmt"
	"os"
	"sync/atomic"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	processpb "warren/internal/agent/pb/process"
)

// A process started with StartRequest.pty runs on a pseudo-terminal, as
// envd's do: the pty's slave is its stdin, stdout, stderr and controlling
// terminal (it leads a session of its own, so its process group is still
// its pid), and the agent keeps the master. What the process writes comes
// out of the master as DataEvent.pty, through the same output hub as pipes
// (bounds, replay); input goes into the master.
//
// A pty is a tenant-controlled kernel resource: the agent holds at most
// maxPTYs masters at once. A master is closed when its process has ended
// and its output is drained (or when the agent closes), so an ended
// process holds none.
const (
	maxPTYs = 64
	// maxPTYSize bounds a pty's columns and rows.
	maxPTYSize = 1000
	// defaultCols and defaultRows size a pty whose request gives no size.
	defaultCols, defaultRows = 80, 24
	// defaultTERM is TERM of a pty process unless Init or the request set it.
	defaultTERM = "xterm-256color"
)

// ptyState is the pty side of a process that runs on one. Its master is
// also the process's stdin and stdout (see proc).
type ptyState struct {
	master *os.File
	live   *atomic.Int32 // the agent's count of open masters (Server.ptys)
}

// closed is called once the master is closed.
func (t *ptyState) closed() { t.live.Add(-1) }

// openPTY makes a pty of the requested size for a process of user uid, as
// one of the agent's maxPTYs.
func (s *Server) openPTY(req *processpb.PTY, uid uint32) (*procIO, error) {
	cols, rows := uint32(defaultCols), uint32(defaultRows)
	if size := req.GetSize(); size != nil {
		cols, rows = size.GetCols(), size.GetRows()
	}
	if err := checkPTYSize(cols, rows); err != nil {
		return nil, err
	}
	if s.ptys.Add(1) > maxPTYs {
		s.ptys.Add(-1)
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many ptys: at most %d at once in a sandbox", maxPTYs))
	}
	io := newProcIO()
	io.pty = &ptyState{live: &s.ptys}
	fail := func(op string, err error) (*procIO, error) {
		io.closeAll()
		return nil, connect.NewError(errnoCode(err), fmt.Errorf("%s: %w", op, err))
	}
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fail("open /dev/ptmx", err)
	}
	// Non-blocking, so that the master is pollable: reads and writes take
	// deadlines and a close wakes them.
	master := os.NewFile(uintptr(mfd), "/dev/ptmx")
	io.stdin, io.stdout, io.pty.master = master, master, master
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock pty", err)
	}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}); err != nil {
		return fail("set pty size", err)
	}
	sfd, err := openSlave(mfd)
	if err != nil {
		return fail("open the pty's slave", err)
	}
	io.child = [3]int{sfd, sfd, sfd}
	// The terminal belongs to its user, as login makes it, so that tools
	// that open it by name (tty's answer) may.
	if os.Geteuid() == 0 {
		if err := unix.Fchown(int(sfd), int(uid), -1); err != nil {
			return fail("chown the pty's slave", err)
		}
	}
	return io, nil
}

// openSlave opens the slave of the pty whose master is mfd: through the
// master (Linux 4.13), not by its name under /dev/pts, which the sandbox
// could have mounted over. A kernel without TIOCGPTPEER (gVisor's) opens
// it by its name, and what opens must then be a pty slave device of the
// number the master gives.
func openSlave(mfd int) (int, error) {
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno == 0 {
		return int(sfd), nil
	}
	if errno != unix.ENOTTY && errno != unix.EINVAL {
		return -1, errno
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Minor(st.Rdev) != n || unix.Major(st.Rdev) < 136 || unix.Major(st.Rdev) > 143 {
		unix.Close(fd)
		return -1, fmt.Errorf("/dev/pts/%d is not the pty's slave", n)
	}
	return fd, nil
}

func checkPTYSize(cols, rows uint32) error {
	if cols < 1 || cols > maxPTYSize || rows < 1 || rows > maxPTYSize {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size %dx%d: cols and rows must be 1 to %d", cols, rows, maxPTYSize))
	}
	return nil
}

// withTERM sets TERM to defaultTERM in env unless it is set.
func withTERM(env []string) []string {
	if envValue(env, "TERM") != "" {
		return env
	}
	return append(env, "TERM="+defaultTERM)
}

// resize sets the size of a process's pty; the kernel sends its foreground
// process group SIGWINCH.
func (p *proc) resize(size *processpb.PTY_Size) error {
	if p.pty == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no pty", p.pid))
	}
	if err := checkPTYSize(size.GetCols(), size.GetRows()); err != nil {
		return err
	}
	ws := &unix.Winsize{Col: uint16(size.GetCols()), Row: uint16(size.GetRows())}
	var ioctlErr error
	if err := p.masterControl(func(fd int) { ioctlErr = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	if ioctlErr != nil {
		return connect.NewError(errnoCode(ioctlErr), fmt.Errorf("resize pty of process %d: %w", p.pid, ioctlErr))
	}
	return nil
}

// masterControl runs f on the master's fd, without making it blocking as
// Fd would. It fails only when the master is closed: the process ended
// (FailedPrecondition).
func (p *proc) masterControl(f func(fd int)) error {
	rc, err := p.pty.master.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { f(int(fd)) })
	}
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has ended", p.pid))
	}
	return nil
}

// signalForeground sends sig to the pty's foreground process group too,
// when it is not the process's own: a shell with job control runs each
// job in a group of its own, and a signal to the shell's group alone would
// miss the job it waits for. p.mu must be held, with the process not yet
// reaped.
func (p *proc) signalForeground(sig unix.Signal) {
	if p.pty == nil {
		return
	}
	pgrp := 0
	_ = p.masterControl(func(fd int) { pgrp, _ = unix.IoctlGetInt(fd, unix.TIOCGPGRP) })
	if pgrp > 1 && pgrp != int(p.pid) {
		_ = unix.Kill(-pgrp, sig)
	}
}
