package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/api"
)

// The in-process sandboxes share the host's filesystem: a test reads and
// writes their files under its own temporary directory, directly.

func TestFilesByteExact(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	p := filepath.Join(t.TempDir(), "blob.bin")
	data := make([]byte, 3<<20+7)
	rand.Read(data)
	if code, stdout, stderr := runCLI(t, data, "files", "write", "--mode", "0600", id, p); code != 0 || stdout != "" {
		t.Fatalf("write: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	got, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || !bytes.Equal(got, data) || fi.Mode().Perm() != 0o600 {
		t.Errorf("the sandbox holds %d bytes (equal %v, %v) mode %v, want %d and 0600", len(got), bytes.Equal(got, data), err, fi.Mode(), len(data))
	}
	code, stdout, stderr := runCLI(t, nil, "files", "read", id, p)
	if code != 0 || stdout != string(data) {
		t.Errorf("read: exit %d, %d bytes (equal %v), stderr %q", code, len(stdout), stdout == string(data), stderr)
	}
	if code, _, stderr := runCLI(t, nil, "files", "read", id, "/nope"); code != 1 || stderr != "warren: read file: read /nope: no such file or directory\n" {
		t.Errorf("read of a missing file: exit %d stderr %q", code, stderr)
	}
}

func TestFilesCommands(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	if err := os.WriteFile(a, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}

	code, stdout, _ := runCLI(t, nil, "files", "stat", id, a)
	var fi api.FileInfo
	if code != 0 || json.Unmarshal([]byte(stdout), &fi) != nil || fi.Size != 3 || fi.Path != a || fi.Type != "file" {
		t.Errorf("stat: exit %d stdout %q", code, stdout)
	}
	if code, stdout, _ := runCLI(t, nil, "files", "ls", id, dir); code != 0 || !strings.HasPrefix(stdout, "-rw-r--r-- ") ||
		!strings.Contains(stdout, " 3 ") || !strings.HasSuffix(stdout, " a\n") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("ls: exit %d stdout %q", code, stdout)
	}
	var entries []api.FileInfo
	if code, stdout, _ := runCLI(t, nil, "files", "ls", "--json", id, dir); code != 0 || json.Unmarshal([]byte(stdout), &entries) != nil ||
		len(entries) != 1 || entries[0].Name != "a" {
		t.Errorf("ls --json: exit %d stdout %q", code, stdout)
	}
	d := filepath.Join(dir, "d")
	if code, _, stderr := runCLI(t, nil, "files", "mkdir", "--mode", "700", id, d); code != 0 {
		t.Errorf("mkdir: exit %d stderr %q", code, stderr)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("after mkdir --mode 700: %v, %v; want a directory of mode 0700", fi.Mode(), err)
	}
	b := filepath.Join(d, "b")
	if code, _, stderr := runCLI(t, nil, "files", "mv", id, a, b); code != 0 {
		t.Errorf("mv: exit %d stderr %q", code, stderr)
	}
	if got, err := os.ReadFile(b); err != nil || string(got) != "abc" || exists(a) {
		t.Errorf("after mv: %q, %v, the source there %v; want the file moved", got, err, exists(a))
	}
	if code, _, stderr := runCLI(t, nil, "files", "rm", id, d); code != 1 || !exists(b) {
		t.Errorf("rm of a full directory: exit %d stderr %q, its file there %v; want 1 and it kept", code, stderr, exists(b))
	}
	if code, _, stderr := runCLI(t, nil, "files", "rm", "-r", id, d); code != 0 || exists(d) {
		t.Errorf("rm -r: exit %d stderr %q, the directory there %v; want it gone", code, stderr, exists(d))
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}
