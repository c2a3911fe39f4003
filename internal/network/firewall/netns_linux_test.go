package firewall

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"warren/internal/osthread"
)

// The tests build their topologies from network namespaces of their own,
// held by descriptors only (no bind mounts): when a test ends, closing
// the descriptors and sockets ends the namespaces and their links, even
// if it failed half-way. No packet leaves them.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces and nftables rules")
	}
}

// testNS is a network namespace made for a test.
type testNS struct {
	name string
	fd   int
	h    *netlink.Handle
}

func newNS(t *testing.T, name string) *testNS {
	t.Helper()
	fd := -1
	var err error
	osthread.Throwaway(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return
		}
		fd, err = unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	n := &testNS{name: name, fd: fd}
	t.Cleanup(func() { unix.Close(fd) })
	if n.h, err = netlink.NewHandleAt(netns.NsHandle(fd)); err != nil {
		t.Fatalf("netlink in %s: %v", name, err)
	}
	t.Cleanup(n.h.Close)
	n.up(t, "lo")
	return n
}

// run calls f on a thread in the namespace: sockets f makes are there.
func (n *testNS) run(f func() error) error {
	var err error
	osthread.Throwaway(func() {
		if err = unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("enter %s: %w", n.name, err)
			return
		}
		err = f()
	})
	return err
}

func (n *testNS) sysctl(t *testing.T, path, value string) {
	t.Helper()
	if err := n.run(func() error { return os.WriteFile("/proc/sys/net/"+path, []byte(value), 0) }); err != nil {
		t.Fatalf("%s: sysctl %s: %v", n.name, path, err)
	}
}

// router turns on forwarding; off reverse-path filtering, so that the
// firewall's anti-spoofing is what is tested; and off the rate limit of
// ICMP errors, so that every refusal is answered at once (see Router).
func (n *testNS) router(t *testing.T) {
	n.sysctl(t, "ipv4/ip_forward", "1")
	n.sysctl(t, "ipv4/icmp_ratelimit", "0")
	n.sysctl(t, "ipv4/conf/all/rp_filter", "0")
	n.sysctl(t, "ipv4/conf/default/rp_filter", "0")
}

func (n *testNS) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: link %s: %v", n.name, name, err)
	}
	return l
}

func (n *testNS) up(t *testing.T, name string) {
	t.Helper()
	if err := n.h.LinkSetUp(n.link(t, name)); err != nil {
		t.Fatalf("%s: up %s: %v", n.name, name, err)
	}
}

func (n *testNS) addr(t *testing.T, link, prefix string) {
	t.Helper()
	a, err := netlink.ParseAddr(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.AddrAdd(n.link(t, link), a); err != nil {
		t.Fatalf("%s: address %s on %s: %v", n.name, prefix, link, err)
	}
}

func (n *testNS) delAddr(t *testing.T, link, prefix string) {
	t.Helper()
	a, err := netlink.ParseAddr(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.AddrDel(n.link(t, link), a); err != nil {
		t.Fatalf("%s: delete address %s: %v", n.name, prefix, err)
	}
}

func (n *testNS) defaultRoute(t *testing.T, gw string) {
	t.Helper()
	if err := n.h.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)}); err != nil {
		t.Fatalf("%s: default route via %s: %v", n.name, gw, err)
	}
}

// veth links a and b, with an address on each end.
func veth(t *testing.T, a *testNS, aName, aAddr string, b *testNS, bName, bAddr string) {
	t.Helper()
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(b.fd)}
	if err := a.h.LinkAdd(l); err != nil {
		t.Fatalf("veth %s/%s: %v", aName, bName, err)
	}
	a.addr(t, aName, aAddr)
	b.addr(t, bName, bAddr)
	a.up(t, aName)
	b.up(t, bName)
}

// serveTCP answers every connection to addr with its peer's address.
func (n *testNS) serveTCP(t *testing.T, addr string) {
	t.Helper()
	var l net.Listener
	if err := n.run(func() (err error) { l, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("%s: listen tcp %s: %v", n.name, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, c.RemoteAddr().String())
			c.Close()
		}
	}()
}

