//go:build linux

package network

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"warren/internal/osthread"
)

// inOwnNetNS runs f on a thread in a new, empty network namespace, so that
// the pool checks meet only the addresses and routes the test makes.
func inOwnNetNS(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	osthread.Throwaway(func() {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		f()
	})
}

// upLoopback brings the namespace's loopback up and returns it (nil, with
// the test failed, if it cannot).
func upLoopback(t *testing.T) netlink.Link {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		t.Error(err)
		return nil
	}
	return lo
}

// mustLink makes a link named name (one end of a veth pair: the host may
// have no dummy links) with addresses addrs.
func mustLink(t *testing.T, name string, addrs ...string) netlink.Link {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Errorf("add %s: %v", name, err)
		return nil
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return nil
	}
	netlink.LinkSetUp(l)
	for _, a := range addrs {
		addAddr(t, l, a)
	}
	return l
}

func addAddr(t *testing.T, l netlink.Link, a string) {
	t.Helper()
	p := netip.MustParsePrefix(a)
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}); err != nil {
		t.Errorf("address %s: %v", a, err)
	}
}

// wantFree checks checkPoolFree's verdict: nil when want is "", else an
// error containing want.
func wantFree(t *testing.T, runDir, pool string, adopt bool, want string) {
	t.Helper()
	err := checkPoolFree(runDir, netip.MustParsePrefix(pool), adopt)
	switch {
	case want == "" && err != nil:
		t.Errorf("pool %s (adopt %v): %v, want free", pool, adopt, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("pool %s (adopt %v): %v, want an error naming %q", pool, adopt, err, want)
	}
}

// TestPoolOverlap: a pool is refused, naming what it overlaps, when the
// host has an address or a route (in any table) in it, or another live
// server's pool overlaps it; its own leftovers (the resolver address on
// loopback, sandbox links named for their address) do not count when its
// lock is held.
func TestPoolOverlap(t *testing.T) {
	runDir := t.TempDir()
	inOwnNetNS(t, func() {
		lo := upLoopback(t)
		if lo == nil {
			return
		}
		wantFree(t, runDir, "10.201.0.0/16", true, "")

		d := mustLink(t, "dummy0", "10.201.5.1/24")
		if d == nil {
			return
		}
		wantFree(t, runDir, "10.201.0.0/16", true, "address 10.201.5.1/24 of dummy0")
		wantFree(t, runDir, "10.0.0.0/8", true, "address 10.201.5.1/24 of dummy0")
		wantFree(t, runDir, "10.202.0.0/16", true, "")
		netlink.LinkDel(d)

		if d = mustLink(t, "dummy1", "192.0.2.2/24"); d == nil {
			return
		}
		route := &netlink.Route{LinkIndex: d.Attrs().Index, Table: 100,
			Dst: &net.IPNet{IP: net.IPv4(10, 201, 128, 0), Mask: net.CIDRMask(17, 32)}}
		if err := netlink.RouteAdd(route); err != nil {
			t.Error(err)
		}
		wantFree(t, runDir, "10.201.0.0/16", true, "route to 10.201.128.0/17 (dummy1, table 100)")
		wantFree(t, runDir, "10.201.0.0/24", true, "")
		// A throw route holds no address.
		throw := &netlink.Route{Table: 101, Type: unix.RTN_THROW,
			Dst: &net.IPNet{IP: net.IPv4(10, 201, 0, 0), Mask: net.CIDRMask(16, 32)}}
		if err := netlink.RouteAdd(throw); err != nil {
			t.Error(err)
		}
		wantFree(t, runDir, "10.201.0.0/24", true, "")
		// A default route is no overlap.
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: d.Attrs().Index, Gw: net.IPv4(192, 0, 2, 1)}); err != nil {
			t.Error(err)
		}
		wantFree(t, runDir, "10.201.0.0/24", true, "")

		// The pool's own leftovers.
		addAddr(t, lo, "10.201.0.1/32")
		mustLink(t, hostIface(netip.MustParseAddr("10.201.0.5")), "10.201.0.5/30")
		wantFree(t, runDir, "10.201.0.0/24", true, "")
		wantFree(t, runDir, "10.201.0.0/24", false, "10.201.0.")
		// A sandbox link named for another pool's address is not its own.
		mustLink(t, hostIface(netip.MustParseAddr("10.209.0.9")), "10.201.0.9/30")
		wantFree(t, runDir, "10.201.0.0/24", true, "address 10.201.0.9/30")
	})
}

