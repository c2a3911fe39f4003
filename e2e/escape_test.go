//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/consolelog"
	"warren/internal/mountinfo"
	"warren/internal/procid"
	"warren/internal/wait"
)

// Escape attempts from inside a sandbox, as its root (and as its
// unprivileged user where that is the point). Each must fail; the table in
// docs/SECURITY.md lists them. Network probes only ever target loopback or
// a test namespace this test builds, so nothing leaves the machine even if
// isolation were broken.
//
// Every test runs once per runtime of escapeRuntimes, on sandboxes created
// with that runtime by name. Under gvisor the sandbox's system calls are
// served by gVisor's kernel (the Sentry), not the host's: some calls a
// container refuses succeed there and act on the Sentry only, and /proc,
// /sys and /dev are its own emulations. Where a check differs for gvisor it
// says why, and checks instead that the host is not reached. The vm runtime
// has its own suite (vm_escape_test.go); gVisor's own rows are in
// escape_gvisor_test.go.

// escapeRuntimes are the runtimes the escape suite attacks.
var escapeRuntimes = []string{"container", "gvisor"}

// eachRuntime runs f as a subtest per runtime of escapeRuntimes; one the
// daemon lacks or says is unavailable skips with the daemon's reason.
func eachRuntime(t *testing.T, f func(t *testing.T, rt string)) {
	t.Helper()
	need(t)
	for _, rt := range escapeRuntimes {
		t.Run(rt, func(t *testing.T) {
			runtimeInfo(t, rt)
			f(t, rt)
		})
	}
}

// inSandbox runs a shell command line in sandbox id and returns its result.
func inSandbox(t *testing.T, id, user, script string) *api.ExecResult {
	t.Helper()
	res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{
		Shell: script, User: user, TimeoutMs: 20000,
	})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// python runs a python3 program in the sandbox as root.
func python(t *testing.T, id, program string) *api.ExecResult {
	t.Helper()
	res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{
		Cmd: []string{"python3", "-c", program}, TimeoutMs: 20000,
	})
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	return res
}

// syscallProbe is a python3 prelude: call(name, nr, *args) makes the raw
// x86_64 syscall nr and prints name and its errno name, or "OK".
const syscallProbe = `
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno()
    print(name, "OK" if r >= 0 else errno.errorcode.get(e, str(e)))
`

func TestEscapeFilesystem(t *testing.T) {
	eachRuntime(t, escapeFilesystem)
}

