//go:build linux

package seccomp

import (
	"fmt"
	"strings"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Return values of the filter (linux/seccomp.h).
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// Offsets of the fields the filter reads in struct seccomp_data
// (linux/seccomp.h): int nr; __u32 arch; __u64 instruction_pointer;
// __u64 args[6]. The filter loads 32-bit words; on a little-endian machine
// the low half of args[0] is the word at 16.
const (
	offNr     = 0
	offArch   = 4
	offArg0Lo = 16
)

// nsFlags are the namespace-creating flags of unshare(2).
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// cloneNSFlags are the namespace-creating flags of clone(2). CLONE_NEWTIME
// (0x80) is left out: clone's low byte is the exit signal (CSIGNAL), and
// clone cannot make a time namespace (only unshare and clone3 can).
const cloneNSFlags = nsFlags &^ unix.CLONE_NEWTIME

// Personality values (linux/personality.h) that the filter lets through;
// any other value is denied: the rest weaken exploit mitigations
// (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO…).
const (
	perLinux      = 0x0000000
	perLinux32    = 0x0000008
	perUname26    = 0x0020000
	perQuery      = 0xffffffff // personality(0xffffffff) reads without setting
	perLinux32U26 = perLinux32 | perUname26
)

var allowedPersonalities = []uint32{perLinux, perLinux32, perUname26, perLinux32U26, perQuery}

// kind is what a rule does with a matching syscall.
type kind int

const (
	// denyEPERM refuses the syscall whatever its arguments.
	denyEPERM kind = iota
	// denyENOSYS refuses it as if the kernel did not have it.
	denyENOSYS
	// denyCloneNS refuses clone when its flags create a namespace.
	denyCloneNS
	// denyUnshareNS refuses unshare when its flags create a namespace.
	denyUnshareNS
	// denyPersonality refuses personality values outside
	// allowedPersonalities.
	denyPersonality
)

// rule is one syscall the filter treats specially.
type rule struct {
	name string
	nr   uint32
	kind kind
}

// body is the code run when the syscall number matched. It always ends in
// a return, so control never falls through into the next rule.
func (r rule) body() []bpf.Instruction {
	loadArg0 := bpf.LoadAbsolute{Off: offArg0Lo, Size: 4}
	switch r.kind {
	case denyENOSYS:
		return []bpf.Instruction{bpf.RetConstant{Val: retENOSYS}}
	case denyCloneNS, denyUnshareNS:
		mask := uint32(nsFlags)
		if r.kind == denyCloneNS {
			mask = cloneNSFlags
		}
		return []bpf.Instruction{
			loadArg0,
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: mask, SkipFalse: 1},
			bpf.RetConstant{Val: retEPERM},
			bpf.RetConstant{Val: retAllow},
		}
	case denyPersonality:
		b := []bpf.Instruction{loadArg0}
		for i, v := range allowedPersonalities {
			// On a match, skip the remaining tests and the EPERM.
			skip := len(allowedPersonalities) - i
			b = append(b, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(skip)})
		}
		return append(b, bpf.RetConstant{Val: retEPERM}, bpf.RetConstant{Val: retAllow})
	default:
		return []bpf.Instruction{bpf.RetConstant{Val: retEPERM}}
	}
}

// describe is the rule as Denied lists it.
func (r rule) describe() string {
	switch r.kind {
	case denyENOSYS:
		return r.name + " (ENOSYS)"
	case denyCloneNS, denyUnshareNS:
		return r.name + " (with any CLONE_NEW* flag)"
	case denyPersonality:
		var vs []string
		for _, v := range allowedPersonalities {
			vs = append(vs, fmt.Sprintf("%#x", v))
		}
		return r.name + " (except " + strings.Join(vs, ", ") + ")"
	default:
		return r.name
	}
}
