package qemu

import (
	"fmt"
	"strconv"

	"warren/internal/vmm"
	"warren/internal/vmm/accel"
)

// AgentPortName is the name of the virtio-serial port that carries the
// guest agent's channel; the guest finds it at /dev/virtio-ports/<name>.
const AgentPortName = "warren.agent"

// GuestMAC is the MAC address of a guest's network device: locally
// administered, and the same in every guest (each is alone on its link).
const GuestMAC = "02:00:0a:00:02:0f"

// tcgTBSizeMiB caps TCG's translated-code buffer. QEMU 7.2 defaults to
// 1 GiB, which a busy guest can fill and which the machine's memory limit
// would then have to cover.
const tcgTBSizeMiB = 128

// Paths inside the jail of the files bound there read-only.
const (
	jailKernel = "/vm/kernel"
	jailInitrd = "/vm/initrd"
)

// Cache modes of a disk.
const (
	// cacheNone opens the image with O_DIRECT: the guest's page cache is
	// the only cache. Nothing is cached twice, the host page cache is not
	// charged to the machine's memory cgroup (so guest I/O can neither grow
	// the VMM past its limit through it nor evict other tenants' cache),
	// and a guest flush is an fdatasync of the image. The default.
	cacheNone = "none"
	// cacheWriteback goes through the host page cache; guest flushes are
	// still honoured (fdatasync), so it is as safe, but caches twice and
	// charges the cache to the machine. Used only when the image's
	// filesystem refuses O_DIRECT.
	cacheWriteback = "writeback"
)

// layout is how QEMU sees a machine's resources: descriptors it inherits
// and paths inside its jail. Descriptor numbers are those in QEMU.
type layout struct {
	qmpFD     int     // listening socket of QMP
	agentFD   int     // listening socket of the agent's channel
	root      diskFDs // the root disk
	workspace diskFDs // the workspace disk; rw 0 when there is none
	consoleFD int     // the console log, append-only
	tapFD     int     // the network device's tap; 0 when there is none
	restore   bool    // start with -incoming defer
}

// diskFDs are one disk image's descriptors: QEMU opens an image both ways.
// nbd, when not 0, is instead a connection to an NBD server of the disk.
type diskFDs struct {
	rw, ro int
	cache  string // cacheNone or cacheWriteback
	nbd    int
}

// Fd sets of -add-fd; /dev/fdset/N names them in QEMU's options.
const (
	diskFdset      = 1
	consoleFdset   = 2
	workspaceFdset = 3
)

