//go:build linux

package qemu

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"warren/internal/cgroup"
	"warren/internal/hostclaim"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
)

// Defaults of Options.
const (
	DefaultBinary         = "/usr/bin/qemu-system-x86_64"
	DefaultJailMountpoint = "/run/warren/vmm-root"
	// DefaultUIDBase is far above any uid a host hands out, and above the
	// container runtime's ranges (200,000,000 + 65,536 per sandbox).
	DefaultUIDBase  = 3_000_000_000
	DefaultUIDCount = 65536
)

// Resource limits beyond what the guest was given.
const (
	// memOverhead is the VMM's own memory: QEMU's heap, device emulation,
	// firmware copies, I/O buffers. Measured under TCG with a 128 MiB guest
	// running SeaBIOS: 24 MiB charged; the rest is headroom. The guest's
	// memory itself is charged as it is touched, and all of it may be: a
	// memory save reads every page, which on some kernels (the PVM hosts
	// warren is built on) allocates even the pages the guest never used.
	memOverhead = 96 << 20
	// tcgOverhead is TCG's translated-code buffer (tb-size), touched as
	// the guest runs.
	tcgOverhead = tcgTBSizeMiB << 20
	// pidsOverhead covers QEMU's threads besides one per vCPU: main loop,
	// RCU, migration, and up to 64 block I/O workers.
	pidsOverhead = 96
)

// Options configure the QEMU VMM.
type Options struct {
	// Binary is the QEMU system emulator, under /usr (the jail shows only
	// /usr). Default DefaultBinary.
	Binary string
	// Cgroups is the host's cgroup hierarchy; each machine gets the group
	// named by its Config.ID. Required.
	Cgroups *cgroup.Hierarchy
	// UIDBase and UIDCount are the host uids (used as gids too) machines
	// run as: each live machine takes the lowest free one, so no two
	// machines share a uid. Defaults DefaultUIDBase and DefaultUIDCount.
	UIDBase, UIDCount uint32
	// JailMountpoint is an empty directory jails mount their roots on, in
	// their own mount namespaces only. Default DefaultJailMountpoint; New
	// creates it.
	JailMountpoint string
	// Log receives the VMM's logs; nil discards them.
	Log *slog.Logger
}

// VMM starts QEMU machines. It is safe for concurrent use.
type VMM struct {
	opts Options
	log  *slog.Logger

	claims *hostclaim.Set      // the uids, unique on the host across warren servers
	uidMu  sync.Mutex          // guards uids
	uids   map[uint32]*os.File // uids held by live machines, with their host-wide claims
}

// fdClaim is QEMU's descriptor of its uid's host-wide claim (package
// hostclaim), which it holds, unused, for its life: the first it inherits.
const fdClaim = 3

// New checks opts and prepares the jail mountpoint.
func New(opts Options) (*VMM, error) {
	if opts.Cgroups == nil {
		return nil, errors.New("qemu: Options.Cgroups is required")
	}
	if opts.Binary == "" {
		opts.Binary = DefaultBinary
	}
	if opts.UIDBase == 0 {
		opts.UIDBase = DefaultUIDBase
	}
	if opts.UIDCount == 0 {
		opts.UIDCount = DefaultUIDCount
	}
	if uint64(opts.UIDBase)+uint64(opts.UIDCount) > 1<<32-1 {
		return nil, fmt.Errorf("qemu: uid range %d+%d overflows", opts.UIDBase, opts.UIDCount)
	}
	if opts.JailMountpoint == "" {
		opts.JailMountpoint = DefaultJailMountpoint
	}
	if fi, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	} else if fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("qemu: %s is not executable", opts.Binary)
	}
	if err := os.MkdirAll(opts.JailMountpoint, 0o755); err != nil {
		return nil, fmt.Errorf("qemu: jail mountpoint: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	claims, err := hostclaim.Open(fmt.Sprintf("vm-uids-%d", opts.UIDBase))
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return &VMM{opts: opts, log: log.With("vmm", "qemu"), claims: claims, uids: map[uint32]*os.File{}}, nil
}

func (v *VMM) allocUID() (uint32, *os.File, error) {
	v.uidMu.Lock()
	defer v.uidMu.Unlock()
	i, claim, err := v.claims.Take(int(v.opts.UIDCount), func(i int) bool {
		_, held := v.uids[v.opts.UIDBase+uint32(i)]
		return held
	})
	if err != nil {
		return 0, nil, fmt.Errorf("machine uid: %w", err)
	}
	uid := v.opts.UIDBase + uint32(i)
	v.uids[uid] = claim
	return uid, claim, nil
}

// reserveUID marks uid, of the VMM's range, held by the machine of process
// pidfd, taking its host-wide claim back from it (a QEMU of a daemon from
// before the claims holds none: the uid is then claimed here if no one
// else has it).
func (v *VMM) reserveUID(uid uint32, pidfd int) error {
	if uid < v.opts.UIDBase || uid-v.opts.UIDBase >= v.opts.UIDCount {
		return fmt.Errorf("uid %d is not one of the machine uids [%d, %d)", uid, v.opts.UIDBase, uint64(v.opts.UIDBase)+uint64(v.opts.UIDCount))
	}
	v.uidMu.Lock()
	defer v.uidMu.Unlock()
	if _, held := v.uids[uid]; held {
		return fmt.Errorf("uid %d is held by another machine", uid)
	}
	i := int(uid - v.opts.UIDBase)
	claim, err := v.claims.Adopt(i, pidfd, fdClaim)
	if err != nil {
		var taken error
		if _, claim, taken = v.claims.Take(i+1, func(j int) bool { return j != i }); taken != nil {
			v.log.Error("attached machine's uid is not claimed host-wide", "uid", uid, "err", errors.Join(err, taken))
		}
	}
	v.uids[uid] = claim
	return nil
}

func (v *VMM) freeUID(uid uint32) {
	v.uidMu.Lock()
	claim := v.uids[uid]
	delete(v.uids, uid)
	v.uidMu.Unlock()
	if claim != nil {
		claim.Close()
	}
}

// limits are the cgroup limits of a machine.
func limits(cfg *vmm.Config) cgroup.Limits {
	mem := int64(cfg.MemoryMiB)<<20 + memOverhead
	if cfg.Accel == accel.TCG {
		mem += tcgOverhead
	}
	return cgroup.Limits{
		// The VMM's own threads share the vCPUs' budget: a machine never
		// uses more CPU than it was given.
		CPUs:        float64(cfg.VCPUs),
		MemoryBytes: mem,
		Pids:        int64(cfg.VCPUs) + pidsOverhead,
	}
}
