//go:build linux

package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"warren/internal/netnsfile"
	"warren/internal/network/policy"
)

// Adopt takes back the router an earlier daemon made for a sandbox, at its
// recorded slot, and writes its rules again from pol.
func (n *Node) Adopt(id string, slot int, pol policy.Policy, eg Egress) (_ *Sandbox, err error) {
	s, err := n.register(id, slot, pol)
	if err != nil {
		return nil, err
	}
	s.eg = eg
	defer func() {
		if err != nil {
			n.unregister(s, Counters{})
			s.closeNS()
		}
	}()
	if err := s.openNS(); err != nil {
		return nil, fmt.Errorf("router of sandbox %s is gone: %w", id, err)
	}
	if _, err := netlink.LinkByName(s.host); err != nil {
		return nil, fmt.Errorf("link of sandbox %s is gone: %w", id, err)
	}
	if err := s.apply(); err != nil {
		return nil, err
	}
	return s, nil
}

// Sweep removes the routers and host links of this node's pool that no
// registered router (adopted, attached or warm) owns. Links of other pools
// (another warren server) are left alone.
func (n *Node) Sweep() error {
	owned, paths := map[string]bool{}, map[string]bool{}
	n.mu.Lock()
	for _, s := range n.bySlot {
		owned[s.host], paths[s.nsPath] = true, true
	}
	n.mu.Unlock()
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(n.dir, e.Name())
		if e.Name() == "lock" || paths[path] {
			continue
		}
		n.log.Info("removing leftover sandbox router", "router", e.Name())
		errs = append(errs, netnsfile.Remove(path))
	}
	links, err := consistent(netlink.LinkList)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, IfacePrefix) || owned[name] || !n.inPool(l) {
			continue
		}
		n.log.Info("removing leftover sandbox link", "link", name)
		errs = append(errs, delLink(l))
	}
	return errors.Join(errs...)
}

// consistent runs a netlink dump again while the kernel says it was
// interrupted (the table changed while it was read: say, a veth the kernel
// removes by itself once its namespace is gone), a few times at most.
func consistent[T any](dump func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 10 {
			return v, err
		}
	}
}

// delLink deletes a host link. One that is already gone is not an error:
// the kernel removes a veth pair on its own, asynchronously, once the
// namespace holding its other end is gone.
func delLink(l netlink.Link) error {
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("remove link %s: %w", l.Attrs().Name, err)
	}
	return nil
}

// inPool reports whether a host link has an address of the node's pool.
func (n *Node) inPool(l netlink.Link) bool {
	addrs, err := consistent(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && n.cfg.Pool.Contains(ip) {
			return true
		}
	}
	return false
}
