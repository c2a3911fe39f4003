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
	"strings"
	"testing"
	"time"

	"warren/api"
)

// Escape attempts from inside a sandbox, as its root (and as its
// unprivileged user where that is the point). Each must fail; the table in
// docs/SECURITY.md lists them. Network probes only ever target loopback or
// a test namespace this test builds, so nothing leaves the machine even if
// isolation were broken.

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
	need(t)
	victim := shared.newSandbox(t)
	id := shared.newSandbox(t)
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
	// No block devices, no /dev/kvm, and none can be made.
	res = inSandbox(t, id, "", "ls /dev; ls /dev/kvm /dev/loop0 /dev/vda /dev/sda /dev/mem 2>&1 | grep -v 'No such' ; mknod /tmp/blk b 7 0 && head -c 1 /tmp/blk | wc -c; mknod /tmp/kvm c 10 232 && cat /tmp/kvm")
	for _, dev := range []string{"kvm", "loop", "vda", "sda", "mem"} {
		if strings.Contains(res.Stdout, dev) {
			t.Errorf("device %s visible or reachable in the sandbox:\n%s%s", dev, res.Stdout, res.Stderr)
		}
	}
	if !strings.Contains(res.Stderr, "mknod") {
		t.Errorf("mknod of a block device did not fail: %q", res.Stderr)
	}
}

func TestEscapeProcesses(t *testing.T) {
	need(t)
	other := shared.newSandbox(t)
	id := shared.newSandbox(t)
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
}

func TestEscapePrivileges(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
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
		if strings.HasSuffix(line, " OK") {
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
}

func TestEscapeClockAndHostname(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
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
	need(t)
	id := shared.newSandbox(t)
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
	need(t)
	id := shared.newSandbox(t)
	out := python(t, id, syscallProbe+`
import os, subprocess
pidfd = os.pidfd_open(1)
call("pidfd_getfd(1, stdout)", 438, pidfd, 1, 0)
call("pidfd_getfd(1, listener)", 438, pidfd, 3, 0)
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
		if own != strings.HasSuffix(line, " OK") {
			t.Errorf("sandbox root: %s", line)
		}
	}
	// From the host: no process of the sandbox holds the daemon's stray
	// descriptor.
	procs := cgroupValue(id, "pids", "cgroup.procs", "cgroup.procs")
	if procs == "" {
		t.Fatal("no processes found in the sandbox's cgroup")
	}
	for _, pid := range strings.Fields(procs) {
		checkNoStray(t, pid)
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
	need(t)
	id := shared.newSandbox(t)
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
	need(t)
	id := shared.newSandbox(t)
	read := func(p string) string {
		t.Helper()
		return inSandbox(t, id, "", "cat "+p+" 2>&1").Stdout
	}
	hostCmdline, _ := os.ReadFile("/proc/cmdline")
	hostLoops, _ := filepath.Glob("/sys/block/loop*")
	if len(hostLoops) == 0 || len(bytes.TrimSpace(hostCmdline)) == 0 {
		t.Fatalf("the host shows no loop devices (%v) or no command line (%q): nothing to compare", hostLoops, hostCmdline)
	}
	for _, p := range []string{"/proc/cmdline", "/proc/partitions", "/proc/diskstats", "/sys/kernel/vmcoreinfo"} {
		if got := read(p); got != "" {
			t.Errorf("%s in the sandbox: %q, want it empty", p, got)
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
	// Its init's descriptors are not its root's to read.
	if res := inSandbox(t, id, "", "ls -l /proc/1/fd"); res.ExitCode == 0 {
		t.Errorf("the sandbox's root lists /proc/1/fd:\n%s", res.Stdout)
	}
	t.Logf("still the host's in the sandbox: %q, loadavg %q, uptime %q", strings.SplitN(read("/proc/meminfo"), "\n", 2)[0],
		strings.TrimSpace(read("/proc/loadavg")), strings.TrimSpace(read("/proc/uptime")))
}
