//go:build linux

package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"warren/internal/atomicfile"
	"warren/internal/network/firewall"
)

// A node's pool is its alone on the host: New takes a lock for it in the
// run directory (one server per pool) and refuses a pool that overlaps
// another server's pool, or any address or route of the host that is not
// the node's own from an earlier run. A pool that overlapped the host's
// routes would take addresses the host uses away from it (the route to a
// sandbox link is more specific), and one that overlapped another server's
// would hand out its addresses twice.

// AutoPools are the pools a node with Config.PoolFile picks from, in
// order: /16s of 10.0.0.0/8 above DefaultPool, so that an automatic pool
// never takes the one a server on its defaults uses.
var AutoPools = func() []netip.Prefix {
	var ps []netip.Prefix
	for b := 202; b <= 250; b++ {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16))
	}
	return ps
}()

// claimPool takes cfg's pool: the one the pool file records, else the
// explicit one, else (with a pool file) the first free one of AutoPools,
// recorded in the file for the next start. It returns the pool and its lock.
func claimPool(cfg Config) (netip.Prefix, *os.File, error) {
	if cfg.PoolFile == "" {
		lock, err := lockPool(cfg.RunDir, cfg.Pool)
		return cfg.Pool, lock, err
	}
	b, err := os.ReadFile(cfg.PoolFile)
	switch {
	case err == nil:
		p, err := netip.ParsePrefix(strings.TrimSpace(string(b)))
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("network pool recorded in %s: %w", cfg.PoolFile, err)
		}
		lock, err := lockPool(cfg.RunDir, p)
		return p, lock, err
	case !errors.Is(err, os.ErrNotExist):
		return netip.Prefix{}, nil, fmt.Errorf("network pool file: %w", err)
	}
	var tried []string
	for _, p := range AutoPools {
		lock, err := lockPool(cfg.RunDir, p)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if err := atomicfile.Write(cfg.PoolFile, []byte(p.String()+"\n"), 0o600); err != nil {
			lock.Close()
			return netip.Prefix{}, nil, fmt.Errorf("record network pool: %w", err)
		}
		return p, lock, nil
	}
	return netip.Prefix{}, nil, fmt.Errorf("no free network pool among %s-%s: %s",
		AutoPools[0], AutoPools[len(AutoPools)-1], tried[len(tried)-1])
}

// lockPool takes pool's lock in runDir and checks that nothing else on the
// host uses its addresses (checkPoolFree).
func lockPool(runDir string, pool netip.Prefix) (_ *os.File, err error) {
	if !pool.Addr().Is4() || pool.Bits() < 16 || pool.Bits() > 28 {
		return nil, fmt.Errorf("network pool %s: must be IPv4, /16 to /28", pool)
	}
	dir := poolDir(runDir, pool)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("network run dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("network pool lock: %w", err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("network pool %s is in use by another warren server on this host (give each its own --net-pool, or --net-pool auto): %w", pool, err)
	}
	if err := checkPoolFree(runDir, pool, true); err != nil {
		return nil, err
	}
	return lock, nil
}

// hostTable names the host's nftables table of pool's server.
func hostTable(pool netip.Prefix) string {
	b := pool.Addr().As4()
	return fmt.Sprintf("warren_%08x_%d", binary.BigEndian.Uint32(b[:]), pool.Bits())
}

// Release removes what a server left on the host for its pool once it is
// gone for good (a server keeps it across restarts, for its sandboxes):
// the host's rules of the pool, the resolver's address and the pool's run
// directory. It fails if a server holds the pool, or if a sandbox's
// router is still there.
func Release(runDir string, pool netip.Prefix) error {
	if runDir == "" {
		runDir = DefaultRunDir
	}
	pool = pool.Masked()
	dir := poolDir(runDir, pool)
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing of it is left
	}
	if err != nil {
		return fmt.Errorf("release network pool %s: %w", pool, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("release network pool %s: a server holds it: %w", pool, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("release network pool %s: %w", pool, err)
	}
	for _, e := range entries {
		if e.Name() != "lock" {
			return fmt.Errorf("release network pool %s: router %s is still there", pool, e.Name())
		}
	}
	var errs []error
	errs = append(errs, firewall.DeleteHost(hostTable(pool)))
	if lo, err := netlink.LinkByName("lo"); err == nil {
		addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(slotAddr(pool, 0, 1), 32))}
		if err := netlink.AddrDel(lo, addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("resolver address: %w", err))
		}
	}
	errs = append(errs, os.RemoveAll(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release network pool %s: %w", pool, err)
	}
	return nil
}

