package template

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"default", true},
		{"0", true},
		{"py3.11_base-2", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-x", false},
		{".hidden", false},
		{"Upper", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
	} {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%q) error %v does not wrap ErrInvalidName", tc.name, err)
		}
	}
}

func TestRecipes(t *testing.T) {
	if got := Recipes(); !slices.Equal(got, []string{"default"}) {
		t.Errorf("Recipes() = %v, want [default]", got)
	}
	r := recipes["default"]
	changed := r
	changed.include = append(slices.Clone(r.include), "vim")
	if r.cacheKey() == changed.cacheKey() {
		t.Error("cache key did not change with the package list")
	}
	if r.cacheKey() != recipes["default"].cacheKey() {
		t.Error("cache key is not stable")
	}
	want := []string{"--variant=minbase", "--include=python3,ca-certificates,coreutils,procps,git,curl",
		"bookworm", "/r", "http://m/debian"}
	if got := r.debootstrapArgs("/r", "http://m/debian"); !slices.Equal(got, want) {
		t.Errorf("debootstrapArgs = %q, want %q", got, want)
	}
}

const sampleDeb822 = `# Debian sources
Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
Components: main

Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`

func TestMirrorFromDeb822(t *testing.T) {
	for _, tc := range []struct {
		text, suite, want string
	}{
		{sampleDeb822, "bookworm", "http://deb.debian.org/debian"},
		{sampleDeb822, "bookworm-security", "http://deb.debian.org/debian-security"},
		{sampleDeb822, "trixie", ""},
		// Disabled stanzas and unusable URIs are skipped; field names are
		// case-insensitive; values may continue on the next line.
		{"Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n" +
			"types: deb\nuris: cdrom:/x\n  https://on.example/debian\nsuites:\n bookworm\n", "bookworm", "https://on.example/debian"},
	} {
		if got := mirrorFromDeb822(tc.text, tc.suite); got != tc.want {
			t.Errorf("mirrorFromDeb822(suite %s) = %q, want %q", tc.suite, got, tc.want)
		}
	}
}

func TestMirrorFromOneLine(t *testing.T) {
	for _, tc := range []struct {
		text, want string
	}{
		{"deb http://deb.debian.org/debian bookworm main\n", "http://deb.debian.org/debian"},
		{"# deb http://commented.example/debian bookworm main\n" +
			"deb-src http://src.example/debian bookworm main\n" +
			"deb http://security.debian.org/debian-security bookworm-security main\n" +
			"deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main contrib # comment\n",
			"http://mirror.example/debian"},
		{"deb [ arch=amd64 ] http://spaced.example/debian bookworm main\n", "http://spaced.example/debian"},
		{"deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n", ""},
		{"deb [broken http://x/debian bookworm main\n", ""},
	} {
		if got := mirrorFromOneLine(tc.text, "bookworm"); got != tc.want {
			t.Errorf("mirrorFromOneLine(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestAptMirror(t *testing.T) {
	etc := t.TempDir()
	if got := aptMirror(etc, "bookworm"); got != defaultMirror {
		t.Errorf("no sources: aptMirror = %q, want %q", got, defaultMirror)
	}
	d := filepath.Join(etc, "sources.list.d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(d, "other.list.disabled"), "deb http://disabled.example/debian bookworm main\n")
	write(filepath.Join(d, "nodesource.sources"), "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n")
	write(filepath.Join(d, "z.sources"), sampleDeb822)
	if got := aptMirror(etc, "bookworm"); got != "http://deb.debian.org/debian" {
		t.Errorf("aptMirror from sources.list.d = %q", got)
	}
	write(filepath.Join(etc, "sources.list"), "deb http://first.example/debian bookworm main\n")
	if got := aptMirror(etc, "bookworm"); got != "http://first.example/debian" {
		t.Errorf("aptMirror with sources.list = %q, want it first", got)
	}
}

func TestLineWriter(t *testing.T) {
	var out strings.Builder
	w := newLineWriter(&out, "step")
	w.Printf("starting %d", 1)
	w.Write([]byte("I: one\nI: tw"))
	w.Write([]byte("o\r\n\npartial"))
	w.Flush()
	want := "step: starting 1\nstep: I: one\nstep: I: two\nstep: partial\n"
	if out.String() != want {
		t.Errorf("output = %q, want %q", out.String(), want)
	}
	if w.last != "partial" {
		t.Errorf("last = %q, want partial", w.last)
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		ref     string
		name    string
		version int64
		bad     bool
	}{
		{ref: "sci", name: "sci"},
		{ref: "sci@3", name: "sci", version: 3},
		{ref: "sci@0", bad: true}, {ref: "sci@-1", bad: true}, {ref: "sci@x", bad: true},
		{ref: "Sci", bad: true}, {ref: "../x", bad: true}, {ref: "", bad: true}, {ref: "@1", bad: true},
	} {
		name, version, err := ParseRef(tc.ref)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseRef(%q) = %q, %d; want an error", tc.ref, name, version)
			}
			continue
		}
		if err != nil || name != tc.name || version != tc.version {
			t.Errorf("ParseRef(%q) = %q, %d, %v; want %q, %d", tc.ref, name, version, err, tc.name, tc.version)
		}
	}
}