func escapeFilesystem(t *testing.T, rt string) {
	victim := shared.newSandbox(t, "--runtime", rt)
	id := shared.newSandbox(t, "--runtime", rt)
	marker := randomHex(t)
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	// The victim sandbox holds a secret of its own.
	inSandbox(t, victim, "", "echo "+marker+" > /root/victim-secret")

	paths := []string{
		hostFile,
		"/etc/shadow-of-the-host-is-not-here", // sanity: a path that exists nowhere
		filepath.Join(shared.dataDir, "admin.key"),
		filepath.Join(shared.dataDir, "warren.db"),
		filepath.Join(shared.dataDir, "disks", "sandboxes", victim+".img"),
		filepath.Join(shared.dataDir, "sandboxes", victim, "agent.sock"),
		"/proc/1/root" + hostFile,
	}
	for _, p := range paths {
		res := inSandbox(t, id, "", "cat "+p)
		if res.ExitCode == 0 {
			t.Errorf("sandbox read host path %s: %q", p, res.Stdout)
		}
	}
	// Nor through the root of any of its processes.
	if res := inSandbox(t, id, "", "cat /proc/[0-9]*/root"+hostFile+" 2>/dev/null; echo done"); res.Stdout != "done\n" {
		t.Errorf("sandbox read %s through a process's root: %q", hostFile, res.Stdout)
	}
	// Nothing reachable from the sandbox's root holds either secret.
	res := inSandbox(t, id, "", "grep -rlI --exclude-dir=proc --exclude-dir=sys "+marker+" / 2>/dev/null; echo done")
	if strings.TrimSpace(res.Stdout) != "done" {
		t.Errorf("the host's or another sandbox's secret is reachable from the sandbox: %q", res.Stdout)
	}
	// Its /etc/shadow is its own disk's, not the host's.
	host, _ := os.ReadFile("/etc/shadow")
	res = inSandbox(t, id, "", "cat /etc/shadow")
	if len(host) > 0 && res.Stdout == string(host) {
		t.Error("the sandbox's /etc/shadow is the host's")
	}
	// No block devices, no /dev/kvm.
	res = inSandbox(t, id, "", "ls /dev; ls /dev/kvm /dev/loop0 /dev/vda /dev/sda /dev/mem 2>&1 | grep -v 'No such'; echo")
	for _, dev := range []string{"kvm", "loop", "vda", "sda", "mem"} {
		if strings.Contains(res.Stdout, dev) {
			t.Errorf("device %s visible in the sandbox:\n%s", dev, res.Stdout)
		}
	}
	if rt == "container" {
		// None can be made.
		res = inSandbox(t, id, "", "mknod /tmp/blk b 7 0 && head -c 1 /tmp/blk | wc -c; mknod /tmp/kvm c 10 232 && cat /tmp/kvm")
		if !strings.Contains(res.Stderr, "mknod") || strings.TrimSpace(res.Stdout) != "" {
			t.Errorf("mknod of a block device did not fail: %q %q", res.Stdout, res.Stderr)
		}
		return
	}
	// gVisor's root may make device nodes (CAP_MKNOD in its kernel), but
	// a node is a name in its own VFS: the Sentry backs only the devices it
	// emulates, and opening any other says ENXIO. Tried: the host's loop
	// device of this very sandbox's disk, /dev/kvm, /dev/mem, /dev/port and
	// a virtio and a SCSI disk.
	devs := []string{"b " + hostDiskDevice(t, id), "c 10 232", "c 1 1", "c 1 4", "b 253 0", "b 8 0"}
	var script strings.Builder
	// A node the disk's filesystem (runsc's gofer) refuses to make is
	// blocked as well.
	for i, d := range devs {
		fmt.Fprintf(&script, "if mknod /tmp/dev%d %s; then head -c 16 /tmp/dev%d | wc -c; echo x > /tmp/dev%d && echo WROTE %d; else echo REFUSED; fi\n", i, d, i, i, i)
	}
	res = inSandbox(t, id, "", script.String())
	made := len(devs) - strings.Count(res.Stdout, "REFUSED")
	if strings.Contains(res.Stdout, "WROTE") || strings.Fields(res.Stdout) == nil ||
		strings.Count(res.Stderr, "No such device or address") != 2*made {
		t.Errorf("device nodes %v made in a gvisor sandbox: want each refused, or unreadable and unwritable (ENXIO):\n%s%s", devs, res.Stdout, res.Stderr)
	}
	for _, f := range strings.Fields(res.Stdout) {
		if f != "0" && f != "REFUSED" {
			t.Errorf("a device node made in a gvisor sandbox was read: %q %q", res.Stdout, res.Stderr)
		}
	}
}

