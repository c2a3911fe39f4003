//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/guest"
)

// A guest restored from a memory image (the vm runtime's) wakes with the
// saved machine's clock, random state and identity, the same in every copy
// of the image. Init gives it its own: a machine ID, the host's time, and a
// seed from the host's generator that the kernel's generator reseeds from
// before anyone reads it again.

// ownsRoot reports whether the files of / are the sandbox's own to write.
func (s *Server) ownsRoot() bool { return s.opts.OwnsRoot || s.opts.Guest }

// ownKernel reports whether the kernel is the sandbox's own (Options.OwnKernel).
func (s *Server) ownKernel() bool { return s.opts.OwnKernel || s.opts.Guest }

// identityFile logs that the identity file at path could not be written
// (err non-nil). It does not fail Init: the sandbox's own root may refuse
// (a read-only or immutable /etc), which harms only the sandbox.
func (s *Server) identityFile(path string, err error) {
	if err != nil {
		s.log.Warn("identity file not written", "path", path, "err", err)
	}
}

// MinRandomSeed is the least seed Init takes: the kernel's generator keys
// itself with 32 bytes.
const MinRandomSeed = 32

// The random(4) ioctls, from linux/random.h: RNDADDENTROPY is
// _IOW('R', 0x03, int[2]), RNDRESEEDCRNG _IO('R', 0x07).
const (
	rndAddEntropy = 0x40085203
	rndReseedCRNG = 0x5207
)

// identity checks req's machine ID, clock and random seed, then applies
// them: nothing is changed when one is refused.
func (s *Server) identity(req *controlpb.InitRequest) error {
	id, ns, seed := req.GetMachineId(), req.GetClockUnixNano(), req.GetRandomSeed()
	switch {
	case id != "" && (len(id) != 32 || !isLowerHex(id)):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("machine id %q is not 32 lowercase hex digits", id))
	case len(seed) > 0 && (len(seed) < MinRandomSeed || len(seed) > 4096 || len(seed)%4 != 0):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("random seed of %d bytes: want a multiple of 4 from %d to 4096", len(seed), MinRandomSeed))
	case (ns != 0 || len(seed) > 0) && !s.opts.Guest:
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("only a VM guest's agent sets the clock or reseeds the kernel's generator"))
	}
	if len(seed) > 0 {
		if err := reseed(seed); err != nil {
			return err
		}
	}
	if ns != 0 {
		ts := unix.NsecToTimespec(ns)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return connect.NewError(errnoCode(err), fmt.Errorf("set the clock: %w", err))
		}
	}
	if id != "" && s.ownsRoot() {
		s.identityFile("/etc/machine-id", replaceFile("/etc/machine-id", id+"\n", 0o444))
	}
	return nil
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// replaceFile writes content to a new file beside path and renames it over
// path, so that a reader sees the old file or the new one, and a link at
// path is replaced rather than followed.
func replaceFile(path, content string, mode os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d", filepath.Base(path), time.Now().UnixNano()))
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// reseed adds seed to the kernel's input pool, credited in full (it comes
// from the host's generator), and reseeds the kernel's generator from the
// pool at once: without the second step it would go on with the state it
// was saved with until its next scheduled reseed, up to a minute later.
func reseed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("reseed: %w", err))
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(seed)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return connect.NewError(errnoCode(e), fmt.Errorf("add the host's seed to the kernel's pool: %w", e))
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return connect.NewError(errnoCode(e), fmt.Errorf("reseed the kernel's generator: %w", e))
	}
	return nil
}

// hostnameFile makes /etc/hostname name hostname, unless it does.
func hostnameFile(hostname string) error {
	if b, err := os.ReadFile("/etc/hostname"); err == nil && string(b) == hostname+"\n" {
		return nil
	}
	return replaceFile("/etc/hostname", hostname+"\n", 0o644)
}

// guestHosts rewrites a guest's /etc/hosts (and /etc/resolv.conf) for a
// new hostname, when it has a network.
func guestHosts(hostname string) error {
	if _, err := net.InterfaceByName(guest.Iface); err != nil {
		return nil // no network
	}
	return guest.WriteFiles("/", hostname)
}
