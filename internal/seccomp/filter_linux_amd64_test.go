//go:build linux && amd64

package seccomp

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// bpfMaxInsns is the kernel's limit on a classic BPF program (BPF_MAXINSNS).
const bpfMaxInsns = 4096

func TestProgramAssembles(t *testing.T) {
	raw, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) == 0 || len(raw) >= bpfMaxInsns {
		t.Fatalf("program has %d instructions, want 1 to %d", len(raw), bpfMaxInsns-1)
	}
	t.Logf("%d instructions", len(raw))
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("program does not disassemble")
	}
	// The kernel accepts only 32-bit absolute loads of aligned words inside
	// struct seccomp_data (64 bytes).
	for i, in := range insts {
		if ld, isLoad := in.(bpf.LoadAbsolute); isLoad && (ld.Size != 4 || ld.Off%4 != 0 || ld.Off >= 64) {
			t.Errorf("instruction %d: %v is not a load the kernel accepts", i, in)
		}
	}
}

// seccompData is the input of one filter run.
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// run executes the filter in x/net/bpf's interpreter. The interpreter
// loads words big-endian while the kernel loads them in host (little-endian)
// order, so each 32-bit word is written big-endian at the offset where the
// kernel's little-endian layout has it: nr at 0, arch at 4, the low half of
// args[i] at 16+8i and the high half at 20+8i. The filter only makes
// aligned 32-bit loads (TestProgramAssembles), so this is exact.
func run(t *testing.T, vm *bpf.VM, d seccompData) uint32 {
	t.Helper()
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], d.nr)
	binary.BigEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	out, err := vm.Run(b)
	if err != nil {
		t.Fatalf("filter run on %+v: %v", d, err)
	}
	return uint32(out)
}

