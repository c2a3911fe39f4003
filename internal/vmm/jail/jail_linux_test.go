//go:build linux

package jail

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	testUID = 3_999_000_001
	testGID = 3_999_000_001
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("jails need root (mount namespaces, pivot_root, setuid)")
	}
}

func mountpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runJailed runs a shell script in a jail and returns what it printed.
func runJailed(t *testing.T, spec Spec, script string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec.Path = "/usr/bin/sh"
	spec.Args = []string{"-c", script}
	spec.Stdout, spec.Stderr = w, w
	cmd, err := Start(spec)
	w.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out, _ := io.ReadAll(r)
	cmd.Wait()
	return string(out)
}

// TestJailView checks what a jailed process can see: its own root with
// /usr, the loader cache, a few devices and the files it was given, as an
// unprivileged uid with no_new_privs, and nothing of the host's data.
func TestJailView(t *testing.T) {
	needRoot(t)
	secretDir := t.TempDir() // a "data directory" the jail must not reach
	kernel := filepath.Join(secretDir, "vmlinuz")
	if err := os.WriteFile(kernel, []byte("kernel bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "other.img"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runJailed(t, Spec{
		UID: testUID, GID: testGID, Mountpoint: mountpoint(t),
		Files: []File{{Source: kernel, Target: "/vm/kernel"}},
	}, `
echo "root: $(ls -A / | tr '\n' ' ')"
echo "etc: $(ls -A /etc | tr '\n' ' ')"
echo "dev: $(ls -A /dev | tr '\n' ' ')"
echo "kernel: $(cat /vm/kernel)"
echo "uid: $(id -u) gid: $(id -g)"
ls `+secretDir+` >/dev/null 2>&1 && echo "secret: visible" || echo "secret: hidden"
ls /proc/1 >/dev/null 2>&1 && echo "proc: visible" || echo "proc: hidden"
{ echo x > /vm/kernel; } 2>/dev/null && echo "kernel: writable" || echo "kernel: read-only"
touch /newfile 2>/dev/null && echo "root: writable" || echo "root: read-only"
echo "null: $(echo hi > /dev/null && echo ok)"
echo "urandom: $(head -c 4 /dev/urandom | wc -c)"
`)
	t.Logf("jailed view:\n%s", out)
	for _, want := range []string{
		"root: bin dev etc lib lib64 sbin usr vm \n",
		"etc: ld.so.cache \n",
		"dev: null random urandom zero \n",
		"kernel: kernel bytes\n",
		fmt.Sprintf("uid: %d gid: %d\n", testUID, testGID),
		"secret: hidden\n",
		"proc: hidden\n",
		"kernel: read-only\n",
		"root: read-only\n",
		"null: ok\n",
		"urandom: 4\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("jailed output lacks %q", want)
		}
	}
}

// TestJailNamespaces checks that a jailed process has its own mount, pid,
// net, uts and ipc namespaces, no_new_privs, no capabilities and no core
// dumps, and that the caller's namespaces did not change.
func TestJailNamespaces(t *testing.T) {
	needRoot(t)
	before := namespaces(t, os.Getpid())
	cmd, err := Start(Spec{
		Path: "/usr/bin/sleep", Args: []string{"30"},
		UID: testUID, GID: testGID, Groups: []uint32{testGID + 1},
		Mountpoint: mountpoint(t),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	jailed := namespaces(t, pid)
	for _, ns := range []string{"mnt", "pid", "net", "uts", "ipc"} {
		if jailed[ns] == before[ns] {
			t.Errorf("jailed process shares the caller's %s namespace (%s)", ns, jailed[ns])
		}
	}
	if after := namespaces(t, os.Getpid()); !mapsEqual(after, before) {
		t.Errorf("caller's namespaces changed: before %v, after %v", before, after)
	}
	status := readFile(t, fmt.Sprintf("/proc/%d/status", pid))
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", testUID, testUID, testUID, testUID),
		fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d", testGID, testGID, testGID, testGID),
		fmt.Sprintf("Groups:\t%d", testGID+1),
		"NoNewPrivs:\t1",
		"CapEff:\t0000000000000000",
		"CapPrm:\t0000000000000000",
		"NSpid:\t" + fmt.Sprint(pid) + "\t1", // PID 1 of its namespace
	} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/%d/status lacks %q:\n%s", pid, want, status)
		}
	}
	limits := readFile(t, fmt.Sprintf("/proc/%d/limits", pid))
	if !regexp.MustCompile(`(?m)^Max core file size\s+0\s+0\s`).MatchString(limits) {
		t.Errorf("core dumps not limited to 0:\n%s", limits)
	}
	// The host's mounts are gone from its namespace, not just hidden.
	mounts := readFile(t, fmt.Sprintf("/proc/%d/mountinfo", pid))
	var points []string
	for line := range strings.Lines(mounts) {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	slices.Sort(points)
	if !slices.Contains(points, "/") || !slices.Contains(points, "/usr") || slices.ContainsFunc(points, func(p string) bool {
		return p != "/" && p != "/etc/ld.so.cache" && p != "/usr" && !strings.HasPrefix(p, "/usr/")
	}) {
		t.Errorf("jail mount points = %v, want /, /usr (and below), /etc/ld.so.cache", points)
	}
}

