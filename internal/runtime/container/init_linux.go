//go:build linux

package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"warren/internal/seccomp"
)

// initEnv carries the init's configuration as JSON.
const initEnv = "WARREN_CONTAINER_INIT"

// File descriptors the parent hands the init (exec.Cmd.ExtraFiles order).
const (
	fdListener = 3 // the agent's listening socket; stays open for the agent
	fdSync     = 4 // socketpair to the parent; close-on-exec
	fdAgent    = 5 // sealed memfd with the agent binary
	fdSelf     = 6 // the daemon's binary, which the init runs from; closed at once
)

type initConfig struct {
	Hostname string `json:"hostname"`
}

// MaybeInit runs the container init and never returns if this process was
// started as one; otherwise it returns at once. Call it first thing in main
// (and in TestMain of tests that start containers).
func MaybeInit() {
	if len(os.Args) == 0 || os.Args[0] != initArg0 {
		return
	}
	// Namespaces and credentials set below belong to this OS thread, and the
	// final exec must happen on it.
	goruntime.LockOSThread()
	err := initSandbox()
	// Reaching here means the setup failed: tell the parent why.
	msg := "init failed"
	if err != nil {
		msg = err.Error()
	}
	unix.Write(fdSync, []byte(msg))
	os.Exit(1)
}

// initSandbox sets up the sandbox from inside its new namespaces and execs
// the agent. It returns only on failure.
func initSandbox() error {
	unix.Close(fdSelf)
	var cfg initConfig
	if err := json.Unmarshal([]byte(os.Getenv(initEnv)), &cfg); err != nil {
		return fmt.Errorf("init config: %w", err)
	}
	root, err := recvFd(fdSync)
	if err != nil {
		return fmt.Errorf("receive root mount: %w", err)
	}
	// Nothing mounted from here on may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.MoveMount(root, "", unix.AT_FDCWD, mountpoint, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach root: %w", err)
	}
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter root: %w", err)
	}
	unix.Close(root)
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
	if err := loopbackUp(); err != nil {
		return err
	}
	// The parent has moved us into the sandbox's cgroup before sending the
	// root: a cgroup namespace made now shows that cgroup as "/".
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	if err := lockDown(); err != nil {
		return err
	}
	// Inherited fds are not close-on-exec: the agent keeps only the
	// listener. The sync socket closing at exec is the parent's signal.
	unix.CloseOnExec(fdSync)
	unix.CloseOnExec(fdAgent)
	argv := []string{"warren-agent", "--listen-fd", fmt.Sprint(fdListener), "--mode", "container"}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	err = unix.Exec(fmt.Sprintf("/proc/self/fd/%d", fdAgent), argv, env)
	return fmt.Errorf("exec agent: %w", err)
}

// lockDown drops what the sandbox must not have, in the only order that
// works: the bounding set needs CAP_SETPCAP, and seccomp needs
// no_new_privs from an unprivileged view.
func lockDown() error {
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := seccomp.Install(); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// recvFd receives one file descriptor sent with SCM_RIGHTS on fd.
func recvFd(fd int) (int, error) {
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err == nil && len(fds) == 1 {
			return fds[0], nil
		}
	}
	return -1, errors.New("no file descriptor in message")
}

// loopbackUp sets the loopback interface of the sandbox's network namespace
// up; it is the only interface a sandbox has for now.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
