package oci

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// escapeDir is an unpack directory with a sibling an image must not reach:
// PARENT/outside/secret (0600, "secret").
func escapeDir(t *testing.T) (root, outside string) {
	t.Helper()
	root, parent := unpackDir(t)
	outside = filepath.Join(parent, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// checkOutside fails unless outside holds its secret alone, untouched, and
// the parent holds root and outside alone.
func checkOutside(t *testing.T, root, outside string) {
	t.Helper()
	names := func(dir string) []string {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, de := range des {
			ns = append(ns, de.Name())
		}
		return ns
	}
	if got := names(filepath.Dir(root)); !slices.Equal(got, []string{"outside", "root"}) {
		t.Errorf("parent holds %q, want [outside root]", got)
	}
	if got := names(outside); !slices.Equal(got, []string{"secret"}) {
		t.Errorf("outside holds %q, want [secret]", got)
	}
	fi, err := os.Stat(outside)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("outside: %v, %v; want mode 0700", fi, err)
	}
	p := filepath.Join(outside, "secret")
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "secret" {
		t.Errorf("secret reads %q, %v", b, err)
	}
	fi, err = os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys() == nil {
		t.Fatalf("secret: %v, %v", fi, err)
	}
	if n := nlink(fi); n != 1 {
		t.Errorf("secret has %d links: one was made to it", n)
	}
}

func TestUnpackEscapes(t *testing.T) {
	for _, c := range []struct {
		name string
		// layers may name the outside directory by its absolute path.
		layers  func(outside string) [][]ent
		wantErr string // "" for none: the image is unpacked, contained
		check   func(t *testing.T, root, outside string)
	}{{
		name: "symlink dir escape, lower layer",
		layers: func(string) [][]ent {
			return [][]ent{{symlink("evil", "../outside")}, {file("evil/pwned", "x")}}
		},
		// ../outside is root/outside, which does not exist: the symlink
		// dangles, and a directory cannot be made through it.
		wantErr: "file exists",
	}, {
		name: "symlink dir escape, same layer, to the root's parent",
		layers: func(string) [][]ent {
			return [][]ent{{symlink("up", "../../.."), file("up/outside/pwned", "x"), file("up/pwned", "y")}}
		},
		check: func(t *testing.T, root, _ string) {
			wantTree(t, root, "up l ../../..", "outside d 0755", "outside/pwned f 0644 x", "pwned f 0644 y")
		},
	}, {
		name:    "dot-dot path",
		layers:  func(string) [][]ent { return [][]ent{{file("../pwned", "x")}} },
		wantErr: "path escapes the root",
	}, {
		name:    "dot-dot inside a path",
		layers:  func(string) [][]ent { return [][]ent{{dir("a/"), file("a/../../outside/pwned", "x")}} },
		wantErr: "path escapes the root",
	}, {
		name: "absolute path",
		layers: func(outside string) [][]ent {
			return [][]ent{{file(outside+"/pwned", "x")}}
		},
		check: func(t *testing.T, root, outside string) {
			if _, err := os.Lstat(filepath.Join(root, outside, "pwned")); err != nil {
				t.Errorf("the absolute path was not made inside the root: %v", err)
			}
		},
	}, {
		name: "absolute symlink then write through it",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("abs", outside), symlink("slash", "/")}, {file("abs/pwned", "x"), file("slash"+outside+"/pwned", "y")}}
		},
		// abs resolves to ROOT/<outside>, which does not exist; slash/...
		// makes it.
		wantErr: "file exists",
	}, {
		name: "absolute symlink to / then write under it",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("slash", "/")}, {file("slash"+outside+"/secret", "pwned")}}
		},
		check: func(t *testing.T, root, outside string) {
			b, err := os.ReadFile(filepath.Join(root, outside, "secret"))
			if string(b) != "pwned" {
				t.Errorf("ROOT/<outside>/secret: %q, %v", b, err)
			}
		},
	}, {
		name: "file over a symlink replaces the symlink",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("f", outside+"/secret")}, {{name: "f", body: "pwned", mode: 0o777}}}
		},
		check: func(t *testing.T, root, _ string) { wantTree(t, root, "f f 0777 pwned") },
	}, {
		name: "directory over a symlink replaces the symlink",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("d", outside)}, {{name: "d/", typ: tar.TypeDir, mode: 0o777}, file("d/x", "x")}}
		},
		check: func(t *testing.T, root, _ string) { wantTree(t, root, "d d 0777", "d/x f 0644 x") },
	}, {
		name: "hardlink to /etc/passwd",
		layers: func(string) [][]ent {
			return [][]ent{{hardlink("pw", "/etc/passwd")}}
		},
		wantErr: "no such file",
		check: func(t *testing.T, root, _ string) {
			a, errA := os.Stat("/etc/passwd")
			b, errB := os.Stat(filepath.Join(root, "pw"))
			if errA == nil && errB == nil && os.SameFile(a, b) {
				t.Error("pw is /etc/passwd")
			}
		},
	}, {
		name:    "hardlink by dot-dot",
		layers:  func(string) [][]ent { return [][]ent{{hardlink("pw", "../../../../../../etc/passwd")}} },
		wantErr: "path escapes the root",
	}, {
		name:    "hardlink to a file outside, by its absolute path",
		layers:  func(outside string) [][]ent { return [][]ent{{hardlink("s", outside+"/secret")}} },
		wantErr: "no such file",
	}, {
		name: "hardlink through a symlinked directory",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("o", outside), symlink("up", "../outside")}, {hardlink("s", "o/secret"), hardlink("s2", "up/secret")}}
		},
		wantErr: "no such file",
	}, {
		name: "write through a hardlink",
		layers: func(string) [][]ent {
			return [][]ent{{file("orig", "orig"), hardlink("h", "orig")}, {file("h", "new")}}
		},
		check: func(t *testing.T, root, _ string) { wantTree(t, root, "orig f 0644 orig", "h f 0644 new") },
	}, {
		name:    "whiteout of ../x",
		layers:  func(string) [][]ent { return [][]ent{{file("../.wh.outside", "")}} },
		wantErr: "path escapes the root",
	}, {
		name:    "whiteout named ..",
		layers:  func(string) [][]ent { return [][]ent{{dir("a/"), file("a/.wh...", "")}} },
		wantErr: "whiteout of an empty name",
	}, {
		name: "whiteout through a symlink",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("o", outside), symlink("up", "../outside")}, {file("o/.wh.secret", ""), file("up/.wh.secret", ""), file(".wh.o", "")}}
		},
		check: func(t *testing.T, root, _ string) { wantTree(t, root, "up l ../outside") },
	}, {
		name: "opaque directory through a symlink",
		layers: func(outside string) [][]ent {
			return [][]ent{{symlink("o", outside)}, {file("o/.wh..wh..opq", "")}}
		},
		check: func(t *testing.T, root, outside string) { wantTree(t, root, "o l "+outside) },
	}, {
		name: "symlink loop",
		layers: func(string) [][]ent {
			return [][]ent{{symlink("a", "b"), symlink("b", "a"), file("a/x", "x")}}
		},
		wantErr: "too many levels of symbolic links",
	}} {
		t.Run(c.name, func(t *testing.T) {
			root, outside := escapeDir(t)
			img := imageOf(t, c.layers(outside)...)
			_, err := Unpack(context.Background(), localImage(img), root, Limits{})
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("Unpack: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("Unpack: err = %v, want one saying %q", err, c.wantErr)
			}
			if c.wantErr != "" && err != nil && errors.Is(err, ErrLimit) {
				t.Errorf("Unpack: a limit error: %v", err)
			}
			checkOutside(t, root, outside)
			if c.check != nil {
				c.check(t, root, outside)
			}
		})
	}
}

func nlink(fi os.FileInfo) uint64 { return uint64(fi.Sys().(*syscall.Stat_t).Nlink) }
