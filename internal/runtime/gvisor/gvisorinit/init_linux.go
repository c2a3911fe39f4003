//go:build linux

// Package gvisorinit is the half of the gVisor runtime that runs inside a
// sandbox: runsc starts the guest agent as the sandbox's init (PID 1 of
// gVisor's user-space kernel, the Sentry), with the arguments Args made;
// the agent calls Setup before it serves. runsc has already built the
// root (the sandbox's disk, loop-mounted on the host), /proc, /sys, /dev,
// the hostname and the network; Setup writes /etc/hosts and
// /etc/resolv.conf for a networked sandbox, puts the processes the agent
// will start under the sandbox's pids limit (in the Sentry's own pids
// cgroup), makes sure that what it starts holds no more capabilities than
// a container sandbox's processes (the bounding set) while it keeps its
// own, and returns the listener the agent serves on.
//
// The agent's channel. The host cannot connect into a sandbox whose socket
// it must save in a checkpoint (the Sentry refuses to save an endpoint
// bound to a host socket), so the agent connects out instead: the runtime
// listens on a unix socket in a host directory that runsc binds read-only
// at ChanDir, and the agent dials it (runsc --host-uds=open), one
// connection at a time, again whenever the last one ends. The host speaks
// HTTP/2 over each as over a VM's port. While the runtime checkpoints a
// sandbox it has no socket there, so the agent holds no host descriptor
// when the Sentry is saved, and it dials the new socket after a restore.
//
// It is imported by the agent, so it stays small: x/sys, the standard
// library and what the container init shares.
package gvisorinit

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/guest"
	"warren/internal/runtime/container/containerinit"
)

// Where the runtime binds its files in the sandbox: a tmpfs at Dir (never
// on the sandbox's disk), holding the agent binary and the channel's
// directory.
const (
	Dir       = "/run/warren"
	AgentPath = Dir + "/agent"
	ChanDir   = Dir + "/chan"
	// Socket is the channel's socket's name in ChanDir.
	Socket = "agent.sock"
	// TokenFile is, in ChanDir, what the agent sends first on each
	// connection: the runtime takes no other. It is there only until the
	// agent's first connection, before the sandbox runs anything.
	TokenFile = "token"
)

// arg1 marks an agent started by the gVisor runtime; the Config follows it.
const arg1 = "gvisor-init"

// Config is what the runtime tells the init.
type Config struct {
	// Network says the sandbox is linked to its router: /etc/hosts and
	// /etc/resolv.conf are written for it.
	Network bool `json:"network,omitempty"`
	// Pids limits the processes the agent starts (0: no limit); the
	// agent's own threads are outside it.
	Pids int64 `json:"pids,omitempty"`
	// Memory is the memory, in bytes, the sandbox's processes may use
	// together, with the agent's share of its reserve (memory_linux.go);
	// 0: no limit.
	Memory int64 `json:"memory,omitempty"`
}

// Args are the init's command line for cfg.
func Args(cfg Config) []string {
	b, _ := json.Marshal(cfg) // a bool and an int always marshal
	return []string{AgentPath, arg1, string(b)}
}

// Started reports whether this process was started by the gVisor runtime
// as a sandbox's init; it must then call Setup before it serves.
func Started() bool { return len(os.Args) == 3 && os.Args[1] == arg1 }

// Setup sets the sandbox up and returns the listener the agent serves on.
// joinWork must move the thread the agent starts processes from into the
// cgroup whose tasks files it gets (the agent's JoinWork); oomKilled is
// told of each process killed for passing the memory limit.
func Setup(joinWork func(tasks []int) error, oomKilled func(pid int, rss int64)) (net.Listener, error) {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Args[2]), &cfg); err != nil {
		return nil, fmt.Errorf("gvisor init config: %w", err)
	}
	if cfg.Network {
		host, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		if err := guest.WriteFiles("/", host); err != nil {
			return nil, fmt.Errorf("network files: %w", err)
		}
	}
	if cfg.Pids > 0 {
		if err := limitPids(cfg.Pids, joinWork); err != nil {
			return nil, err
		}
	}
	token, err := os.ReadFile(filepath.Join(ChanDir, TokenFile))
	if err != nil {
		return nil, fmt.Errorf("agent token: %w", err)
	}
	if err := containerinit.LimitExecs(); err != nil {
		return nil, err
	}
	if cfg.Memory > 0 {
		go holdMemory(cfg.Memory, oomKilled)
	}
	return &dialer{path: filepath.Join(ChanDir, Socket), token: token, closed: make(chan struct{})}, nil
}

// limitPids makes a pids cgroup limited to max in the Sentry's own cgroup
// hierarchy and moves the agent's spawning thread into it, so that every
// process the agent starts is born there; the agent stays outside, keeping
// its own threads whatever the sandbox runs. The hierarchy is unmounted
// before the sandbox runs anything, and without CAP_SYS_ADMIN (gone from
// the bounding set next) no process of the sandbox can mount it again to
// leave the group.
func limitPids(max int64, joinWork func(tasks []int) error) error {
	mnt := filepath.Join(Dir, "cgroup")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fmt.Errorf("pids cgroup: %w", err)
	}
	if err := unix.Mount("none", mnt, "cgroup", 0, "pids"); err != nil {
		return fmt.Errorf("mount pids cgroup: %w", err)
	}
	defer func() {
		unix.Unmount(mnt, unix.MNT_DETACH)
		os.Remove(mnt)
	}()
	work := filepath.Join(mnt, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return fmt.Errorf("pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(work, "pids.max"), []byte(strconv.FormatInt(max, 10)), 0); err != nil {
		return fmt.Errorf("pids limit: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(work, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pids cgroup: %w", err)
	}
	defer f.Close()
	return joinWork([]int{int(f.Fd())})
}

// Dial bounds: a runtime that listens answers at once; none listens while
// it checkpoints or restarts, and the agent then waits up to dialMax
// between tries.
const (
	dialFirst = time.Millisecond
	dialMax   = 20 * time.Millisecond
)

// dialer is a net.Listener whose Accept dials the runtime's socket: one
// connection at a time, the next once the last is closed.
type dialer struct {
	path   string
	token  []byte
	mu     sync.Mutex
	cur    *session // the open connection, or nil
	closed chan struct{}
	once   sync.Once
}

// session is a dialled connection; done is closed with it.
type session struct {
	net.Conn
	done chan struct{}
	once sync.Once
}

func (s *session) Close() error {
	err := s.Conn.Close()
	s.once.Do(func() { close(s.done) })
	return err
}

func (d *dialer) Accept() (net.Conn, error) {
	d.mu.Lock()
	cur := d.cur
	d.mu.Unlock()
	if cur != nil {
		select {
		case <-cur.done:
		case <-d.closed:
			return nil, net.ErrClosed
		}
	}
	b := backoff.Backoff{Base: dialFirst, Max: dialMax}
	for {
		c, err := net.Dial("unix", d.path)
		if err == nil {
			if _, err = c.Write(d.token); err != nil {
				c.Close()
			}
		}
		if err == nil {
			s := &session{Conn: c, done: make(chan struct{})}
			d.mu.Lock()
			d.cur = s
			d.mu.Unlock()
			return s, nil
		}
		// Whatever the error (no socket, nobody listening, or worse), the
		// agent goes on trying: it has nothing else to serve on.
		if !b.Wait(d.closed) {
			return nil, net.ErrClosed
		}
	}
}

func (d *dialer) Close() error {
	d.once.Do(func() { close(d.closed) })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		d.cur.Close()
	}
	return nil
}

func (d *dialer) Addr() net.Addr { return &net.UnixAddr{Name: d.path, Net: "unix"} }