// hostDiskDevice is "major minor" of the host's block device under sandbox
// id's root disk (its loop device), from the host's mount table.
func hostDiskDevice(t *testing.T, id string) string {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(shared.dataDir, "sandboxes", id)
	for _, m := range mounts {
		var st unix.Stat_t
		if strings.HasPrefix(m.Point, dir+"/") && strings.HasPrefix(m.Source, "/dev/loop") && unix.Stat(m.Source, &st) == nil {
			return fmt.Sprintf("%d %d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	t.Fatalf("no loop device mounted under %s on the host", dir)
	return ""
}

func TestEscapeProcesses(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		other := shared.newSandbox(t, "--runtime", rt)
		id := shared.newSandbox(t, "--runtime", rt)
		inSandbox(t, other, "", "sleep 600 & echo")
		res := inSandbox(t, id, "", "ps -eo comm --no-headers")
		for _, comm := range strings.Fields(res.Stdout) {
			if comm != "warren-agent" && comm != "sh" && comm != "ps" {
				t.Errorf("sandbox sees a process that is not its own: %q (all: %q)", comm, res.Stdout)
			}
		}
		// ptrace of the daemon (its host pid means nothing in the sandbox).
		daemonPid := shared.cmd.Process.Pid
		out := python(t, id, syscallProbe+fmt.Sprintf(`
call("ptrace", 101, 16, %d, 0, 0)   # PTRACE_ATTACH
call("kill", 62, %d, 0)
`, daemonPid, daemonPid))
		if strings.Contains(out.Stdout, "ptrace OK") {
			t.Errorf("sandbox attached to host pid %d: %q", daemonPid, out.Stdout)
		}
	})
}

func TestEscapePrivileges(t *testing.T) {
	eachRuntime(t, escapePrivileges)
}

// sentryOnly are the privileged calls that succeed in a gvisor sandbox and
// act on gVisor's kernel only: an unprivileged process may make a user
// namespace, in which it holds every capability of that namespace (as on
// Linux without seccomp), and so a mount namespace and mounts in it;
// syslog reads gVisor's own message buffer. escapePrivileges checks that
// none reaches the host.
var sentryOnly = map[string]bool{"unshare(NEWUSER)": true, "unshare(NEWNS)": true, "mount": true, "umount2": true, "syslog": true}

func escapePrivileges(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	// A setuid-root copy of a shell made by the sandbox's root grants its
	// unprivileged user nothing (no_new_privs).
	inSandbox(t, id, "", "cp /bin/bash /tmp/rootsh && chmod 4755 /tmp/rootsh")
	if res := inSandbox(t, id, "user", "/tmp/rootsh -p -c 'id -u'"); strings.TrimSpace(res.Stdout) != "1000" {
		t.Errorf("setuid shell run by user: uid %q, want 1000", res.Stdout)
	}
	// No user namespace to become "root" in, and no mounts.
	out := python(t, id, syscallProbe+`
call("unshare(NEWUSER)", 272, 0x10000000)
call("unshare(NEWNS)", 272, 0x00020000)
call("mount", 165, b"none", b"/mnt", b"tmpfs", 0, None)
call("umount2", 166, b"/proc", 2)
call("init_module", 175, None, 0, b"")
call("finit_module", 313, 0, b"", 0)
call("kexec_load", 246, 0, 0, None, 0)
call("bpf", 321, 0, None, 0)
call("keyctl", 250, 0, 0, 0, 0, 0)
call("syslog", 103, 3, None, 0)
call("open_by_handle_at", 304, 0, None, 0)
`)
	for _, line := range strings.Split(strings.TrimSpace(out.Stdout), "\n") {
		name, _, _ := strings.Cut(line, " ")
		if strings.HasSuffix(line, " OK") && !(rt == "gvisor" && sentryOnly[name]) {
			t.Errorf("privileged syscall allowed in the sandbox: %s", line)
		}
	}
	if strings.Count(out.Stdout, "\n") != 11 {
		t.Errorf("probe did not run every call: %q %q", out.Stdout, out.Stderr)
	}
	// CVE-2022-0492: mount a cgroup v1 hierarchy and set release_agent.
	res := inSandbox(t, id, "", "mkdir -p /tmp/cg && mount -t cgroup -o rdma cgroup /tmp/cg && echo /tmp/x > /tmp/cg/release_agent && echo ESCAPED")
	if strings.Contains(res.Stdout, "ESCAPED") || res.ExitCode == 0 {
		t.Errorf("cgroup release_agent escape got through: %+v", res)
	}
	// Kernel-wide capabilities are gone: CAP_SYS_ADMIN is bit 21, SYS_MODULE 16, SYS_PTRACE 19, SYS_TIME 25.
	res = inSandbox(t, id, "", "grep CapEff /proc/self/status")
	var capEff uint64
	fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(res.Stdout, "CapEff:")), "%x", &capEff)
	for _, bit := range []uint{16, 19, 21, 25} {
		if capEff&(1<<bit) != 0 {
			t.Errorf("sandbox root holds capability %d (CapEff %x)", bit, capEff)
		}
	}
	if rt == "gvisor" {
		sentryPrivileges(t, id)
	}
}

