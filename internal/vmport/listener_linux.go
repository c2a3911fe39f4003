//go:build linux

package vmport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
)

// portClass lists the virtio-serial ports with their names. udev would make
// /dev/virtio-ports/NAME links from it; a warren guest has no udev.
const portClass = "/sys/class/virtio-ports"

// FindPort returns the device (/dev/vportNpM) of the virtio-serial port the
// host named name, or an error wrapping os.ErrNotExist when there is none.
func FindPort(name string) (string, error) {
	entries, err := os.ReadDir(portClass)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("find port %s: %w", name, err)
	}
	for _, e := range entries {
		got, err := os.ReadFile(filepath.Join(portClass, e.Name(), "name"))
		if err == nil && strings.TrimSpace(string(got)) == name {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("find port %s: %w", name, os.ErrNotExist)
}

// Listen waits up to timeout for the virtio-serial port named name and its
// device node (they appear shortly after virtio_console is loaded) and
// returns a Listener on it.
func Listen(name string, timeout time.Duration) (*Listener, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var dev string
	var err error
	if backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		if dev, err = FindPort(name); err == nil {
			_, err = os.Stat(dev)
		}
		return err == nil, nil
	}) != nil {
		return nil, fmt.Errorf("virtio-serial port %s did not appear in %v: %w", name, timeout, err)
	}
	return newListener(name, func() (int, error) {
		return unix.Open(dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	}), nil
}

// Listener is a net.Listener over a virtio-serial port: one byte stream to
// one host connection at a time. Accept opens the port, waits for the host
// to be connected, runs the guest's side of the handshake (see the package
// comment) and returns a conn for the session; that conn's Read returns
// io.EOF when the host disconnects. Only after the conn is closed does the
// next Accept reopen the port (closing drops what the guest had buffered of
// the old session) and wait for the host again. So an HTTP server on it
// serves one host connection after another: a restarted daemon, or a host
// that redialled a broken connection, reaches the same agent.
type Listener struct {
	name string
	open func() (int, error) // opens the port, non-blocking

	free   chan struct{} // holds a token while no conn is open
	closed chan struct{} // closed by Close

	mu      sync.Mutex // guards syncing
	syncing *os.File   // the port while Accept runs the handshake, for Close to interrupt
	once    sync.Once
}

var _ net.Listener = (*Listener)(nil)

func newListener(name string, open func() (int, error)) *Listener {
	l := &Listener{name: name, open: open, free: make(chan struct{}, 1), closed: make(chan struct{})}
	l.free <- struct{}{}
	return l
}

// hostPoll bounds the interval at which Accept checks whether the host is
// connected: the kernel offers nothing to wait on for it (a port without
// its host reports POLLHUP, so poll returns at once).
const hostPoll = 50 * time.Millisecond

// Accept waits until the previous conn is closed and a host session has
// begun, and returns a conn for it. It returns net.ErrClosed once the
// listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case <-l.free:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	for {
		c, err := l.session()
		if err == nil {
			return c, nil
		}
		if errors.Is(err, io.EOF) {
			continue // the host went during the handshake: wait for the next
		}
		l.free <- struct{}{}
		return nil, err
	}
}

// session opens the port, waits for the host and runs the handshake.
func (l *Listener) session() (net.Conn, error) {
	fd, err := l.openPort()
	if err != nil {
		return nil, err
	}
	if err := l.waitHost(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Non-blocking, so that os.File uses the runtime's poller: reads and
	// writes park instead of holding a thread, deadlines work, and Close
	// interrupts them.
	f := os.NewFile(uintptr(fd), l.name)
	l.mu.Lock()
	select {
	case <-l.closed:
		l.mu.Unlock()
		f.Close()
		return nil, net.ErrClosed
	default:
	}
	l.syncing = f
	l.mu.Unlock()
	prefix, err := guestSync(f)
	l.mu.Lock()
	l.syncing = nil
	l.mu.Unlock()
	if err != nil {
		f.Close()
		select {
		case <-l.closed:
			return nil, net.ErrClosed
		default:
		}
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("port %s: handshake: %w", l.name, err)
	}
	return &portConn{f: f, prefix: prefix, l: l}, nil
}

// openPort opens the port. EBUSY (someone else in the guest has it open:
// the kernel allows one opener) is waited out rather than ending the server.
func (l *Listener) openPort() (int, error) {
	waits := backoff.Backoff{Base: time.Millisecond, Max: hostPoll}
	for {
		fd, err := l.open()
		if err == nil {
			return fd, nil
		}
		if err != unix.EBUSY && err != unix.EINTR {
			return -1, fmt.Errorf("open port %s: %w", l.name, err)
		}
		if !waits.Wait(l.closed) {
			return -1, net.ErrClosed
		}
	}
}

// waitHost polls until the host end of the port is connected.
func (l *Listener) waitHost(fd int) error {
	waits := backoff.Backoff{Base: time.Millisecond, Max: hostPoll}
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("port %s: poll: %w", l.name, err)
		case fds[0].Revents&unix.POLLNVAL != 0:
			return fmt.Errorf("port %s: poll: invalid fd", l.name)
		case fds[0].Revents&unix.POLLHUP == 0:
			return nil
		}
		if !waits.Wait(l.closed) {
			return net.ErrClosed
		}
	}
}

// Close stops Accept, interrupting a handshake in progress. Conns already
// returned go on until they are closed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.closed)
		if l.syncing != nil {
			l.syncing.Close()
		}
		l.mu.Unlock()
	})
	return nil
}

// Addr is the port's name.
func (l *Listener) Addr() net.Addr { return portAddr(l.name) }

// portAddr is the address of both ends of a port: its name.
type portAddr string

func (a portAddr) Network() string { return "virtio-serial" }
func (a portAddr) String() string  { return string(a) }

// portConn is one host session on the port.
type portConn struct {
	f      *os.File
	prefix []byte // read past the handshake; Read returns it first
	l      *Listener
	hungUp atomic.Bool // Read saw the host go
	once   sync.Once
}

var _ net.Conn = (*portConn)(nil)

// errHungUp is what writes get once the host has gone: the port would hold
// them for the next host.
var errHungUp = errors.New("virtio-serial port: host disconnected")

func (c *portConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	n, err := c.f.Read(p)
	if err == io.EOF {
		c.hungUp.Store(true)
	}
	return n, err
}

func (c *portConn) Write(p []byte) (int, error) {
	if c.hungUp.Load() {
		return 0, errHungUp
	}
	return c.f.Write(p)
}

// Close closes the port, which lets the next Accept reopen it.
func (c *portConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		err = c.f.Close()
		c.l.free <- struct{}{}
	})
	return err
}

func (c *portConn) LocalAddr() net.Addr                { return portAddr(c.l.name) }
func (c *portConn) RemoteAddr() net.Addr               { return portAddr(c.l.name) }
func (c *portConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c *portConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c *portConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }
