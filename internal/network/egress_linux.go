//go:build linux

package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/network/egress"
	"warren/internal/network/firewall"
	"warren/internal/osthread"
)

// startProxy starts the sandbox's interceptor, listening in the router's
// namespace. s.mu is held and the namespace open.
func (s *Sandbox) startProxy() error {
	if s.eg.CA == nil {
		return fmt.Errorf("the sandbox has no CA")
	}
	var ln net.Listener
	err := inNS(int(s.ns), func() (err error) {
		// Every address of R: the gateway's exists only once the sandbox is
		// linked. R's input chain admits only redirected connections.
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", InterceptPort))
		return err
	})
	if err != nil {
		return err
	}
	s.proxy = egress.Start(egress.Config{
		Sandbox: s.id, Listener: ln, Dial: s.dialOut, CA: s.eg.CA, Roots: s.n.cfg.EgressRoots,
		Gateway: s.router().GatewayAddr, Log: s.n.log,
	})
	return nil
}

// dialOut connects to addr from the router's namespace, as the sandbox's
// own connections leave.
func (s *Sandbox) dialOut(ctx context.Context, addr netip.AddrPort) (c net.Conn, err error) {
	s.mu.Lock()
	fd := -1
	if s.ns.IsOpen() {
		fd, err = unix.Dup(int(s.ns))
	}
	s.mu.Unlock()
	if fd < 0 {
		if err == nil {
			err = errDetached
		}
		return nil, err
	}
	defer unix.Close(fd)
	err = inNS(fd, func() (err error) {
		d := net.Dialer{Timeout: dialTimeout}
		c, err = d.DialContext(ctx, "tcp4", addr.String())
		return err
	})
	return c, err
}

// inNS runs f on a thread of its own in the network namespace fd; the
// sockets f makes stay in it.
func inNS(fd int, f func() error) (err error) {
	osthread.Throwaway(func() {
		if err = unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("enter the router namespace: %w", err)
			return
		}
		err = f()
	})
	return err
}

// EgressCA is the certificate the sandbox must trust for its rules to
// apply (PEM), nil while it has no rules.
func (s *Sandbox) EgressCA() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proxy == nil {
		return nil
	}
	return s.eg.CA.CertPEM()
}

// SaveEgressCA keeps the sandbox's CA at path, for a restarted daemon.
func (s *Sandbox) SaveEgressCA(path string) error {
	s.mu.Lock()
	ca := s.eg.CA
	s.mu.Unlock()
	if ca == nil {
		return nil
	}
	return ca.Save(path)
}

// intercept pins what the resolver answered for a name of the rules and
// tells the interceptor.
func (s *Sandbox) intercept(name string, addrs []netip.Addr, ttl time.Duration) error {
	err := s.withNS(func(fd int) error { return firewall.PinIntercept(fd, addrs, ttl) })
	if err != nil {
		return err
	}
	s.mu.Lock()
	p := s.proxy
	s.mu.Unlock()
	if p != nil {
		p.Answered(name, addrs, ttl)
	}
	return nil
}
