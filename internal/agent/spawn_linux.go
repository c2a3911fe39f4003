//go:build linux

package agent

import (
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// JoinWork makes every process the agent starts from now on begin in the
// sandbox's work subgroup (cgroup.Group.Work), whose tasks files it gets
// open for writing: one thread of the agent, locked and kept for it, moves
// into the subgroup, and every fork happens on that thread (a child is
// born in its forking thread's cgroups). The rest of the agent stays in
// the sandbox's group, whose limits leave it a reserve the sandbox's
// processes cannot take, and the OOM killer of the subgroup only sees
// those processes (it skips the non-leader thread). Call it once, before
// Serve. The files may be closed once it returns.
func (s *Server) JoinWork(tasks []int) error {
	spawn := make(chan func())
	joined := make(chan error)
	go func() {
		// Never unlocked: should the move fail half-way, the goroutine ends
		// and the runtime ends the thread with it.
		runtime.LockOSThread()
		// "0" is the writing thread: a thread that moves itself takes no
		// host-wide lock, where moving another task on cgroup v1 waits for
		// an RCU grace period.
		for _, fd := range tasks {
			if _, err := unix.Write(fd, []byte("0")); err != nil {
				joined <- fmt.Errorf("join the sandbox's work cgroup: %w", err)
				return
			}
		}
		joined <- nil
		for f := range spawn {
			f()
		}
	}()
	if err := <-joined; err != nil {
		return err
	}
	s.spawn = spawn
	return nil
}

// forkExec starts a process: on the spawning thread after JoinWork.
func (s *Server) forkExec(bin string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	if s.spawn == nil {
		return syscall.ForkExec(bin, argv, attr)
	}
	done := make(chan struct{})
	s.spawn <- func() {
		pid, err = syscall.ForkExec(bin, argv, attr)
		close(done)
	}
	<-done
	return pid, err
}
