//go:build linux && amd64

package seccomp

import (
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// x32Bit marks x32 syscall numbers (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// rules are the syscalls the filter refuses. The argument-checking rules
// come first: they are the only ones hot code reaches (clone on every fork
// and thread). Everything else the kernel answers from its per-syscall
// cache of constant filter results (Linux 5.11+) without running the
// filter at all, so the length of the list costs nothing.
var rules = []rule{
	{"clone", unix.SYS_CLONE, denyCloneNS},
	{"unshare", unix.SYS_UNSHARE, denyUnshareNS},
	{"personality", unix.SYS_PERSONALITY, denyPersonality},
	{"clone3", unix.SYS_CLONE3, denyENOSYS},

	// Namespaces: entering another one.
	{"setns", unix.SYS_SETNS, denyEPERM},

	// Mounts, old and new API.
	{"mount", unix.SYS_MOUNT, denyEPERM},
	{"umount2", unix.SYS_UMOUNT2, denyEPERM},
	{"pivot_root", unix.SYS_PIVOT_ROOT, denyEPERM},
	{"fsopen", unix.SYS_FSOPEN, denyEPERM},
	{"fsconfig", unix.SYS_FSCONFIG, denyEPERM},
	{"fsmount", unix.SYS_FSMOUNT, denyEPERM},
	{"fspick", unix.SYS_FSPICK, denyEPERM},
	{"move_mount", unix.SYS_MOVE_MOUNT, denyEPERM},
	{"open_tree", unix.SYS_OPEN_TREE, denyEPERM},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR, denyEPERM},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR, denyEPERM},

	// Kernel code and machine state.
	{"kexec_load", unix.SYS_KEXEC_LOAD, denyEPERM},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, denyEPERM},
	{"init_module", unix.SYS_INIT_MODULE, denyEPERM},
	{"finit_module", unix.SYS_FINIT_MODULE, denyEPERM},
	{"delete_module", unix.SYS_DELETE_MODULE, denyEPERM},
	{"create_module", unix.SYS_CREATE_MODULE, denyEPERM},
	{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS, denyEPERM},
	{"query_module", unix.SYS_QUERY_MODULE, denyEPERM},
	{"reboot", unix.SYS_REBOOT, denyEPERM},
	{"swapon", unix.SYS_SWAPON, denyEPERM},
	{"swapoff", unix.SYS_SWAPOFF, denyEPERM},
	{"acct", unix.SYS_ACCT, denyEPERM},
	{"_sysctl", unix.SYS__SYSCTL, denyEPERM},
	{"nfsservctl", unix.SYS_NFSSERVCTL, denyEPERM},
	{"uselib", unix.SYS_USELIB, denyEPERM},
	{"quotactl", unix.SYS_QUOTACTL, denyEPERM},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD, denyEPERM},
	{"vhangup", unix.SYS_VHANGUP, denyEPERM},
	{"iopl", unix.SYS_IOPL, denyEPERM},
	{"ioperm", unix.SYS_IOPERM, denyEPERM},

	// Clocks: the host's time is shared by every tenant.
	{"settimeofday", unix.SYS_SETTIMEOFDAY, denyEPERM},
	{"clock_settime", unix.SYS_CLOCK_SETTIME, denyEPERM},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME, denyEPERM},
	{"adjtimex", unix.SYS_ADJTIMEX, denyEPERM},

	// Kernel information leaks and large attack surfaces.
	{"syslog", unix.SYS_SYSLOG, denyEPERM},
	{"bpf", unix.SYS_BPF, denyEPERM},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, denyEPERM},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, denyEPERM},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT, denyEPERM},
	{"userfaultfd", unix.SYS_USERFAULTFD, denyEPERM},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, denyEPERM},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER, denyEPERM},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER, denyEPERM},

	// Keyrings are not namespaced.
	{"keyctl", unix.SYS_KEYCTL, denyEPERM},
	{"add_key", unix.SYS_ADD_KEY, denyEPERM},
	{"request_key", unix.SYS_REQUEST_KEY, denyEPERM},

	// File handles open any file on a mount, ignoring the path walk.
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, denyEPERM},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, denyEPERM},
}

// Program assembles the filter: the architecture check, the x32 check, one
// test per rule, and allow.
func Program() ([]bpf.RawInstruction, error) {
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
		bpf.RetConstant{Val: retKill},
	}
	for _, r := range rules {
		body := r.body()
		// Every body ends in a return, so A still holds nr at each test.
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: r.nr, SkipFalse: uint8(len(body))})
		p = append(p, body...)
	}
	p = append(p, bpf.RetConstant{Val: retAllow})
	raw, err := bpf.Assemble(p)
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	return raw, nil
}