// TestPoolOverlapsLiveServer: a pool overlapping one whose server holds its
// lock is refused; once that server is gone it is not.
func TestPoolOverlapsLiveServer(t *testing.T) {
	runDir := t.TempDir()
	inOwnNetNS(t, func() {
		other, err := lockPool(runDir, netip.MustParsePrefix("10.201.0.0/24"))
		if err != nil {
			t.Error(err)
			return
		}
		wantFree(t, runDir, "10.201.0.0/16", true, "overlaps pool 10.201.0.0/24 of another warren server")
		wantFree(t, runDir, "10.201.1.0/24", true, "")
		if _, err := lockPool(runDir, netip.MustParsePrefix("10.201.0.0/24")); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("the same pool twice: %v, want in use", err)
		}
		other.Close()
		wantFree(t, runDir, "10.201.0.0/16", true, "")
	})
}

// TestAutoPool: an automatic pool is the first free one of AutoPools,
// recorded in the pool file and taken again from it; a pool file naming a
// pool in use is refused, not replaced.
func TestAutoPool(t *testing.T) {
	runDir := t.TempDir()
	file := filepath.Join(t.TempDir(), "net-pool")
	inOwnNetNS(t, func() {
		mustLink(t, "dummy0", "10.202.7.1/24")
		cfg := Config{RunDir: runDir, PoolFile: file}
		p, lock, err := claimPool(cfg)
		if err != nil {
			t.Error(err)
			return
		}
		if want := netip.MustParsePrefix("10.203.0.0/16"); p != want {
			t.Errorf("auto pool %s, want %s (10.202.0.0/16 has a host address)", p, want)
		}
		if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != p.String() {
			t.Errorf("pool file holds %q, want %s", b, p)
		}
		if _, _, err := claimPool(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("the recorded pool while its server runs: %v, want in use", err)
		}
		lock.Close()
		again, lock, err := claimPool(cfg)
		if err != nil || again != p {
			t.Errorf("after a restart: %s, %v; want %s again", again, err, p)
		}
		if lock != nil {
			lock.Close()
		}
		os.WriteFile(file, []byte("10.202.0.0/16\n"), 0o600)
		if _, _, err := claimPool(cfg); err == nil || !strings.Contains(err.Error(), "10.202.7.1/24") {
			t.Errorf("a recorded pool that now overlaps the host: %v, want refused", err)
		}
		os.WriteFile(file, []byte("nonsense\n"), 0o600)
		if _, _, err := claimPool(cfg); err == nil || !strings.Contains(err.Error(), "recorded in") {
			t.Errorf("a bad pool file: %v, want refused", err)
		}
	})
}

func TestHostIfaceAddr(t *testing.T) {
	a := netip.MustParseAddr("10.201.3.5")
	if got, ok := hostIfaceAddr(hostIface(a)); !ok || got != a {
		t.Errorf("hostIfaceAddr(hostIface(%s)) = %s, %v", a, got, ok)
	}
	for _, name := range []string{"eth0", "ws", "ws0ac9", "wszzzzzzzz", "ws0ac903051"} {
		if _, ok := hostIfaceAddr(name); ok {
			t.Errorf("hostIfaceAddr(%q) took it for a sandbox link", name)
		}
	}
}

// TestRelease: what a gone server left for its pool goes, but never while
// a server holds the pool or a sandbox's router is still there.
func TestRelease(t *testing.T) {
	runDir := t.TempDir()
	pool := netip.MustParsePrefix("10.201.0.0/24")
	inOwnNetNS(t, func() {
		lo := upLoopback(t)
		if lo == nil {
			return
		}
		lock, err := lockPool(runDir, pool)
		if err != nil {
			t.Error(err)
			return
		}
		addAddr(t, lo, "10.201.0.1/32")
		if err := Release(runDir, pool); err == nil || !strings.Contains(err.Error(), "a server holds it") {
			t.Errorf("release of a held pool: %v", err)
		}
		lock.Close()
		router := filepath.Join(poolDir(runDir, pool), "sb-aaaaaaaaaaaaaaaaaaaa")
		os.WriteFile(router, nil, 0o600)
		if err := Release(runDir, pool); err == nil || !strings.Contains(err.Error(), "still there") {
			t.Errorf("release with a router left: %v", err)
		}
		os.Remove(router)
		if err := Release(runDir, pool); err != nil {
			t.Errorf("release: %v", err)
		}
		if _, err := os.Stat(poolDir(runDir, pool)); !os.IsNotExist(err) {
			t.Errorf("pool dir left: %v", err)
		}
		wantFree(t, runDir, "10.201.0.0/24", false, "")
		if err := Release(runDir, pool); err != nil {
			t.Errorf("a second release: %v", err)
		}
	})
}
