//go:build linux

package template

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
)

// The unprivileged account every sandbox has, for code that should not run
// as root inside it.
const (
	sandboxUser = "user"
	sandboxUID  = 1000
	sandboxHome = "home/user"
)

// agentPath is where the guest agent is installed, relative to the root.
const agentPath = "usr/local/sbin/warren-agent"

// customize turns a debootstrapped tree into a sandbox root filesystem. All
// access goes through an os.Root: a symlink in the tree (an absolute one
// such as /etc/resolv.conf can be) must never lead a write to the host.
//
// An imported tree (an OCI image's) may lack account files, or give the
// sandbox user's ID to an account of its own: the files are made, and the
// image's account keeps the ID (its sandboxes have no "user").
func customize(rootfs, agent string, now time.Time, imported bool) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	if err := installAgent(root, agent); err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	if err := writeConfig(root); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := makeDirs(root); err != nil {
		return fmt.Errorf("make directories: %w", err)
	}
	added, err := addUser(root, now, imported)
	if err != nil {
		return fmt.Errorf("add user: %w", err)
	}
	if added {
		if err := makeHome(root); err != nil {
			return fmt.Errorf("make home: %w", err)
		}
	}
	if err := removeAptCaches(root); err != nil {
		return fmt.Errorf("remove apt caches: %w", err)
	}
	return nil
}

func installAgent(root *os.Root, agent string) error {
	src, err := os.Open(agent)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := root.MkdirAll(path.Dir(agentPath), 0o755); err != nil {
		return err
	}
	if err := root.Remove(agentPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dst, err := root.OpenFile(agentPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return root.Chmod(agentPath, 0o755)
}

// writeConfig gives /etc a neutral identity: the runtime sets the real
// hostname and DNS of each sandbox.
func writeConfig(root *os.Root) error {
	files := []struct{ name, data string }{
		{"etc/hostname", "sandbox\n"},
		{"etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"etc/resolv.conf", ""},
	}
	for _, f := range files {
		if err := replaceFile(root, f.name, []byte(f.data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile replaces name, whatever it is (a symlink included), with a
// regular file holding data.
func replaceFile(root *os.Root, name string, data []byte, perm fs.FileMode) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return root.Chmod(name, perm)
}

// makeDirs makes the mount points and writable directories the runtimes
// and programs expect.
func makeDirs(root *os.Root) error {
	dirs := []struct {
		name string
		mode fs.FileMode
	}{
		{"proc", 0o555},
		{"sys", 0o555},
		{"dev", 0o755},
		{"dev/pts", 0o755},
		{"dev/shm", 0o777 | fs.ModeSticky},
		{"tmp", 0o777 | fs.ModeSticky},
		{"run", 0o755},
		{"root", 0o700},
		{"home", 0o755},
	}
	for _, d := range dirs {
		if err := root.MkdirAll(d.name, 0o755); err != nil {
			return err
		}
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// addUser adds the sandbox user and its group by editing the account files
// directly (no useradd in the tree to depend on). An existing entry of the
// same name is replaced; another account holding the ID is an error, or,
// in an imported tree, leaves the user out (added is false). An imported
// tree's missing account files are made, with root's entry.
func addUser(root *os.Root, now time.Time, imported bool) (added bool, err error) {
	id := fmt.Sprint(sandboxUID)
	entries := []struct {
		file     string
		line     string
		idField  int // the field holding the numeric ID, -1 if none
		optional bool
		base     string // an imported tree's file when it has none
	}{
		{"etc/passwd", fmt.Sprintf("%s:x:%s:%s::/%s:/bin/bash", sandboxUser, id, id, sandboxHome), 2, false, "root:x:0:0:root:/root:/bin/sh\n"},
		{"etc/group", fmt.Sprintf("%s:x:%s:", sandboxUser, id), 2, false, "root:x:0:\n"},
		// "*": no password can log in; the agent starts the user's processes.
		{"etc/shadow", fmt.Sprintf("%s:*:%d:0:99999:7:::", sandboxUser, now.Unix()/86400), -1, imported, ""},
		{"etc/gshadow", sandboxUser + ":!::", -1, true, ""},
	}
	edited := make([]string, len(entries))
	for i, e := range entries {
		data, err := root.ReadFile(e.file)
		switch {
		case errors.Is(err, fs.ErrNotExist) && imported && e.base != "":
			data = []byte(e.base)
		case errors.Is(err, fs.ErrNotExist) && e.optional:
			continue
		case err != nil:
			return false, err
		}
		out, err := withEntry(string(data), e.line, e.idField)
		if errors.Is(err, errIDTaken) && imported {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", e.file, err)
		}
		edited[i] = out
	}
	for i, e := range entries {
		if edited[i] == "" {
			continue
		}
		if err := root.MkdirAll(path.Dir(e.file), 0o755); err != nil {
			return false, err
		}
		// An existing file keeps its mode and owner (shadow is 0640 root:shadow).
		if err := root.WriteFile(e.file, []byte(edited[i]), 0o600); err != nil {
			return false, err
		}
	}
	return true, nil
}

// errIDTaken is withEntry's error for an ID another account holds.
var errIDTaken = errors.New("id already taken")

// withEntry returns the colon-separated account database db with entry in
// place of any entry of the same name. If idField >= 0, another entry
// with the same value in that field is an error.
func withEntry(db, entry string, idField int) (string, error) {
	fields := strings.Split(entry, ":")
	var b strings.Builder
	for line := range strings.Lines(db) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), ":")
		if f[0] == fields[0] {
			continue
		}
		if idField >= 0 && len(f) > idField && f[idField] == fields[idField] {
			return "", fmt.Errorf("%w: %s belongs to %q", errIDTaken, fields[idField], f[0])
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	b.WriteString(entry + "\n")
	return b.String(), nil
}

// makeHome makes the sandbox user's home from /etc/skel.
func makeHome(root *os.Root) error {
	if err := root.MkdirAll(sandboxHome, 0o750); err != nil {
		return err
	}
	skel, err := fs.ReadDir(root.FS(), "etc/skel")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range skel {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := root.ReadFile(path.Join("etc/skel", e.Name()))
		if err != nil {
			return err
		}
		name := path.Join(sandboxHome, e.Name())
		if err := replaceFile(root, name, data, 0o644); err != nil {
			return err
		}
		if err := root.Lchown(name, sandboxUID, sandboxUID); err != nil {
			return err
		}
	}
	if err := root.Chmod(sandboxHome, 0o750); err != nil {
		return err
	}
	return root.Lchown(sandboxHome, sandboxUID, sandboxUID)
}

// removeAptCaches removes the package lists and downloaded packages, which
// are large and stale by the time a sandbox runs (apt-get update refetches).
func removeAptCaches(root *os.Root) error {
	for _, pattern := range []string{"var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb"} {
		matches, err := fs.Glob(root.FS(), pattern)
		if err != nil {
			return err
		}
		for _, m := range matches {
			fi, err := root.Lstat(m)
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				continue
			}
			if err := root.Remove(m); err != nil {
				return err
			}
		}
	}
	return nil
}