func TestJailRefuses(t *testing.T) {
	mp := t.TempDir()
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"root uid", Spec{Path: "/usr/bin/true", UID: 0, GID: 1, Mountpoint: mp}},
		{"root gid", Spec{Path: "/usr/bin/true", UID: 1, GID: 0, Mountpoint: mp}},
		{"binary outside /usr", Spec{Path: "/bin/true", UID: 1, GID: 1, Mountpoint: mp}},
		{"relative binary", Spec{Path: "usr/bin/true", UID: 1, GID: 1, Mountpoint: mp}},
		{"no mountpoint", Spec{Path: "/usr/bin/true", UID: 1, GID: 1, Mountpoint: filepath.Join(mp, "missing")}},
		{"file over /usr", Spec{Path: "/usr/bin/true", UID: 1, GID: 1, Mountpoint: mp, Files: []File{{Source: "/etc/hostname", Target: "/usr/bin/true"}}}},
		{"file with ..", Spec{Path: "/usr/bin/true", UID: 1, GID: 1, Mountpoint: mp, Files: []File{{Source: "/etc/hostname", Target: "/vm/../etc/x"}}}},
		{"missing file", Spec{Path: "/usr/bin/true", UID: 1, GID: 1, Mountpoint: mp, Files: []File{{Source: "/nonexistent", Target: "/vm/x"}}}},
		{"non-device", Spec{Path: "/usr/bin/true", UID: 1, GID: 1, Mountpoint: mp, Devices: []string{"/dev/shm"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cmd, err := Start(tc.spec); err == nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("Start succeeded")
			}
		})
	}
}

func namespaces(t *testing.T, pid int) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, ns := range []string{"mnt", "pid", "net", "uts", "ipc"} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			t.Fatal(err)
		}
		m[ns] = l
	}
	return m
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

// TestCallerKeepsItsMounts pins a bug: the jail's thread was sometimes the
// main thread, which the Go runtime cannot end; it stayed in the jail's
// mount namespace, and /proc/self/mountinfo (the main thread's view) then
// showed the jail's mounts to the whole process, so that cgroup detection
// found no cgroups. Many jails in a row must leave the caller's view alone.
func TestCallerKeepsItsMounts(t *testing.T) {
	needRoot(t)
	nsBefore, _ := os.Readlink("/proc/self/ns/mnt")
	mountsBefore := readFile(t, "/proc/self/mountinfo")
	mp := mountpoint(t)
	for i := range 40 {
		cmd, err := Start(Spec{Path: "/usr/bin/true", UID: testUID, GID: testGID, Mountpoint: mp})
		if err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if ns, _ := os.Readlink("/proc/self/ns/mnt"); ns != nsBefore {
			t.Fatalf("after %d jails the process's mount namespace is %s, was %s", i+1, ns, nsBefore)
		}
	}
	if after := readFile(t, "/proc/self/mountinfo"); after != mountsBefore {
		t.Errorf("/proc/self/mountinfo changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
	}
}
