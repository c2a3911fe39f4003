//go:build linux

// Command warren-agent is warren's guest agent: the static binary that runs
// as PID 1 of every sandbox and serves the agent API (package
// warren/internal/agent) on one listener.
//
// Usage:
//
//	warren-agent --listen-fd N [--mode container|vm|dev]
//	warren-agent --listen unix:/path | tcp:127.0.0.1:PORT [--mode ...]
//
// --listen-fd serves on an inherited listening socket (how the container
// runtime starts it); --listen makes one (dev, tests). --mode says what a
// shutdown ends with: container and dev exit 0, vm powers the machine off.
// As PID 1 it shuts down cleanly on SIGTERM and ignores SIGINT and SIGHUP.
// In a container the runtime has mounted /proc, /dev and the rest.
//
// In a microVM it is the initramfs's /init, started by the guest kernel with
// no flags: it sets the guest up (package vminit: modules, root disk), then
// serves on the virtio-serial port the host named vmport.Name, in vm mode.
// There it powers the machine off rather than exit, since PID 1 exiting
// panics the kernel. It logs to stderr (in a VM: the console).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/agent"
	"warren/internal/guest"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/container/spawner"
	"warren/internal/runtime/gvisor/gvisorinit"
	"warren/internal/runtime/vm/vminit"
	"warren/internal/vmport"
)

// version is set at build time: -ldflags '-X main.version=...'.
var version = "dev"

// portWait bounds the wait for the agent's virtio-serial port in a VM, which
// appears shortly after virtio_console is loaded (slowly under TCG).
const portWait = 30 * time.Second

// termGrace is how long processes get between SIGTERM and SIGKILL when the
// agent itself is sent SIGTERM.
const termGrace = 5 * time.Second

// spareThreads is how many idle OS threads the agent keeps beyond those the
// Go runtime starts with.
const spareThreads = 8

// reserveThreads makes n OS threads and leaves them idle in the Go
// runtime's pool, which never gives them back. The agent shares its
// sandbox's pids limit: when a fork bomb holds every pid and the runtime
// needs a thread for a blocking call, a failed clone is fatal to a Go
// program, and the sandbox would lose its agent. With spare threads made
// at start (before the sandbox runs anything), it takes an idle one.
// Threads made now are set up with the others (containerinit applies
// every step to every thread). Made after the setup instead, they would
// cost a create 1.5-7 ms (measured: new threads of a process with a
// locked one come one at a time from Go's template thread), where setting
// them up costs about a signal each per step.
func reserveThreads(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread() // a thread of its own: the runtime makes one
			started.Done()
			<-release
			runtime.UnlockOSThread() // and keeps it, idle, once this returns
		}()
	}
	started.Wait()
	close(release)
}

// stderr writes to fd 2 with raw writes. In a container fd 2 is the write
// end of the console FIFO (package consolelog), non-blocking: what does not
// fit while the daemon is slow or gone is dropped rather than waited on,
// and a write with no reader fails (EPIPE) instead of killing the agent, as
// os.Stderr's writes would (they raise SIGPIPE on fds 1 and 2).
type stderr struct{}

func (stderr) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n, err := unix.Write(2, rest)
		if err != nil || n <= 0 {
			break
		}
		rest = rest[n:]
	}
	return len(p), nil
}