// poolDir is the run directory of pool: its routers' namespace files and
// its lock.
func poolDir(runDir string, pool netip.Prefix) string {
	b := pool.Addr().As4()
	return filepath.Join(runDir, fmt.Sprintf("%08x-%d", binary.BigEndian.Uint32(b[:]), pool.Bits()))
}

// checkPoolFree fails, naming what it found, when pool overlaps the pool of
// another live server in runDir, or an address or route of the host (in
// any routing table). With adopt (the caller holds pool's lock), pool's
// own are left out: the resolver address on loopback and the host ends of
// sandbox links, which an earlier run of pool's server left for the next.
func checkPoolFree(runDir string, pool netip.Prefix, adopt bool) error {
	if other, ok := overlappingLivePool(runDir, pool, adopt); ok {
		return fmt.Errorf("network pool %s overlaps pool %s of another warren server on this host", pool, other)
	}
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("network pool %s: list links: %w", pool, err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	resolver := slotAddr(pool, 0, 1)
	// own: on loopback only the resolver's /32; a sandbox link's host end
	// by its name, whatever its routes.
	own := func(link int, p netip.Prefix) bool {
		if !adopt {
			return false
		}
		name := names[link]
		if name == "lo" {
			return p == netip.PrefixFrom(resolver, 32)
		}
		a, ok := hostIfaceAddr(name)
		return ok && pool.Contains(a)
	}
	addrs, err := consistent(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("network pool %s: list addresses: %w", pool, err)
	}
	for _, a := range addrs {
		subnet, ok := prefixOf(a.IPNet)
		if !ok || !subnet.Overlaps(pool) {
			continue
		}
		addr, _ := netip.AddrFromSlice(a.IP.To4())
		if !own(a.LinkIndex, netip.PrefixFrom(addr, 32)) {
			return fmt.Errorf("network pool %s overlaps address %s/%d of %s on this host: choose another --net-pool", pool, addr, subnet.Bits(), names[a.LinkIndex])
		}
	}
	routes, err := consistent(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return fmt.Errorf("network pool %s: list routes: %w", pool, err)
	}
	for _, r := range routes {
		p, ok := prefixOf(r.Dst)
		// A throw route sends its lookups on to the next rule's table: it
		// holds no address.
		if !ok || p.Bits() == 0 || r.Type == unix.RTN_THROW || !p.Overlaps(pool) || own(r.LinkIndex, p) {
			continue
		}
		via := names[r.LinkIndex]
		if via == "" {
			via = "no interface"
		}
		return fmt.Errorf("network pool %s overlaps the host's route to %s (%s, table %d): choose another --net-pool", pool, p, via, r.Table)
	}
	return nil
}

// overlappingLivePool finds a pool in runDir that overlaps pool (other
// than pool itself when the caller holds its lock) and whose server holds
// its lock.
func overlappingLivePool(runDir string, pool netip.Prefix, locked bool) (netip.Prefix, bool) {
	entries, _ := os.ReadDir(runDir)
	for _, e := range entries {
		hex, bits, ok := strings.Cut(e.Name(), "-")
		if !ok {
			continue
		}
		base, err1 := strconv.ParseUint(hex, 16, 32)
		n, err2 := strconv.Atoi(bits)
		if err1 != nil || err2 != nil || n < 0 || n > 32 {
			continue
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(base))
		other := netip.PrefixFrom(netip.AddrFrom4(b), n)
		if (locked && other == pool) || !other.Overlaps(pool) {
			continue
		}
		if held(filepath.Join(runDir, e.Name(), "lock")) {
			return other, true
		}
	}
	return netip.Prefix{}, false
}

// held reports whether another process holds the lock file at path.
func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// hostIfaceAddr is the address a host link's name was made from
// (hostIface), if it is such a name.
func hostIfaceAddr(name string) (netip.Addr, bool) {
	hex, ok := strings.CutPrefix(name, IfacePrefix)
	if !ok || len(hex) != 8 {
		return netip.Addr{}, false
	}
	v, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return netip.Addr{}, false
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(v))
	return netip.AddrFrom4(b), true
}

// prefixOf converts an IPv4 net.IPNet; false for nil or IPv6.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a, bits).Masked(), true
}
