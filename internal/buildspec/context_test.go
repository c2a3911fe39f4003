package buildspec

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// contextDir makes a build context with a file, a directory tree, an
// executable, a symlink inside and one pointing out, beside a secret that is
// not in the context.
func contextDir(t *testing.T) string {
	t.Helper()
	top := t.TempDir()
	write(t, filepath.Join(top, "secret"), "do not read\n", 0o600)
	dir := filepath.Join(top, "ctx")
	write(t, filepath.Join(dir, "app/main.py"), "print(1)\n", 0o644)
	write(t, filepath.Join(dir, "app/run.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "app/lib/util.py"), "", 0o644)
	write(t, filepath.Join(dir, "app.txt"), "a\n", 0o644)
	for _, l := range [][2]string{{"main.py", "app/link.py"}, {"../secret", "app/out"}, {"../secret", "out"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type walked struct {
	Path    string
	Mode    fs.FileMode
	Target  string
	Content string
}

func walk(t *testing.T, dir, src string) []walked {
	t.Helper()
	var got []walked
	err := (&Dir{Root: dir}).Walk(src, func(e Entry, r io.Reader) error {
		w := walked{Path: e.Path, Mode: e.Mode, Target: e.Target}
		if r != nil {
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			w.Content = string(b)
		}
		got = append(got, w)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWalk(t *testing.T) {
	dir := contextDir(t)
	if err := os.Chmod(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "app/lib"), 0o750); err != nil {
		t.Fatal(err)
	}
	want := []walked{
		{Path: ".", Mode: fs.ModeDir | 0o755},
		{Path: "lib", Mode: fs.ModeDir | 0o750},
		{Path: "lib/util.py", Mode: 0o644},
		{Path: "link.py", Mode: fs.ModeSymlink | 0o777, Target: "main.py"},
		{Path: "main.py", Mode: 0o644, Content: "print(1)\n"},
		{Path: "out", Mode: fs.ModeSymlink | 0o777, Target: "../secret"},
		{Path: "run.sh", Mode: 0o755, Content: "#!/bin/sh\n"},
	}
	if got := walk(t, dir, "app"); !reflect.DeepEqual(got, want) {
		t.Errorf("walk of app:\n%+v\nwant\n%+v", got, want)
	}
	// A symlink named as the source is the symlink, not what it points to.
	if got := walk(t, dir, "out"); !reflect.DeepEqual(got, []walked{{Path: ".", Mode: fs.ModeSymlink | 0o777, Target: "../secret"}}) {
		t.Errorf("walk of the symlink out: %+v", got)
	}
	if got := walk(t, dir, "app.txt"); !reflect.DeepEqual(got, []walked{{Path: ".", Mode: 0o644, Content: "a\n"}}) {
		t.Errorf("walk of a file: %+v", got)
	}
	for _, w := range walk(t, dir, ".") {
		if strings.Contains(w.Content, "do not read") {
			t.Errorf("%s: the walk read the secret outside the context", w.Path)
		}
	}
}

func TestWalkRefuses(t *testing.T) {
	dir := contextDir(t)
	d := &Dir{Root: dir}
	for src, want := range map[string]string{
		"../secret":      `build context: "../secret" is not a clean relative path inside it`,
		"/etc/passwd":    `build context: "/etc/passwd" is not a clean relative path inside it`,
		"app/":           `build context: "app/" is not a clean relative path inside it`,
		"out/x":          "build context: out/x: out is not a directory",
		"app/out/x":      "build context: app/out/x: app/out is not a directory",
		"app.txt/x":      "build context: app.txt/x: app.txt is not a directory",
		"app/link.py/..": `build context: "app/link.py/.." is not a clean relative path inside it`,
	} {
		if _, err := d.Hash(src); err == nil || err.Error() != want {
			t.Errorf("Hash(%q): %v, want %s", src, err, want)
		}
	}
	if _, err := d.Hash("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Hash of a missing source: %v, want fs.ErrNotExist", err)
	}
	stop := errors.New("stop")
	if err := d.Walk(".", func(Entry, io.Reader) error { return stop }); err != stop {
		t.Errorf("Walk returns %v, not fn's error", err)
	}
}

func TestHash(t *testing.T) {
	dir := contextDir(t)
	h := func(src string) string {
		t.Helper()
		sum, err := DirContext(dir).Hash(src)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	orig := h("app")
	if !strings.HasPrefix(orig, "sha256:") || len(orig) != 71 {
		t.Errorf("hash %q is not a sha256 digest", orig)
	}
	now := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "app/main.py"), now, now); err != nil {
		t.Fatal(err)
	}
	if h("app") != orig {
		t.Error("a new mtime changes the hash")
	}
	if h("app.txt") == h("app/main.py") {
		t.Error("two different files hash the same")
	}
	for _, tt := range []struct {
		name   string
		change func() error
	}{
		{"content", func() error { return os.WriteFile(filepath.Join(dir, "app/main.py"), []byte("print(2)\n"), 0o644) }},
		{"mode", func() error { return os.Chmod(filepath.Join(dir, "app/main.py"), 0o600) }},
		{"name", func() error {
			return os.Rename(filepath.Join(dir, "app/lib/util.py"), filepath.Join(dir, "app/lib/utils.py"))
		}},
		{"new empty directory", func() error { return os.Mkdir(filepath.Join(dir, "app/empty"), 0o755) }},
		{"symlink target", func() error {
			os.Remove(filepath.Join(dir, "app/link.py"))
			return os.Symlink("run.sh", filepath.Join(dir, "app/link.py"))
		}},
		{"content moved between files", func() error {
			if err := os.WriteFile(filepath.Join(dir, "app/run.sh"), []byte("#!/bin/sh\nprint(2)\n"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "app/main.py"), nil, 0o600)
		}},
	} {
		before := h("app")
		if err := tt.change(); err != nil {
			t.Fatal(err)
		}
		if h("app") == before {
			t.Errorf("a change of %s leaves the hash", tt.name)
		}
	}
}

func TestHashGolden(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "app/main.py"), "print(1)\n", 0o644)
	write(t, filepath.Join(dir, "app/run.sh"), "#!/bin/sh\n", 0o755)
	if err := os.Chmod(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("main.py", filepath.Join(dir, "app/link.py")); err != nil {
		t.Fatal(err)
	}
	got, err := DirContext(dir).Hash("app")
	if err != nil {
		t.Fatal(err)
	}
	// Changing this changes the key of every cached copy step.
	if want := "sha256:99d68e198b682f8a5214881ab90f4533a55cf00da13cddb46b3a7134e79896d4"; got != want {
		t.Errorf("hash %s, want %s", got, want)
	}
}