// sentryPrivileges checks that what a gvisor sandbox's root may do in a
// user namespace of its own (sentryOnly) stays in gVisor's kernel: its
// mounts reach neither its disk on the host nor the host's mount table;
// neither the gofer's protocol (9p over a descriptor number: the Sentry's
// descriptors are not the sandbox's) nor the host's device of its own disk
// can be mounted; its namespace's capabilities set neither the clock nor
// a cgroup release agent, and its hostname is the namespace's; syslog
// shows gVisor's messages, not the host's.
func sentryPrivileges(t *testing.T, id string) {
	marker := randomHex(t)
	hostClock := time.Now()
	res := inSandbox(t, id, "", `unshare -Urmu sh -c '
mount -t tmpfs none /mnt && echo `+marker+` > /mnt/marker && echo MOUNTED
umount -l /proc && echo UNMOUNTED-PROC
hostname `+marker[:12]+` && echo HOSTNAME
mount -t cgroup -o rdma cgroup /tmp/cg && echo /tmp/x > /tmp/cg/release_agent && echo RELEASE-AGENT
for fd in 0 1 2 3 4 5 6 7 8 9 10; do mount -t 9p -o trans=fd,rfdno=$fd,wfdno=$fd none /media 2>/dev/null && echo GOFER-$fd; done
mknod /tmp/disk b `+hostDiskDevice(t, id)+` && mount -t ext4 /tmp/disk /media 2>/dev/null && echo HOST-DISK
date -s "2001-01-01 00:00:00" >/dev/null 2>&1 && echo CLOCK
grep CapEff /proc/self/status'; echo; cat /mnt/marker 2>&1; ls /proc/self >/dev/null && echo PROC-STILL; hostname`)
	t.Logf("in a user namespace of a gvisor sandbox's own:\n%s%s", res.Stdout, res.Stderr)
	if !strings.Contains(res.Stdout, "MOUNTED") || !strings.Contains(res.Stdout, "PROC-STILL") {
		t.Errorf("the namespace probe did not run: %q %q", res.Stdout, res.Stderr)
	}
	for _, leak := range []string{"GOFER-", "HOST-DISK", "CLOCK", "RELEASE-AGENT"} {
		if strings.Contains(res.Stdout, leak) {
			t.Errorf("in a user namespace of a gvisor sandbox: %s got through:\n%s", leak, res.Stdout)
		}
	}
	// Outside the namespace, the sandbox itself saw none of it.
	if strings.Contains(res.Stdout, marker[:12]) {
		t.Errorf("a mount or hostname of the sandbox's user namespace is visible outside it:\n%s", res.Stdout)
	}
	// The host: neither its disk nor its mount table shows the mounts,
	// nor did its name or clock change.
	rootfs := filepath.Join(shared.dataDir, "sandboxes", id, "rootfs")
	for _, p := range []string{filepath.Join(rootfs, "mnt", "marker"), "/mnt/marker"} {
		if exists(p) {
			t.Errorf("a mount in a gvisor sandbox reached the host: %s exists", p)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(marker)) {
		t.Error("the host's mount table shows a gvisor sandbox's mount")
	}
	if name, _ := os.Hostname(); strings.Contains(name, marker[:12]) {
		t.Errorf("the host's name is now %q", name)
	}
	if time.Since(hostClock) < 0 || time.Now().Year() < 2026 {
		t.Error("the host's clock changed")
	}
	// syslog: gVisor's own messages; no line of the host's kernel log.
	out := python(t, id, `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(1 << 16)
n = libc.klogctl(3, buf, len(buf))
print(buf.raw[:max(n, 0)].decode(errors="replace"))
`)
	if !strings.Contains(out.Stdout, "gVisor") {
		t.Errorf("syslog in a gvisor sandbox: %q %q, want gVisor's messages", out.Stdout, out.Stderr)
	}
	hostLog := make([]byte, 1<<20)
	n, err := unix.Klogctl(3, hostLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(hostLog[:n]), "\n") {
		_, msg, _ := strings.Cut(line, "] ")
		if len(msg) >= 16 && strings.Contains(out.Stdout, msg) {
			t.Errorf("syslog in a gvisor sandbox shows the host's kernel log: %q", msg)
		}
	}
}

func TestEscapeClockAndHostname(t *testing.T) {
	eachRuntime(t, escapeClockAndHostname)
}

func escapeClockAndHostname(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	hostName, _ := os.Hostname()
	before := time.Now()
	res := inSandbox(t, id, "", "date -s '2001-01-01 00:00:00'; hostname pwned; echo")
	if !strings.Contains(res.Stderr, "date") || !strings.Contains(res.Stderr, "hostname") {
		t.Errorf("setting the clock and the hostname did not fail: %q", res.Stderr)
	}
	if now, _ := os.Hostname(); now != hostName {
		t.Errorf("host hostname changed from %q to %q", hostName, now)
	}
	if time.Since(before) < 0 || time.Now().Year() < 2026 {
		t.Error("host clock changed")
	}
}

func TestEscapeNetwork(t *testing.T) {
	eachRuntime(t, escapeNetwork)
}

func escapeNetwork(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	u, err := url.Parse(shared.url)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(u.Host)
	// The metadata address is routed to the test internet, whose listener
	// counts what reaches it: never anything off this machine.
	before := inet.hits(inetMeta)
	res := python(t, id, fmt.Sprintf(`
import socket
for host, port in (("127.0.0.1", %s), ("169.254.169.254", 80)):
    s = socket.socket(); s.settimeout(1)
    try:
        s.connect((host, port)); print(host, "CONNECTED")
    except OSError as e:
        print(host, "refused:", e.__class__.__name__)
`, port))
	if strings.Contains(res.Stdout, "CONNECTED") {
		t.Errorf("sandbox reached the daemon or the metadata address:\n%s", res.Stdout)
	}
	if inet.hits(inetMeta) != before {
		t.Error("a request from the sandbox reached the metadata test host")
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestEscapeAgent: the sandbox's root cannot reach into its PID 1, the
// agent, which holds the host's end of things (its console log, its
// listening socket): no ptrace, no pidfd_getfd, no memory access, no kcmp,
// no listing of its descriptors (issue 13, item 1). It can still ptrace its
// own processes (gdb, strace). And no process of a sandbox holds a
// descriptor the daemon inherited from whatever started it.
func TestEscapeAgent(t *testing.T) {
	eachRuntime(t, escapeAgent)
}

func escapeAgent(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	// pidfd_open is a syscall gVisor lacks (ENOSYS): then pidfd_getfd has
	// no pidfd to take from, and is reported with pidfd_open's error.
	out := python(t, id, syscallProbe+`
import os, subprocess
try:
    pidfd = os.pidfd_open(1)
    call("pidfd_getfd(1, stdout)", 438, pidfd, 1, 0)
    call("pidfd_getfd(1, listener)", 438, pidfd, 3, 0)
except OSError as e:
    for what in ("stdout", "listener"):
        print("pidfd_getfd(1, %s) pidfd_open:%s" % (what, errno.errorcode.get(e.errno, str(e.errno))))
call("ptrace(SEIZE, 1)", 101, 0x4206, 1, 0, 0)
call("ptrace(ATTACH, 1)", 101, 16, 1, 0, 0)
buf = ctypes.create_string_buffer(8)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = iovec(0x400000, 8)
call("process_vm_readv(1)", 310, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
call("process_vm_writev(1)", 311, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
call("kcmp(1, self, FILE)", 312, 1, os.getpid(), 0, 1, 1)
for path in ("/proc/1/mem", "/proc/1/environ"):
    try:
        open(path, "rb").read(1)
        print(path, "OK")
    except OSError as e:
        print(path, errno.errorcode.get(e.errno, str(e.errno)))
try:
    os.readlink("/proc/1/fd/1")
    print("readlink /proc/1/fd/1 OK")
except OSError as e:
    print("readlink /proc/1/fd/1", errno.errorcode.get(e.errno, str(e.errno)))
child = subprocess.Popen(["sleep", "30"])
call("ptrace(SEIZE, own child)", 101, 0x4206, child.pid, 0, 0)
child.kill()
`)
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(lines) != 11 {
		t.Fatalf("probe did not run every call: %q %q", out.Stdout, out.Stderr)
	}
	for _, line := range lines {
		own := strings.Contains(line, "own child")
		// gVisor's /proc shows the sandbox's root its init's descriptors
		// (host:[N], gVisor's name for a host descriptor the Sentry holds)
		// and environment; gvisorAgentFds checks what they give.
		if rt == "gvisor" && (line == "readlink /proc/1/fd/1 OK" || line == "/proc/1/environ OK") {
			continue
		}
		if own != strings.HasSuffix(line, " OK") {
			t.Errorf("sandbox root: %s", line)
		}
	}
	// From the host: no process of the sandbox (under gvisor: its Sentry)
	// holds the daemon's stray descriptor.
	procs := cgroupValue(id, "pids", "cgroup.procs", "cgroup.procs")
	if procs == "" {
		t.Fatal("no processes found in the sandbox's cgroup")
	}
	for _, pid := range strings.Fields(procs) {
		checkNoStray(t, pid)
	}
	if rt == "gvisor" {
		gvisorAgentFds(t, id)
		return
	}
	// The agent's own output goes into a FIFO the daemon drains into a
	// bounded log, never into a host file it holds (issue 13, item 1).
	for _, fd := range []string{"1", "2"} {
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%s", initPid(t, id), fd))
		if err != nil || fi.Mode().Type() != os.ModeNamedPipe {
			t.Errorf("the agent's fd %s: %v %v; want the console FIFO", fd, fi.Mode(), err)
		}
	}
}

// gvisorAgentFds: under gVisor the sandbox's root sees its init's (the
// agent's) environment and descriptors, and may open the three host
// descriptors among them: the agent's stdin (the host's /dev/null) and its
// stdout and stderr (the console FIFO, which the daemon drains into the
// sandbox's console log), and the agent's own pipes, which are the
// Sentry's. None is a host file or directory to go on from, what is
// written to the console reaches the host only as that bounded log, and
// the agent's channel to the daemon (a host socket) does not open. The
// environment is the runtime's PATH and the HOME the Sentry adds.
func gvisorAgentFds(t *testing.T, id string) {
	marker := randomHex(t)
	out := python(t, id, `
import os, errno, stat
print("environ", open("/proc/1/environ", "rb").read().decode(errors="replace").replace("\0", " ").strip())
def kind(fd):
    m = os.fstat(fd).st_mode
    for name in ("DIR", "REG", "FIFO", "CHR", "BLK", "SOCK", "LNK"):
        if getattr(stat, "S_IS" + name)(m):
            return name
    return "?"
for fd in sorted(os.listdir("/proc/1/fd"), key=int):
    path = "/proc/1/fd/" + fd
    target = os.readlink(path)
    for mode, flags in (("r", os.O_RDONLY), ("w", os.O_WRONLY)):
        try:
            f = os.open(path, flags | os.O_NONBLOCK)
        except OSError as e:
            print(fd, target, mode, errno.errorcode.get(e.errno, str(e.errno)))
            continue
        try:
            os.listdir(f); up = "LISTED"
        except OSError as e:
            up = errno.errorcode.get(e.errno, str(e.errno))
        print(fd, target, mode, "OPENED", kind(f), "list:" + up)
        os.close(f)
# 4 MiB through the agent's stdout, the console FIFO.
f = os.open("/proc/1/fd/1", os.O_WRONLY)
line = b"`+marker+`" + b"x" * 991 + b"\n"
n = 0
while n < 4 << 20:
    n += os.write(f, line)
print("wrote", n)
`)
	t.Logf("the agent's environment and descriptors, opened by the sandbox's root:\n%s%s", out.Stdout, out.Stderr)
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if out.ExitCode != 0 || len(lines) < 3 || !strings.HasPrefix(lines[len(lines)-1], "wrote ") {
		t.Fatalf("probe of the agent's descriptors: exit %d %q %q", out.ExitCode, out.Stdout, out.Stderr)
	}
	for _, kv := range strings.Fields(strings.TrimPrefix(lines[0], "environ")) {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" {
			t.Errorf("the agent's environment in a gvisor sandbox holds %q: want the runtime's PATH and the Sentry's HOME alone", kv)
		}
	}
	// Its pipes (pipe:[N]) are the Sentry's own objects; a host
	// descriptor may be a FIFO or a character device, never a file or a
	// directory to go on from.
	for _, line := range lines[1 : len(lines)-1] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "OPENED" {
			continue
		}
		if len(f) != 6 || (f[4] != "FIFO" && f[4] != "CHR") || f[5] == "list:LISTED" || !strings.HasPrefix(f[1], "host:") && !strings.HasPrefix(f[1], "pipe:") {
			t.Errorf("the sandbox's root opened its agent's descriptor %s: want at most a FIFO or a character device", line)
		}
	}
	log := filepath.Join(shared.dataDir, "sandboxes", id, "console.log")
	var size int64
	wait.For(t, 10*time.Second, "the console log holding the marker", func() bool {
		b, err := os.ReadFile(log)
		size = int64(len(b))
		return err == nil && bytes.Contains(b, []byte(marker))
	})
	if size > consolelog.Max {
		t.Errorf("the console log holds %d bytes after 4 MiB written by the sandbox's root: want at most %d", size, consolelog.Max)
	}
}

// checkNoStray fails t if process pid holds the daemons' stray descriptor
// (strayFile).
func checkNoStray(t *testing.T, pid string) {
	t.Helper()
	stray := fmt.Sprintf("pipe:[%d]", strayInode)
	fds, err := os.ReadDir(filepath.Join("/proc", pid, "fd"))
	if err != nil {
		t.Errorf("descriptors of %s: %v", pid, err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name())); target == stray {
			t.Errorf("process %s of a sandbox holds the daemon's inherited descriptor as fd %s", pid, fd.Name())
		}
	}
}

