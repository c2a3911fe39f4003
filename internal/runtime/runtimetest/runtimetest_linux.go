//go:build linux

// Package runtimetest holds what the runtimes' own tests share: the guest
// agent built once per test binary, and a small root disk image made from
// host binaries, enough to run commands in a sandbox without a template
// build.
package runtimetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Main runs a runtime package's tests (call it from TestMain) with the
// guest agent built for them into *agent, when running as root (the
// runtimes' tests need root and skip without it).
func Main(m *testing.M, agent *string) int {
	if os.Geteuid() == 0 {
		path, cleanup, err := buildAgent()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		*agent = path
	}
	return m.Run()
}

// buildAgent builds the static guest agent into a new temporary directory
// and returns its path and a function that removes it. Call it from
// TestMain.
func buildAgent() (string, func(), error) {
	dir, err := os.MkdirTemp("", "warren-agent-")
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "warren-agent")
	cmd := exec.Command("go", "build", "-o", path, "warren/cmd/warren-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build agent: %v\n%s", err, out)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// MiniImage builds a 64 MiB ext4 image holding /bin/sh, cat, ls, sleep,
// id, hostname and stat (and extra, more host binaries) with their
// libraries, /etc/passwd and /etc/group with root and user (1000), and
// user's home.
func MiniImage(t testing.TB, extra ...string) string {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "etc", "root", "home/user"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bins := append([]string{"/bin/sh", "/bin/cat", "/bin/ls", "/bin/sleep", "/usr/bin/id", "/bin/hostname", "/usr/bin/stat"}, extra...)
	files := map[string]bool{}
	for _, b := range bins {
		files[b] = true
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", b, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
	for f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nuser:x:1000:\n"), 0o644)
	os.Chown(filepath.Join(root, "home/user"), 1000, 1000)
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	img := filepath.Join(t.TempDir(), "disk.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "root_owner=0:0", "-d", root, img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return img
}
