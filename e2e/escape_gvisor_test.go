//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/wait"
)

// TestEscapeGVisor: what a gvisor sandbox shows of the host, and what its
// root can do with the few host things gVisor gives it, as the gvisor rows
// of docs/SECURITY.md list them. The Sentry answers every system call and
// emulates /proc, /sys and /dev; the host reaches the sandbox only as its
// disk and workspace (served by runsc's gofer), the agent's binary and the
// agent's channel (a host unix socket in a directory bound read-only at
// /run/warren/chan, which runsc --host-uds=open lets the sandbox connect
// to), its console and its network link. Each check fails if a host fact
// or a host object is reached from inside.
//
// One sandbox carries the checks; the channel check pauses and resumes
// it.
func TestEscapeGVisor(t *testing.T) {
	need(t)
	runtimeInfo(t, "gvisor")
	id := shared.newSandbox(t, "--runtime", "gvisor")
	dir := filepath.Join(shared.dataDir, "sandboxes", id)

	t.Run("kernel", func(t *testing.T) {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			t.Fatal(err)
		}
		release := unix.ByteSliceToString(u.Release[:])
		hostVersion, _ := os.ReadFile("/proc/version")
		got := inSandbox(t, id, "", "uname -a; cat /proc/version /proc/cmdline; dmesg").Stdout
		t.Logf("a gvisor sandbox's kernel: %q", got)
		if strings.Contains(got, release) || strings.Contains(got, strings.TrimSpace(string(hostVersion))) {
			t.Errorf("a gvisor sandbox sees the host's kernel %s:\n%s", release, got)
		}
		if !strings.Contains(got, "gVisor") {
			t.Errorf("no sign of gVisor's kernel in:\n%s", got)
		}
	})

	t.Run("cpu", func(t *testing.T) {
		// The CPU's features are what the CPUID instruction tells any
		// process on it, gVisor's or not (its flags may list more than the
		// host kernel's /proc/cpuinfo, which drops what it does not use);
		// the model is not named.
		host, err := os.ReadFile("/proc/cpuinfo")
		if err != nil {
			t.Fatal(err)
		}
		got := inSandbox(t, id, "", "cat /proc/cpuinfo").Stdout
		model, hostModel := cpuField(got, "model name"), cpuField(string(host), "model name")
		if model == "" || model == hostModel {
			t.Errorf("a gvisor sandbox's CPU model %q, the host's %q: want it not named", model, hostModel)
		}
		t.Logf("CPU flags: %d in a gvisor sandbox, %d in the host's /proc/cpuinfo", len(strings.Fields(cpuField(got, "flags"))), len(strings.Fields(cpuField(string(host), "flags"))))
	})

	t.Run("sys", func(t *testing.T) {
		// gVisor's /sys: its own CPUs and little else. None of the host's
		// devices, network interfaces (other sandboxes' links among them)
		// or block devices.
		got := inSandbox(t, id, "", "find /sys 2>/dev/null").Stdout
		paths := strings.Fields(got)
		if len(paths) == 0 || len(paths) > 500 {
			t.Errorf("find /sys in a gvisor sandbox: %d paths", len(paths))
		}
		var names []string
		for _, glob := range []string{"/sys/class/net/*", "/sys/block/*"} {
			m, _ := filepath.Glob(glob)
			for _, p := range m {
				if n := filepath.Base(p); n != "lo" {
					names = append(names, regexp.QuoteMeta(n))
				}
			}
		}
		host := regexp.MustCompile(`(^|/)(pci[0-9:]*|virtual|platform|` + strings.Join(names, "|") + `)(/|$)`)
		for _, p := range paths {
			if host.MatchString(p) {
				t.Errorf("a gvisor sandbox's /sys shows the host's %s", p)
			}
		}
	})

	t.Run("mounts", func(t *testing.T) {
		// Its mount table names no host path or device: the disks are the
		// gofer's (9p, source "none"), not loop devices in the data
		// directory.
		got := inSandbox(t, id, "", "cat /proc/self/mountinfo /proc/mounts").Stdout
		for _, host := range []string{shared.dataDir, dir, "/dev/loop", "/var/", "/tmp/"} {
			if strings.Contains(got, host) {
				t.Errorf("a gvisor sandbox's mount table names the host's %s:\n%s", host, got)
			}
		}
	})

	t.Run("dev", func(t *testing.T) {
		// gVisor's /dev holds the devices the Sentry emulates, and no
		// others (TestEscapeFilesystem makes nodes of the host's).
		want := []string{"fd", "full", "fuse", "net", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
		for _, d := range strings.Fields(inSandbox(t, id, "", "ls -A /dev /dev/net").Stdout) {
			if d = strings.TrimSuffix(d, ":"); !slices.Contains(want, d) && d != "/dev" && d != "/dev/net" && d != "tun" {
				t.Errorf("/dev in a gvisor sandbox holds %s", d)
			}
		}
	})

	t.Run("raw sockets", func(t *testing.T) {
		// runsc runs without --net-raw: no raw or packet sockets, though
		// the sandbox's root keeps CAP_NET_RAW as in a container.
		out := python(t, id, `
import socket, errno
for name, args in (("inet raw", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                   ("inet6 raw", (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)),
                   ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0))):
    try:
        socket.socket(*args); print(name, "OK")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
`)
		if strings.Count(out.Stdout, "\n") != 3 || strings.Contains(out.Stdout, "OK") {
			t.Errorf("raw sockets in a gvisor sandbox: %q %q", out.Stdout, out.Stderr)
		}
	})

	t.Run("agent binary", func(t *testing.T) {
		// The agent's binary is the runtime's copy, bound read-only; the
		// sandbox's root cannot change it, in its namespace or out.
		host := filepath.Join(shared.dataDir, "gvisor", "warren-agent")
		before := fileHash(t, host)
		res := inSandbox(t, id, "", `
echo x >> /run/warren/agent && echo WROTE
chmod 777 /run/warren/agent && echo CHMOD
mount -o remount,rw /run/warren/agent && echo REMOUNTED
unshare -Urm sh -c 'mount -o remount,rw,bind /run/warren/agent && echo NS-REMOUNTED; echo x >> /run/warren/agent && echo NS-WROTE'
echo`)
		// A remount in a user namespace of its own acts on the Sentry's
		// mount (NS-REMOUNTED may show); the file stays read-only.
		for _, leak := range []string{"WROTE", "CHMOD", "REMOUNTED", "NS-WROTE"} {
			if slices.Contains(strings.Fields(res.Stdout), leak) {
				t.Errorf("the sandbox's root changed the agent's binary: %q %q", res.Stdout, res.Stderr)
			}
		}
		if after := fileHash(t, host); after != before {
			t.Errorf("the runtime's agent binary %s changed", host)
		}
	})

	t.Run("channel", func(t *testing.T) { gvisorChannel(t, id, dir) })
}