// TestEscapeFilesAsUser is the e2e regression test of issue 13, item 8:
// with user=user the files API read /etc/shadow, and through a symlink the
// user made (~/cfg -> /etc/profile.d) it wrote /etc/profile.d/evil.sh, which
// a root login shell then ran. Now a files call naming a user has only that
// user's rights.
func TestEscapeFilesAsUser(t *testing.T) {
	eachRuntime(t, escapeFilesAsUser)
}

func escapeFilesAsUser(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	cl := shared.client()
	ctx := context.Background()
	if res := inSandbox(t, id, "user", "ln -s /etc/profile.d ~/cfg && echo mine > ~/mine"); res.ExitCode != 0 {
		t.Fatalf("set up as user: %+v", res)
	}
	read := func(path, user string) (int, string) {
		q := url.Values{"path": {path}, "user": {user}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, shared.url+"/v1/sandboxes/"+id+"/files?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+shared.key)
		return do(t, req)
	}
	if code, body := read("/etc/shadow", "user"); code != http.StatusForbidden {
		t.Errorf("read /etc/shadow as user: %d %q, want 403", code, body)
	}
	if code, body := read("mine", "user"); code != http.StatusOK || body != "mine\n" {
		t.Errorf("read ~/mine as user: %d %q", code, body)
	}
	if code, _ := read("/etc/shadow", "root"); code != http.StatusOK {
		t.Errorf("read /etc/shadow as root: %d, want 200", code)
	}
	_, err := cl.WriteFile(ctx, id, "cfg/evil.sh", strings.NewReader("echo owned\n"), 0o644, "user")
	if !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("write cfg/evil.sh as user through its symlink to /etc/profile.d: %v, want forbidden", err)
	}
	if _, err := cl.Mkdir(ctx, id, "cfg/sub", 0o755, "user"); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("mkdir cfg/sub as user: %v, want forbidden", err)
	}
	if res := inSandbox(t, id, "", "ls /etc/profile.d"); strings.Contains(res.Stdout, "evil") || strings.Contains(res.Stdout, "sub") {
		t.Errorf("/etc/profile.d after the attempts: %q", res.Stdout)
	}
	if fi, err := cl.WriteFile(ctx, id, "new/file", strings.NewReader("x"), 0o600, "user"); err != nil || fi.Owner != "user" {
		t.Errorf("write in its home as user: %+v %v", fi, err)
	}
}

