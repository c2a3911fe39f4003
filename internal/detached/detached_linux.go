// Package detached starts the helper processes a node runs beside its
// daemon (the lease watchdog, the block server): this same binary, with a
// hidden command, in a session of its own so that it outlives the daemon,
// logging to a file, and started only once it says it is ready. It does
// not decide when a helper should run or stop; its callers do.
package detached

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// MaxLog bounds a helper's log: Start empties a log grown past it.
const MaxLog = 1 << 20

// Process is a started helper.
type Process struct {
	Pid int
	// Exited is closed once the helper has exited.
	Exited <-chan struct{}
}

// Start runs `/proc/self/exe args… --ready-fd 3` in a new session, in /,
// with stderr appended to logPath, and returns once the helper wrote a
// byte to descriptor 3 (Ready), or fails if it exits or wait passes
// first (killing it). /proc/self/exe is this binary even if an upgrade
// replaced its file. start, when not nil, starts the command in place of
// its Start method (to start it with more than a new session).
func Start(args []string, logPath string, wait time.Duration, start func(*exec.Cmd) error) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	defer logf.Close()
	if fi, err := logf.Stat(); err == nil && fi.Size() > MaxLog {
		logf.Truncate(0) // appends start again at 0
	}
	r, ready, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe", append(args, "--ready-fd", "3")...)
	cmd.Args[0], cmd.Dir = os.Args[0], "/"
	cmd.Stderr = logf // stdin and stdout: /dev/null
	cmd.ExtraFiles = []*os.File{ready}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if start == nil {
		start = (*exec.Cmd).Start
	}
	err = start(cmd)
	ready.Close()
	if err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	r.SetReadDeadline(time.Now().Add(wait))
	if _, err := r.Read(make([]byte, 1)); err != nil {
		cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("it did not start (%v; its log is %s): %s", err, logPath, cmd.ProcessState)
	}
	return &Process{Pid: cmd.Process.Pid, Exited: exited}, nil
}

// Ready is the helper's side: the function that tells Start it is ready,
// through descriptor fd (none when fd is negative).
func Ready(fd int) func() {
	if fd < 0 {
		return nil
	}
	f := os.NewFile(uintptr(fd), "ready")
	return func() {
		f.Write([]byte{1}) // Start sees EOF instead when this fails
		f.Close()
	}
}
