package file

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/internal/blob"
	"warren/internal/blob/blobtest"
)

func TestStore(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := Open(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestLayoutAndModes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "snap/1/chunk", []byte("data")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		mode os.FileMode
	}{
		{"blobs", os.ModeDir | 0o700},
		{"blobs/snap", os.ModeDir | 0o700},
		{"blobs/snap/1", os.ModeDir | 0o700},
		{"blobs/snap/1/chunk", 0o600},
	} {
		fi, err := os.Stat(filepath.Join(dir, tt.path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tt.mode {
			t.Errorf("%s has mode %v, want %v", tt.path, fi.Mode(), tt.mode)
		}
	}
	if got, want := s.String(), "file:"+filepath.Join(dir, "blobs"); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	// Deleting the last object removes the directories it emptied.
	if err := s.Delete(t.Context(), "snap/1/chunk"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs/snap")); !os.IsNotExist(err) {
		t.Errorf("after Delete, blobs/snap: %v, want it removed", err)
	}
	// ...so the name can become an object.
	if err := s.Put(t.Context(), "snap", []byte("x")); err != nil {
		t.Errorf("Put(snap) after its directory emptied: %v", err)
	}
}

// TestTempFiles checks that List hides temporary files and that Open
// removes only the stale ones, as after a crash in the middle of a Put.
func TestTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "a/obj", []byte("x")); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "a", tmpPrefix+"stale")
	fresh := filepath.Join(dir, tmpPrefix+"fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("part"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	infos, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "a/obj" {
		t.Errorf("List = %+v, want only a/obj", infos)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file after Open: %v, want it removed", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file after Open: %v, want it kept (a Put may own it)", err)
	}
	// No Put leaves a temporary file behind.
	if err := os.Remove(fresh); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "a/obj", []byte("y")); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tmpPrefix) {
			t.Errorf("temporary file %s left behind", p)
		}
		return nil
	})
}

// TestKeyAndDirectory pins the one limit of the file layout: a key cannot
// also be the directory of other keys.
func TestKeyAndDirectory(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Put(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a", []byte("y")); err == nil {
		t.Error("Put(a) with a/b stored succeeded")
	}
	if err := s.Put(ctx, "a/b/c", []byte("y")); err == nil {
		t.Error("Put(a/b/c) with a/b stored succeeded")
	}
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "a/b" || infos[0].Size != 1 {
		t.Errorf("List = %+v, want only a/b", infos)
	}
}
