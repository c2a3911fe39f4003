//go:build linux

package network

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"warren/internal/guest"
)

// PlugNetNS implements runtime.Network: a veth pair from the router to the
// namespace at path, whose end is guest.Iface with the sandbox's address
// and a default route through the router.
func (s *Sandbox) PlugNetNS(path string) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("sandbox network namespace: %w", err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(s.ns)
	if err != nil {
		return fmt.Errorf("router netlink: %w", err)
	}
	defer h.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: routerSandboxIface, HardwareAddr: guest.GatewayMAC},
		PeerName:  guest.Iface, PeerNamespace: netlink.NsFd(target),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("sandbox link: %w", err)
	}
	if err := s.routerSide(h); err != nil {
		return err
	}
	th, err := netlink.NewHandleAt(target)
	if err != nil {
		return fmt.Errorf("sandbox netlink: %w", err)
	}
	defer th.Close()
	if err := up(th, guest.Iface, netip.PrefixFrom(guest.Address, guest.PrefixLen)); err != nil {
		return err
	}
	if err := th.RouteAdd(&netlink.Route{Gw: guest.Gateway.AsSlice()}); err != nil {
		return fmt.Errorf("sandbox default route: %w", err)
	}
	return nil
}

// routerSide addresses and shapes the router's end of the sandbox link.
func (s *Sandbox) routerSide(h *netlink.Handle) error {
	if err := up(h, routerSandboxIface, netip.PrefixFrom(guest.Gateway, guest.PrefixLen)); err != nil {
		return err
	}
	return s.n.shape(h, routerSandboxIface)
}

// Tap implements runtime.Network: a new tap device as the router's end of
// the sandbox link (replacing an earlier one, whose VMM has gone), and its
// descriptor for the VMM. The device lives as long as a descriptor of it
// is open.
func (s *Sandbox) Tap() (*os.File, error) {
	h, err := netlink.NewHandleAt(s.ns)
	if err != nil {
		return nil, fmt.Errorf("router netlink: %w", err)
	}
	defer h.Close()
	if old, err := h.LinkByName(routerSandboxIface); err == nil {
		if err := h.LinkDel(old); err != nil {
			return nil, fmt.Errorf("remove old tap: %w", err)
		}
	}
	name := tapPrefix + strings.TrimPrefix(s.host, IfacePrefix)
	f, err := openTap(name)
	if err != nil {
		return nil, err
	}
	link, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.LinkSetNsFd(link, int(s.ns))
	}
	if err == nil {
		link, err = h.LinkByName(name)
	}
	if err == nil {
		err = h.LinkSetName(link, routerSandboxIface)
	}
	if err == nil {
		err = h.LinkSetHardwareAddr(link, guest.GatewayMAC)
	}
	if err == nil {
		err = s.routerSide(h)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tap: %w", err)
	}
	return f, nil
}

// openTap makes a tap device (no packet information header) and returns
// its descriptor.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}