func main() {
	// Not dumpable: the sandbox's root (which has no CAP_SYS_PTRACE) can
	// then neither ptrace PID 1 nor take its descriptors (pidfd_getfd),
	// read or write its memory (/proc/1/mem, process_vm_*), compare its
	// files (kcmp) or list them (/proc/1/fd). Its own processes stay
	// dumpable from their exec on, so gdb and strace work on them.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(stderr{}, "warren-agent: prctl(PR_SET_DUMPABLE, 0):", err)
		os.Exit(1)
	}
	if spawner.Started() {
		os.WriteFile("/proc/self/comm", []byte("warren-spawner"), 0)
		os.Exit(spawner.Main())
	}
	if containerinit.Started() {
		containerinit.Early()
	}
	// The agent's clock is UTC: its log is read on the host, and the
	// sandbox's /etc/localtime, which the first log line would otherwise
	// read (Go loads the local zone on first use), is on a disk that is
	// cold when a sandbox starts: reading it took 1-1.5 ms of a create.
	time.Local = time.UTC
	// The agent's output buffers are bounded in total (package agent):
	// near that, collect garbage harder rather than grow into the reserve
	// the container runtime keeps for the agent (runtime.AgentMemoryMB).
	debug.SetMemoryLimit(48 << 20)
	// The container runtime executes the agent from a memfd, which the
	// kernel names after its fd number; ps and top should say what it is.
	os.WriteFile("/proc/self/comm", []byte("warren-agent"), 0)
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	log := slog.New(slog.NewTextHandler(stderr{}, nil)).With("component", "warren-agent")
	if !containerinit.Started() && vminit.Started() {
		// PID 1 of a VM: flags would be the kernel's leftovers; whatever
		// happens, the machine powers off rather than init exiting.
		defer powerOff(log)
		l, err := setupVM(log)
		if err != nil {
			log.Error("vm setup", "err", err)
			return 1
		}
		return serve(log, "vm", false, func(*agent.Server) (net.Listener, error) { return l, nil })
	}
	if gvisorinit.Started() {
		// The init of a gVisor sandbox: it exits when shut down, which
		// ends the sandbox.
		return serve(log, "gvisor", true, func(srv *agent.Server) (net.Listener, error) {
			return gvisorinit.Setup(srv.JoinWork, func(pid int, rss int64) {
				log.Warn("killed the largest process: the sandbox is out of memory", "pid", pid, "rss_bytes", rss)
			})
		})
	}
	flags := flag.NewFlagSet("warren-agent", flag.ContinueOnError)
	listenFD := flags.Int("listen-fd", -1, "serve on this inherited listening socket")
	listen := flags.String("listen", "", "serve on unix:/path or tcp:host:port")
	mode := flags.String("mode", "container", "what shutdown ends with: container|vm|dev")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *mode != "container" && *mode != "vm" && *mode != "dev" {
		log.Error("bad --mode", "mode", *mode)
		return 2
	}
	l, err := listener(*listenFD, *listen)
	if err != nil {
		log.Error("listen", "err", err)
		return 2
	}
	container := containerinit.Started()
	return serve(log, *mode, container, func(srv *agent.Server) (net.Listener, error) {
		if container {
			// Started by the container runtime as a sandbox's init: page in
			// the serving path while the runtime prepares the root (or,
			// warm, before any sandbox exists), then set the sandbox up.
			// Until Setup returns the root is the host's: nothing here may
			// touch a file.
			srv.Warm()
			containerinit.Setup(srv.JoinWork)
			go agent.Prefetch(guest.FirstExecFiles)
		}
		return l, nil
	})
}

// serve runs the agent until it stops, on the listener that setup returns
// once it has set the sandbox up; ownsRoot says the root is the sandbox's
// own (a container runtime's or gVisor runtime's init).
func serve(log *slog.Logger, mode string, ownsRoot bool, setup func(*agent.Server) (net.Listener, error)) int {
	reserveThreads(spareThreads)
	srv := agent.New(agent.Options{Version: version, OnShutdown: onShutdown(mode, log),
		OwnsRoot: ownsRoot, Guest: mode == "vm" && os.Getpid() == 1, OwnKernel: mode == "gvisor"}, log)
	defer srv.Close()
	l, err := setup(srv)
	if err != nil {
		log.Error("setup", "err", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var shutdown sync.Once
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				if sig != syscall.SIGTERM && os.Getpid() == 1 {
					continue // PID 1 ignores SIGINT and SIGHUP
				}
				log.Info("signal: shutting down", "signal", sig)
				shutdown.Do(func() { go srv.Shutdown(ctx, termGrace) })
			}
		}
	}()

	log.Info("serving", "addr", l.Addr().String(), "mode", mode, "version", version, "pid", os.Getpid())
	if err := srv.Serve(ctx, l); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// listener is the socket to serve on: inherited (fd >= 0) or made from
// "unix:/path" or "tcp:host:port".
func listener(fd int, spec string) (net.Listener, error) {
	switch {
	case fd >= 0 && spec != "":
		return nil, errors.New("give one of --listen-fd and --listen")
	case fd >= 0:
		f := os.NewFile(uintptr(fd), "listen-fd")
		defer f.Close()
		l, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("inherited fd %d: %w", fd, err)
		}
		return l, nil
	}
	network, addr, ok := strings.Cut(spec, ":")
	if !ok || addr == "" || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("--listen %q: want unix:/path or tcp:host:port", spec)
	}
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(addr) // a stale socket of an earlier run
		}
	}
	return net.Listen(network, addr)
}

// setupVM sets the guest up as its init and returns the listener on the
// agent's virtio-serial port.
func setupVM(log *slog.Logger) (net.Listener, error) {
	start := time.Now()
	if err := vminit.Setup(); err != nil {
		return nil, err
	}
	l, err := vmport.Listen(vmport.Name, portWait)
	if err != nil {
		return nil, err
	}
	// /proc was not mounted when main named the process.
	os.WriteFile("/proc/self/comm", []byte("warren-agent"), 0)
	log.Info("vm set up", "took", time.Since(start).Round(time.Millisecond))
	return l, nil
}

// onShutdown is what the end of a Shutdown does in each mode: exit (a
// container's init exiting ends the container), or power off (in a VM, PID 1
// exiting would panic the kernel).
func onShutdown(mode string, log *slog.Logger) func() {
	return func() {
		if mode != "vm" {
			log.Info("shut down: exiting")
			os.Exit(0)
		}
		powerOff(log)
	}
}

// powerOff syncs and powers the machine off. It returns only if that fails,
// after exiting is all that is left.
func powerOff(log *slog.Logger) {
	log.Info("shut down: powering off")
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		log.Error("power off", "err", err)
		os.Exit(1)
	}
}