// gvisorChannel: the agent's channel is a host unix socket (mode 0600,
// the host's root's) in a directory bound read-only at /run/warren/chan.
// The sandbox's unprivileged user may not connect; its root may (root in
// gVisor's kernel passes the Sentry's permission check), but the runtime
// accepts one connection at a time, the agent's, so a connection of the
// root's waits unanswered. Nothing there can be bound, replaced or
// removed, and a socket bound anywhere else is gVisor's own, not a host
// socket. Last, the root tries to be the one the runtime accepts when the
// agent dials again after a pause.
func gvisorChannel(t *testing.T, id, dir string) {
	out := python(t, id, `
import socket, os, errno
def tr(name, f):
    try:
        print(name, "OK", f())
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
def listen(path):
    s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1); return "bound"
def wait_bytes():
    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect("/run/warren/chan/agent.sock")
    try:
        return s.recv(64)
    except socket.timeout:
        return "silence"
tr("connect", wait_bytes)
tr("bind in chan", lambda: listen("/run/warren/chan/evil.sock"))
tr("unlink agent.sock", lambda: os.unlink("/run/warren/chan/agent.sock"))
tr("rename agent.sock", lambda: os.rename("/run/warren/chan/agent.sock", "/run/warren/chan/x"))
tr("mknod in chan", lambda: os.mknod("/run/warren/chan/x", 0o140600))
tr("bind on disk", lambda: listen("/root/evil.sock"))
`)
	want := []string{"connect OK silence", "bind in chan EROFS", "unlink agent.sock EROFS", "rename agent.sock EROFS", "mknod in chan EROFS", "bind on disk OK bound"}
	if got := strings.Split(strings.TrimSpace(out.Stdout), "\n"); !slices.Equal(got, want) {
		t.Errorf("the sandbox's root at the agent's channel:\n%s%s\nwant:\n%s", out.Stdout, out.Stderr, strings.Join(want, "\n"))
	}
	// A socket bound on the disk is the Sentry's: no host socket is made
	// there, nor anything the host could connect to.
	if c, err := net.Dial("unix", filepath.Join(dir, "rootfs", "root", "evil.sock")); err == nil {
		c.Close()
		t.Error("a socket bound in a gvisor sandbox is a host socket")
	}
	if res := inSandbox(t, id, "user", `python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("/run/warren/chan/agent.sock")'`); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Permission denied") {
		t.Errorf("the sandbox's user connected to the agent's channel: %+v", res)
	}

	// The takeover: the root connects again and again; whatever the host
	// says to a connection of its is kept in /root/captured. The runtime
	// closes its socket for a pause and listens again for the resume, when
	// the agent dials anew; the root must not be the one it accepts.
	inSandbox(t, id, "", `cat > /root/grab.py <<'EOF'
import socket, time
deadline, connects = time.time() + 60, 0
while time.time() < deadline:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("/run/warren/chan/agent.sock")
        connects += 1
        open("/root/connects", "w").write(str(connects))
        s.settimeout(0.2)
        b = s.recv(4096)
        if b:
            open("/root/captured", "wb").write(b)
            break
    except OSError:
        time.sleep(0.001)
    finally:
        s.close()
EOF
nohup python3 /root/grab.py >/dev/null 2>&1 &
echo started`)
	wait.For(t, 10*time.Second, "the root connected to the channel", func() bool {
		return inSandbox(t, id, "", "cat /root/connects").ExitCode == 0
	})
	ctx := context.Background()
	cl := shared.client()
	for i := 0; i < 3; i++ {
		if _, err := cl.PauseSandbox(ctx, id); err != nil {
			// A connection of the root's that the Sentry holds when it is
			// saved makes the checkpoint fail: it is the root's own
			// sandbox that cannot pause.
			t.Logf("pause %d with the root at the channel: %v", i, err)
			continue
		}
		if _, err := cl.ResumeSandbox(ctx, id); err != nil {
			t.Errorf("resume %d: %v", i, err)
		}
	}
	var alive, connects, captured string
	wait.For(t, 30*time.Second, "the agent answering after the resumes", func() bool {
		res, err := cl.Exec(ctx, id, api.ExecRequest{Shell: "pkill -f 'gra[b].py' && echo ALIVE || echo DEAD; cat /root/connects; echo; cat /root/captured 2>/dev/null", TimeoutMs: 5000})
		if err != nil {
			return false
		}
		f := strings.SplitN(res.Stdout, "\n", 3)
		if len(f) != 3 {
			t.Fatalf("the root's loop at the channel: %q %q", res.Stdout, res.Stderr)
		}
		alive, connects, captured = f[0], f[1], f[2]
		return true
	})
	t.Logf("the root's loop: alive at the end %q, %s connections accepted by the socket", alive, connects)
	if alive != "ALIVE" && captured == "" {
		t.Error("the root's loop at the channel died before the end: nothing was tried")
	}
	if captured != "" {
		t.Errorf("the sandbox's root was accepted on the agent's channel after a pause: the daemon sent it %q", trimCapture(captured))
	}
	if strings.Contains(captured, shared.key) {
		t.Error("the daemon sent its API key over the agent's channel")
	}
}

// trimCapture is the start of bytes captured on the channel.
func trimCapture(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// cpuField is the value of the first line of /proc/cpuinfo text named name.
func cpuField(cpuinfo, name string) string {
	for _, l := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fileHash is the SHA-256 of the file at path.
func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