// udpServer answers every datagram to its address with the sender's
// address, and remembers the senders.
type udpServer struct {
	mu   sync.Mutex
	seen []netip.Addr // guarded by mu
}

func (s *udpServer) saw(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.seen, a)
}

func (n *testNS) serveUDP(t *testing.T, addr string) *udpServer {
	t.Helper()
	var c net.PacketConn
	if err := n.run(func() (err error) { c, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		t.Fatalf("%s: listen udp %s: %v", n.name, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	s := &udpServer{}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.seen = append(s.seen, from.(*net.UDPAddr).AddrPort().Addr().Unmap())
			s.mu.Unlock()
			c.WriteTo([]byte(from.String()), from)
		}
	}()
	return s
}

// A dial tries network ("tcp" or "udp") to addr from n, optionally from
// the source address from, and reads the answer.
type dial struct {
	network, addr, from string
	timeout             time.Duration
}

type dialResult struct {
	answer string
	err    error
	took   time.Duration
}

func (n *testNS) dial(d dial) dialResult {
	if d.timeout == 0 {
		d.timeout = 2 * time.Second
	}
	var r dialResult
	start := time.Now()
	err := n.run(func() error {
		dl := net.Dialer{Timeout: d.timeout}
		if d.from != "" {
			ip := net.ParseIP(d.from)
			if d.network == "tcp" {
				dl.LocalAddr = &net.TCPAddr{IP: ip}
			} else {
				dl.LocalAddr = &net.UDPAddr{IP: ip}
			}
		}
		c, err := dl.Dial(d.network+"4", d.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(start.Add(d.timeout))
		if d.network == "udp" {
			if _, err := c.Write([]byte("?")); err != nil {
				return err
			}
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			r.answer = string(buf[:n])
			return err
		}
		b, err := io.ReadAll(c)
		r.answer = string(b)
		return err
	})
	r.err, r.took = err, time.Since(start)
	return r
}

// reach checks that d gets an answer, and returns it.
func (n *testNS) reach(t *testing.T, d dial) string {
	t.Helper()
	r := n.dial(d)
	if r.err != nil || r.answer == "" {
		t.Fatalf("%s: %s %s: answer %q, error %v; want an answer", n.name, d.network, d.addr, r.answer, r.err)
	}
	return r.answer
}

// refused checks that d fails at once with "no route to host": the
// router's ICMP administratively prohibited.
func (n *testNS) refused(t *testing.T, d dial) {
	t.Helper()
	r := n.dial(d)
	if !errors.Is(r.err, syscall.EHOSTUNREACH) {
		t.Fatalf("%s: %s %s: answer %q, error %v; want EHOSTUNREACH", n.name, d.network, d.addr, r.answer, r.err)
	}
	if r.took > time.Second {
		t.Fatalf("%s: %s %s: refused after %v; want at once", n.name, d.network, d.addr, r.took)
	}
}

// blocked checks that d gets nothing (a dropped packet): it times out.
func (n *testNS) blocked(t *testing.T, d dial) {
	t.Helper()
	d.timeout = 300 * time.Millisecond
	r := n.dial(d)
	var ne net.Error
	if !errors.As(r.err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: %s %s: answer %q, error %v; want a time-out", n.name, d.network, d.addr, r.answer, r.err)
	}
}

// answerFrom checks that an answer (a peer address as host:port) names
// the source address want.
func answerFrom(t *testing.T, answer, want string) {
	t.Helper()
	if host, _, _ := strings.Cut(answer, ":"); host != want {
		t.Fatalf("seen from %s, want %s", answer, want)
	}
}

func tcp(addr string) dial { return dial{network: "tcp", addr: addr} }
func udp(addr string) dial { return dial{network: "udp", addr: addr} }

func (d dial) fromAddr(a string) dial { d.from = a; return d }