// TestEscapeHostInfo is the regression test of issue 13, item 13: a
// sandbox read the host's boot arguments, its disks and every sandbox's
// loop device, its crash-dump layout, its boot id, and host paths under
// /proc/1/fd. Each now reads empty, as the sandbox's own, or not at all.
// /proc/meminfo, /proc/loadavg and /proc/uptime stay the host's (see
// docs/ARCHITECTURE.md).
func TestEscapeHostInfo(t *testing.T) {
	eachRuntime(t, escapeHostInfo)
}

func escapeHostInfo(t *testing.T, rt string) {
	id := shared.newSandbox(t, "--runtime", rt)
	read := func(p string) string {
		t.Helper()
		return inSandbox(t, id, "", "cat "+p+" 2>&1").Stdout
	}
	hostCmdline, _ := os.ReadFile("/proc/cmdline")
	hostLoops, _ := filepath.Glob("/sys/block/loop*")
	if len(hostLoops) == 0 || len(bytes.TrimSpace(hostCmdline)) == 0 {
		t.Fatalf("the host shows no loop devices (%v) or no command line (%q): nothing to compare", hostLoops, hostCmdline)
	}
	if rt == "container" {
		for _, p := range []string{"/proc/cmdline", "/proc/partitions", "/proc/diskstats", "/sys/kernel/vmcoreinfo"} {
			if got := read(p); got != "" {
				t.Errorf("%s in the sandbox: %q, want it empty", p, got)
			}
		}
	} else {
		// gVisor's /proc has a command line of its own and no disks.
		if got := read("/proc/cmdline"); sharesWord(got, string(hostCmdline)) {
			t.Errorf("/proc/cmdline in a gvisor sandbox: %q; the host's is %q", got, hostCmdline)
		}
		for _, p := range []string{"/proc/partitions", "/proc/diskstats", "/sys/kernel/vmcoreinfo"} {
			if res := inSandbox(t, id, "", "cat "+p+" 2>/dev/null"); res.Stdout != "" {
				t.Errorf("%s in a gvisor sandbox: %q, want none", p, res.Stdout)
			}
		}
	}
	res := inSandbox(t, id, "", "ls -A /sys/block /sys/class/block /sys/dev/block /sys/devices/virtual/block /sys/fs/ext4 /sys/fs/xfs 2>&1; find /sys -name 'loop[0-9]*' -o -name 'vd[a-z]' 2>/dev/null")
	for _, loop := range hostLoops {
		if name := filepath.Base(loop); regexp.MustCompile(`\b` + name + `\b`).MatchString(res.Stdout) {
			t.Errorf("the sandbox sees the host's block device %s:\n%s", name, res.Stdout)
		}
	}
	hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	boot := read("/proc/sys/kernel/random/boot_id")
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$`).MatchString(boot) || boot == string(hostBoot) {
		t.Errorf("the sandbox's boot_id %q, the host's %q: want a random one of its own", boot, hostBoot)
	}
	if res := inSandbox(t, id, "", "echo x > /proc/sys/kernel/random/boot_id"); res.ExitCode == 0 {
		t.Error("the sandbox's root rewrote its boot_id")
	}
	if rt == "container" {
		// Its init's descriptors are not its root's to read.
		if res := inSandbox(t, id, "", "ls -l /proc/1/fd"); res.ExitCode == 0 {
			t.Errorf("the sandbox's root lists /proc/1/fd:\n%s", res.Stdout)
		}
		t.Logf("still the host's in the sandbox: %q, loadavg %q, uptime %q", strings.SplitN(read("/proc/meminfo"), "\n", 2)[0],
			strings.TrimSpace(read("/proc/loadavg")), strings.TrimSpace(read("/proc/uptime")))
		return
	}
	// gVisor's root lists its init's descriptors (TestEscapeAgent opens
	// them): their names say nothing of the host.
	if res := inSandbox(t, id, "", "ls -l /proc/1/fd"); strings.Contains(res.Stdout, shared.dataDir) || strings.Contains(res.Stdout, "/dev/") {
		t.Errorf("/proc/1/fd in a gvisor sandbox names host files:\n%s", res.Stdout)
	}
	// gVisor's /proc counts its own kernel: its uptime is its Sentry's
	// (which may have waited in a warm pool, but started after the
	// daemon), its load and memory its own, not the host's.
	var up, hostUp float64
	fmt.Sscan(read("/proc/uptime"), &up)
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		fmt.Sscan(string(b), &hostUp)
	}
	start, err := procid.StartTime(shared.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	daemonUp := hostUp - float64(start)/100 // starttime is in clock ticks, 100 a second on x86_64 Linux
	if up <= 0 || up > daemonUp+1 {
		t.Errorf("uptime in a gvisor sandbox %.0fs, the daemon's %.0fs, the host's %.0fs: want the sandbox's own", up, daemonUp, hostUp)
	}
	hostMem, _ := os.ReadFile("/proc/meminfo")
	mem := read("/proc/meminfo")
	if first := strings.SplitN(string(hostMem), "\n", 2)[0]; strings.HasPrefix(mem, first+"\n") {
		t.Errorf("/proc/meminfo in a gvisor sandbox is the host's: %q", first)
	}
	// Its run queue counts its own tasks: the fourth field of loadavg,
	// running/total.
	load := strings.TrimSpace(read("/proc/loadavg"))
	hostLoad, _ := os.ReadFile("/proc/loadavg")
	if tasks, hostTasks := loadTasks(load), loadTasks(string(hostLoad)); tasks < 0 || tasks >= hostTasks {
		t.Errorf("/proc/loadavg in a gvisor sandbox: %q; the host's %q", load, hostLoad)
	}
	t.Logf("in a gvisor sandbox: %q, loadavg %q, uptime %.1fs", strings.SplitN(mem, "\n", 2)[0], load, up)
}

// sharesWord reports whether a and b have a word of 8 bytes or more in
// common: a command line that is not the host's may still say "quiet".
func sharesWord(a, b string) bool {
	for _, w := range strings.Fields(a) {
		if len(w) >= 8 && slices.Contains(strings.Fields(b), w) {
			return true
		}
	}
	return false
}

// loadTasks is the total of loadavg's fourth field (running/total), or -1.
func loadTasks(loadavg string) int {
	f := strings.Fields(loadavg)
	if len(f) < 4 {
		return -1
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if err != nil {
		return -1
	}
	return n
}