// commandLine builds QEMU's arguments (after argv[0]) for cfg as l lays it
// out. cfg must be valid.
//
// Every resource that needs write access reaches QEMU as an inherited
// descriptor, never as a host path: the listening sockets (bound by the
// node), the disks and the console log (through -add-fd fd sets, which
// QEMU's block layer and file chardev open like paths). So QEMU runs as
// an unprivileged uid in a jail that shows none of those paths, and nothing
// needs chown. Only the kernel and initrd are paths, bound read-only into
// the jail.
//
// The machine always starts with its vCPUs stopped (-S): the node moves
// QEMU into its cgroup and, for a restore, loads the snapshot (-incoming
// defer) before the guest runs an instruction.
func commandLine(cfg *vmm.Config, l layout) []string {
	kvm := cfg.Accel == accel.KVM
	dev := func(name string) string {
		// microvm has no PCI bus: its virtio devices are virtio-mmio.
		if kvm {
			return name + "-device"
		}
		return name + "-pci"
	}
	machine := "q35"
	if kvm {
		// microvm is the lean machine under KVM; under TCG it stalls in the
		// guest's TSC calibration, so TCG gets q35.
		machine = "microvm"
	}
	args := []string{
		"-name", "guest=" + cfg.ID + ",debug-threads=on",
		// dump-guest-core=off: no guest memory in a VMM core dump.
		// mem-merge=off: no KSM merging of guest pages with other guests'
		// (a cross-tenant timing side channel).
		"-machine", machine + ",dump-guest-core=off,mem-merge=off",
	}
	if kvm {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg,tb-size="+strconv.Itoa(tcgTBSizeMiB))
	}
	args = append(args,
		"-m", strconv.Itoa(cfg.MemoryMiB)+"M",
		"-smp", strconv.Itoa(cfg.VCPUs),
		"-nodefaults", "-no-user-config", "-nographic",
		// A guest reboot ends the machine rather than rebooting it: a
		// sandbox that reboots has lost its agent's state anyway.
		"-no-reboot",
		"-S",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", l.qmpFD),
		"-mon", "chardev=qmp,mode=control",
	)
	if cfg.Kernel != "" {
		args = append(args, "-kernel", jailKernel)
		if cfg.Initrd != "" {
			args = append(args, "-initrd", jailInitrd)
		}
		if cfg.Cmdline != "" {
			args = append(args, "-append", cfg.Cmdline)
		}
	}
	// The root disk first, so that the guest finds it first (/dev/vda),
	// then the workspace disk (/dev/vdb).
	args = appendDisk(args, dev("virtio-blk"), "root", "disk", diskFdset, l.root)
	if l.workspace.rw != 0 {
		args = appendDisk(args, dev("virtio-blk"), "workspace", "workspace", workspaceFdset, l.workspace)
	}
	args = append(args,
		// append=on: QEMU re-sets the status flags of an fd set's
		// descriptor to those it would open with; without it, it clears
		// O_APPEND and writes over the log from offset 0.
		"-add-fd", fmt.Sprintf("fd=%d,set=%d,opaque=console", l.consoleFD, consoleFdset),
		"-chardev", fmt.Sprintf("file,id=console,path=/dev/fdset/%d,append=on", consoleFdset),
		"-serial", "chardev:console",
		"-device", dev("virtio-serial")+",id=vser0",
		"-chardev", fmt.Sprintf("socket,id=agent,fd=%d,server=on,wait=off", l.agentFD),
		"-device", "virtserialport,bus=vser0.0,chardev=agent,name="+AgentPortName,
	)
	if l.tapFD != 0 {
		args = append(args,
			"-netdev", fmt.Sprintf("tap,id=net0,fd=%d", l.tapFD),
			"-device", dev("virtio-net")+",netdev=net0,mac="+GuestMAC,
		)
	}
	if cfg.RNG {
		args = append(args,
			"-object", "rng-builtin,id=rng0",
			"-device", dev("virtio-rng")+",rng=rng0",
		)
	}
	if l.restore {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// appendDisk adds a disk as device (virtio-blk-pci or -device): drive id,
// its descriptors d in fd set set, their opaque names prefixed by opaque.
//
// QEMU opens the image read-only and read-write at different times; an fd
// set answers each open with a descriptor of the same access mode.
// file.locking=off: the image locks are OFD locks, which a descriptor kept
// in the fd set holds on QEMU's behalf even after QEMU closed its copy, so
// QEMU would lock itself out when it reactivates the image after a memory
// save. warren gives each image to one machine; it does not need QEMU's
// locks.
//
// discard=unmap: the guest's discards (its ext4 is mounted with discard)
// become holes punched in the image, so what the guest frees goes back to
// the pool; on a reflink clone a punch only drops the clone's share of the
// template's blocks. detect-zeroes=unmap turns writes of zeros (dd from
// /dev/zero, a zeroed journal) into holes too; the price is a scan of each
// write's buffer, which stops at its first non-zero byte. virtio-blk offers
// the guest discard whatever the drive says, so this changes nothing the
// guest sees, and memory snapshots of older machines still restore.
//
// An NBD disk (an always-on disk's block server) is attached by QEMU's own
// client over the connection it is given. cache=writeback: the guest sees a
// volatile write cache, so its fsyncs become FLUSH requests, which the block
// server answers only once the data is durable in its tiers.
func appendDisk(args []string, device, id, opaque string, set int, d diskFDs) []string {
	if d.nbd != 0 {
		return append(args,
			"-drive", fmt.Sprintf("if=none,id=%s,format=raw,file.driver=nbd,file.server.type=fd,file.server.str=%d,cache=writeback,discard=unmap,detect-zeroes=unmap", id, d.nbd),
			"-device", device+",drive="+id,
		)
	}
	return append(args,
		"-add-fd", fmt.Sprintf("fd=%d,set=%d,opaque=%s-rw", d.rw, set, opaque),
		"-add-fd", fmt.Sprintf("fd=%d,set=%d,opaque=%s-ro", d.ro, set, opaque),
		"-drive", fmt.Sprintf("if=none,id=%s,format=raw,file=/dev/fdset/%d,cache=%s,file.locking=off,discard=unmap,detect-zeroes=unmap", id, set, d.cache),
		"-device", device+",drive="+id,
	)
}
