package tenanttpl

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/oci"
)

// TestBuilders: at most maxBuildsPerTenant of a tenant and maxBuilds in
// all run at once, the others wait; a release frees the place once,
// however often called.
func TestBuilders(t *testing.T) {
	var b builders
	var tickets []*buildTicket
	for _, tenant := range []string{"a", "a", "a", "b", "c", "d"} {
		tk, err := b.enqueue(tenant)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	for i, want := range []bool{true, true, false, true, true, false} {
		if got := tickets[i].started(); got != want {
			t.Errorf("build %d (of %s) started: %v, want %v", i, tickets[i].tenant, got, want)
		}
	}
	tickets[0].cancel()
	tickets[0].cancel()
	// d has none running, a has one: d's goes first.
	if !tickets[5].started() || tickets[2].started() {
		t.Errorf("after a release: d's started %v, a's third %v; want d's only", tickets[5].started(), tickets[2].started())
	}
	if got := b.running(); got != maxBuilds {
		t.Errorf("a release counted twice: %d running, want %d", got, maxBuilds)
	}
}

func TestTrustPlainIndexes(t *testing.T) {
	argv := []string{"python3", "-m", "pip", "install", "--index-url", "http://10.1.2.3:8080/simple/", "--", "numpy"}
	got := trustPlainIndexes(argv, "http://10.1.2.3:8080/simple/", "https://pypi.org/simple/")
	want := []string{"python3", "-m", "pip", "install", "--index-url", "http://10.1.2.3:8080/simple/", "--trusted-host", "10.1.2.3:8080", "--", "numpy"}
	if !slices.Equal(got, want) {
		t.Errorf("trustPlainIndexes = %q, want %q", got, want)
	}
	if got := trustPlainIndexes(argv[:4], "https://pypi.org/simple/"); !slices.Equal(got, argv[:4]) {
		t.Errorf("an https index: %q", got)
	}
}

// TestAptSuite: an apt step's suite is its built-in template's recipe's;
// a base no recipe made (an imported image's) has none.
func TestAptSuite(t *testing.T) {
	for tpl, want := range map[string]string{"default": "bookworm", "debian-trixie": "trixie", "debian-bookworm": "bookworm"} {
		if got, err := aptSuite(tpl); err != nil || got != want {
			t.Errorf("aptSuite(%q) = %q, %v; want %q", tpl, got, err, want)
		}
	}
	for _, tpl := range []string{"oci-0123456789abcdef", "debian-../../x", ""} {
		if got, err := aptSuite(tpl); err == nil {
			t.Errorf("aptSuite(%q) = %q, want an error", tpl, got)
		}
	}
}

func TestImageConfig(t *testing.T) {
	c := oci.Config{Env: []string{"PATH=/bin", "A=1", "=bad", "noequals"}, WorkingDir: "/app", User: "node", Start: "node server.js"}
	got := imageConfig(c, api.TemplateConfig{Env: map[string]string{"A": "2"}, Workdir: "/srv", Ready: "true"})
	want := api.TemplateConfig{Env: map[string]string{"PATH": "/bin", "A": "2"}, Workdir: "/srv", User: "node", Start: "node server.js", Ready: "true"}
	if got.Workdir != want.Workdir || got.User != want.User || got.Start != want.Start || got.Ready != want.Ready ||
		len(got.Env) != 2 || got.Env["A"] != "2" || got.Env["PATH"] != "/bin" {
		t.Errorf("imageConfig = %+v, want %+v", got, want)
	}
}

// TestExtractContext: files, directories and symlinks come out as they
// were, a symlink kept as one; a name out of the directory, a device or a
// write through a symlink to outside is refused, and nothing lands
// outside.
func TestExtractContext(t *testing.T) {
	mk := func(hs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return buf.Bytes()
	}
	dir := t.TempDir()
	good := mk(&tar.Header{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "app/a.txt", Typeflag: tar.TypeReg, Mode: 0o640, Size: 3},
		&tar.Header{Name: "./b/c.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		&tar.Header{Name: "app/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	if err := extractContext(good, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "app/a.txt")); err != nil || string(b) != "xxx" {
		t.Errorf("app/a.txt: %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "app/link")); err != nil || target != "/etc/passwd" {
		t.Errorf("app/link: %q, %v", target, err)
	}
	outside := t.TempDir()
	for name, b := range map[string][]byte{
		"dotdot":   mk(&tar.Header{Name: "../escape.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"absolute": mk(&tar.Header{Name: "/" + filepath.Join(outside, "abs.txt"), Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"device":   mk(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644}),
		"through a symlink": mk(&tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
			&tar.Header{Name: "out/planted.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
	} {
		d := t.TempDir()
		err := extractContext(b, d)
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) > 0 {
			t.Fatalf("%s: %v written outside", name, entries)
		}
	}
	if err := extractContext([]byte("not a tar at all, not at all"), t.TempDir()); err == nil || strings.Contains(err.Error(), "panic") {
		t.Errorf("garbage: %v", err)
	}
}