func newVM(t *testing.T) *bpf.VM {
	t.Helper()
	raw, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	insts, _ := bpf.Disassemble(raw)
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func retName(v uint32) string {
	switch v {
	case retAllow:
		return "ALLOW"
	case retKill:
		return "KILL_PROCESS"
	case retEPERM:
		return "EPERM"
	case retENOSYS:
		return "ENOSYS"
	}
	return fmt.Sprintf("%#x", v)
}

func TestFilterDecisions(t *testing.T) {
	vm := newVM(t)
	x86 := func(nr uint32, args ...uint64) seccompData {
		d := seccompData{nr: nr, arch: unix.AUDIT_ARCH_X86_64}
		copy(d.args[:], args)
		return d
	}
	// Flags Go's runtime passes to clone for a new thread, and that fork
	// and vfork pass.
	const goThread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD
	const vfork = unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | uint64(unix.SIGCHLD)
	for _, tc := range []struct {
		name string
		in   seccompData
		want uint32
	}{
		{"getpid", x86(unix.SYS_GETPID), retAllow},
		{"read", x86(unix.SYS_READ, 0, 0, 0), retAllow},
		{"ptrace", x86(unix.SYS_PTRACE), retAllow},
		{"process_vm_readv", x86(unix.SYS_PROCESS_VM_READV), retAllow},
		{"kcmp", x86(unix.SYS_KCMP), retAllow},
		{"mbind", x86(unix.SYS_MBIND), retAllow},
		{"move_pages", x86(unix.SYS_MOVE_PAGES), retAllow},
		{"execve", x86(unix.SYS_EXECVE), retAllow},
		{"nr above the table", x86(1000), retAllow},

		{"i386 getpid", seccompData{nr: 20, arch: unix.AUDIT_ARCH_I386}, retKill},
		{"i386 mount", seccompData{nr: 21, arch: unix.AUDIT_ARCH_I386}, retKill},
		{"aarch64", seccompData{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_AARCH64}, retKill},
		{"x32 getpid", x86(x32Bit | unix.SYS_GETPID), retKill},
		{"x32 mount", x86(x32Bit | unix.SYS_MOUNT), retKill},
		{"nr -1", x86(0xffffffff), retKill},

		{"mount", x86(unix.SYS_MOUNT), retEPERM},
		{"clone3", x86(unix.SYS_CLONE3), retENOSYS},

		{"clone thread", x86(unix.SYS_CLONE, goThread), retAllow},
		{"clone vfork", x86(unix.SYS_CLONE, vfork), retAllow},
		{"clone fork", x86(unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		// 0x80 in clone is part of the exit signal, not CLONE_NEWTIME.
		{"clone exit signal 0x80", x86(unix.SYS_CLONE, 0x80), retAllow},
		// The kernel ignores clone's high 32 bits.
		{"clone high bits only", x86(unix.SYS_CLONE, 0xffffffff00000000|uint64(unix.SIGCHLD)), retAllow},
		{"clone CLONE_NEWUSER|high", x86(unix.SYS_CLONE, 0xffffffff00000000|unix.CLONE_NEWUSER), retEPERM},
		{"clone -1", x86(unix.SYS_CLONE, ^uint64(0)), retEPERM},

		{"unshare 0", x86(unix.SYS_UNSHARE, 0), retAllow},
		{"unshare CLONE_FS|CLONE_FILES", x86(unix.SYS_UNSHARE, unix.CLONE_FS|unix.CLONE_FILES), retAllow},
		{"unshare CLONE_NEWTIME", x86(unix.SYS_UNSHARE, unix.CLONE_NEWTIME), retEPERM},
		{"unshare CLONE_NEWUSER|1<<40", x86(unix.SYS_UNSHARE, 1<<40|unix.CLONE_NEWUSER), retEPERM},

		{"personality query", x86(unix.SYS_PERSONALITY, 0xffffffff), retAllow},
		{"personality PER_LINUX", x86(unix.SYS_PERSONALITY, 0), retAllow},
		{"personality PER_LINUX32", x86(unix.SYS_PERSONALITY, 0x8), retAllow},
		{"personality UNAME26", x86(unix.SYS_PERSONALITY, 0x20000), retAllow},
		{"personality UNAME26|PER_LINUX32", x86(unix.SYS_PERSONALITY, 0x20008), retAllow},
		{"personality READ_IMPLIES_EXEC", x86(unix.SYS_PERSONALITY, 0x0400000), retEPERM},
		{"personality ADDR_NO_RANDOMIZE", x86(unix.SYS_PERSONALITY, 0x0040000), retEPERM},
		{"personality MMAP_PAGE_ZERO", x86(unix.SYS_PERSONALITY, 0x0100000), retEPERM},
		// The kernel takes personality's value as 32 bits.
		{"personality READ_IMPLIES_EXEC|1<<32", x86(unix.SYS_PERSONALITY, 1<<32|0x0400000), retEPERM},
		{"personality 1<<32", x86(unix.SYS_PERSONALITY, 1<<32), retAllow},
	} {
		if got := run(t, vm, tc.in); got != tc.want {
			t.Errorf("%s: filter returns %s, want %s", tc.name, retName(got), retName(tc.want))
		}
	}

	for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET} {
		if got := run(t, vm, x86(unix.SYS_CLONE, f|uint64(unix.SIGCHLD))); got != retEPERM {
			t.Errorf("clone(%#x|SIGCHLD): filter returns %s, want EPERM", f, retName(got))
		}
		if got := run(t, vm, x86(unix.SYS_UNSHARE, f)); got != retEPERM {
			t.Errorf("unshare(%#x): filter returns %s, want EPERM", f, retName(got))
		}
	}

	for _, r := range rules {
		if r.kind != denyEPERM {
			continue
		}
		if got := run(t, vm, x86(r.nr)); got != retEPERM {
			t.Errorf("%s: filter returns %s, want EPERM", r.name, retName(got))
		}
	}
}

func TestRules(t *testing.T) {
	seen := make(map[uint32]string)
	for _, r := range rules {
		if other, dup := seen[r.nr]; dup {
			t.Errorf("%s and %s share number %d: the second rule is dead", other, r.name, r.nr)
		}
		seen[r.nr] = r.name
	}
	denied := Denied()
	if !slices.IsSorted(denied) || len(denied) != len(rules) {
		t.Errorf("Denied() = %v: want %d sorted entries", denied, len(rules))
	}
	// What the sandbox must never be able to do, as the design lists it.
	for _, name := range []string{
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
		"swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
		"syslog", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
		"open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "lookup_dcookie", "quotactl",
		"quotactl_fd", "vhangup", "nfsservctl", "uselib", "create_module", "get_kernel_syms",
		"query_module", "_sysctl", "pivot_root", "mount", "umount2", "fsopen", "fsconfig", "fsmount",
		"fspick", "move_mount", "open_tree", "mount_setattr", "setns", "io_uring_setup",
		"io_uring_enter", "io_uring_register", "fanotify_init",
	} {
		if !slices.Contains(denied, name) {
			t.Errorf("Denied() lacks %s", name)
		}
	}
	for _, prefix := range []string{"clone (", "clone3 (ENOSYS)", "unshare (", "personality (except"} {
		if !slices.ContainsFunc(denied, func(s string) bool { return strings.HasPrefix(s, prefix) }) {
			t.Errorf("Denied() lacks an entry starting %q", prefix)
		}
	}
}
