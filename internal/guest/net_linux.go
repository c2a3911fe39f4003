//go:build linux

package guest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sandbox's side of its network.
const (
	// Iface is the sandbox's interface.
	Iface = "eth0"
	// PrefixLen is the length of its network's prefix.
	PrefixLen = 24
)

var (
	// Address is the sandbox's own address.
	Address = netip.AddrFrom4([4]byte{10, 0, 2, 15})
	// Gateway is its router, which is also its DNS server.
	Gateway = netip.AddrFrom4([4]byte{10, 0, 2, 2})
	// GatewayMAC is the router's MAC address on the sandbox's link, the
	// same in every router: a VM resumed from memory (whose ARP cache
	// remembers the gateway) finds it at a new tap device.
	GatewayMAC = net.HardwareAddr{0x02, 0x00, 0x0a, 0x00, 0x02, 0x02}
)

// WriteFiles writes etc/hosts (localhost, and hostname at the sandbox's
// address) and etc/resolv.conf (the gateway) under root, replacing what is
// there, a symbolic link included.
func WriteFiles(root, hostname string) error {
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if hostname != "" {
		hosts += Address.String() + "\t" + hostname + "\n"
	}
	resolv := "nameserver " + Gateway.String() + "\noptions edns0 trust-ad\n"
	for name, content := range map[string]string{"hosts": hosts, "resolv.conf": resolv} {
		if err := replaceFile(filepath.Join(root, "etc", name), content); err != nil {
			return err
		}
	}
	return nil
}

func replaceFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// Up sets the interface name up.
func Up(name string) error {
	fd, err := socket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return up(fd, name)
}

func socket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("network socket: %w", err)
	}
	return fd, nil
}

func up(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("interface %s flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("interface %s up: %w", name, err)
	}
	return nil
}

// Configure gives Iface the sandbox's address, sets it up and routes
// everything through the gateway: what a VM's guest does at boot (a
// container's interface is configured from the host).
func Configure() error {
	fd, err := socket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, step := range []struct {
		req  uint
		addr netip.Addr
	}{
		{unix.SIOCSIFADDR, Address},
		{unix.SIOCSIFNETMASK, netip.AddrFrom4([4]byte{255, 255, 255, 0})},
	} {
		ifr, err := unix.NewIfreq(Iface)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(step.addr.AsSlice()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, step.req, ifr); err != nil {
			return fmt.Errorf("address of %s: %w", Iface, err)
		}
	}
	if err := up(fd, Iface); err != nil {
		return err
	}
	rt := rtentry{
		Dst:     inet4(netip.IPv4Unspecified()),
		Gateway: inet4(Gateway),
		Genmask: inet4(netip.IPv4Unspecified()),
		Flags:   unix.RTF_UP | unix.RTF_GATEWAY,
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCADDRT, uintptr(unsafe.Pointer(&rt))); errno != 0 {
		return fmt.Errorf("default route: %w", errno)
	}
	return nil
}

// rtentry is the kernel's struct rtentry (SIOCADDRT), on 64-bit Linux.
type rtentry struct {
	pad1    uint64
	Dst     unix.RawSockaddrInet4
	Gateway unix.RawSockaddrInet4
	Genmask unix.RawSockaddrInet4
	Flags   uint16
	pad2    int16
	pad3    uint64
	pad4    uintptr
	metric  int16
	dev     uintptr
	mtu     uint64
	window  uint64
	irtt    uint16
}

func inet4(a netip.Addr) unix.RawSockaddrInet4 {
	return unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
}
