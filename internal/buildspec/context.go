package buildspec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"warren/internal/unixmode"
)

// MaxContextEntries bounds the files, directories and symlinks under one
// copy step's source.
const MaxContextEntries = 1 << 20

// Context is the build context: the files copy steps read.
type Context interface {
	// Hash returns the digest ("sha256:" and 64 hex digits) of the tree at
	// src, a clean relative path (Validate's rule for a copy's src): the
	// names, types, modes and contents of the files in it and the targets
	// of its symlinks, in sorted order, so that it changes exactly when
	// what a copy of src would produce changes. An error wraps
	// fs.ErrNotExist when src does not exist. Calls may run concurrently.
	Hash(src string) (string, error)
}

// Dir is a build context on disk: the directory Root. Nothing outside it is
// read: a path is resolved inside it (os.Root), no symlink is followed, and
// a copy's source may not pass through one.
type Dir struct {
	Root string
}

var _ Context = (*Dir)(nil)

// DirContext returns the build context of directory dir (a *Dir).
func DirContext(dir string) Context { return &Dir{Root: dir} }

// Entry is a file, directory or symlink that Walk visits.
type Entry struct {
	// Path is slash-separated and relative to the walked source: "." is
	// the source itself.
	Path string
	// Mode is the entry's type (0, fs.ModeDir or fs.ModeSymlink) and its
	// permission, setuid, setgid and sticky bits.
	Mode   fs.FileMode
	Size   int64  // a regular file's
	Target string // a symlink's, as written: it is copied as a symlink, never followed
}

// Walk visits src and, when it is a directory, everything under it, a
// directory before its contents and the entries of a directory in order of
// name: the order Hash hashes them in, so that a builder that copies what
// Walk gives copies what was hashed. For a regular file r reads its content
// (Size bytes at most) until fn returns; it is nil for the others. An error
// from fn stops the walk and is returned. The tree may hold only regular
// files, directories and symlinks.
func (d *Dir) Walk(src string, fn func(e Entry, r io.Reader) error) error {
	if path.IsAbs(src) || path.Clean(src) != src || src == ".." || strings.HasPrefix(src, "../") {
		return fmt.Errorf("build context: %q is not a clean relative path inside it", src)
	}
	root, err := os.OpenRoot(d.Root)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer root.Close()
	// A symlink on the way to src would be followed (inside the context,
	// but not as a copy of it would see it): refuse it.
	if src != "." {
		parts := strings.Split(src, "/")
		for i := 1; i < len(parts); i++ {
			dir := strings.Join(parts[:i], "/")
			fi, err := root.Lstat(dir)
			if err != nil {
				return fmt.Errorf("build context: %w", err)
			}
			if !fi.IsDir() {
				return fmt.Errorf("build context: %s: %s is not a directory", src, dir)
			}
		}
	}
	w := walker{root: root, fn: fn}
	return w.walk(src, ".")
}

type walker struct {
	root *os.Root
	fn   func(Entry, io.Reader) error
	n    int // entries visited
}

// walk visits name (a path in the root), which is rel in the walk.
func (w *walker) walk(name, rel string) error {
	if w.n++; w.n > MaxContextEntries {
		return fmt.Errorf("build context: more than %d files under the source", MaxContextEntries)
	}
	fi, err := w.root.Lstat(name)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	e := Entry{Path: rel, Mode: fi.Mode().Type() | unixmode.ToFileMode(unixmode.FromFileMode(fi.Mode()))}
	switch fi.Mode().Type() {
	case 0:
		f, err := w.root.Open(name)
		if err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		defer f.Close()
		// The file may have been replaced since Lstat (by a symlink to
		// another file of the context): read only the one we looked at.
		if now, err := f.Stat(); err != nil || !os.SameFile(fi, now) {
			return fmt.Errorf("build context: %s changed while it was read", name)
		}
		e.Size = fi.Size()
		return w.fn(e, io.LimitReader(f, e.Size))
	case fs.ModeSymlink:
		if e.Target, err = w.root.Readlink(name); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		return w.fn(e, nil)
	case fs.ModeDir:
		if err := w.fn(e, nil); err != nil {
			return err
		}
		names, err := w.readDir(name)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := w.walk(path.Join(name, n), path.Join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("build context: %s is not a regular file, directory or symlink", name)
}

func (w *walker) readDir(name string) ([]string, error) {
	f, err := w.root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	defer f.Close()
	var names []string
	for {
		// Read in batches, so that a huge directory fails at the bound
		// rather than after it is all in memory.
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if w.n+len(names) > MaxContextEntries {
			return nil, fmt.Errorf("build context: more than %d files under the source", MaxContextEntries)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Hash implements Context.
func (d *Dir) Hash(src string) (string, error) {
	h := sha256.New()
	w := keyWriter{h}
	w.str("warren buildspec context v1")
	err := d.Walk(src, func(e Entry, r io.Reader) error {
		w.str(e.Path)
		switch e.Mode.Type() {
		case fs.ModeDir:
			w.str("dir")
			w.u64(uint64(unixmode.FromFileMode(e.Mode)))
		case fs.ModeSymlink:
			// A symlink's mode means nothing (and differs between
			// systems): only its target is hashed.
			w.str("symlink")
			w.str(e.Target)
		default:
			w.str("file")
			w.u64(uint64(unixmode.FromFileMode(e.Mode)))
			w.u64(uint64(e.Size))
			n, err := io.Copy(h, r)
			if err != nil {
				return fmt.Errorf("build context: %s: %w", path.Join(src, e.Path), err)
			}
			if n != e.Size {
				return fmt.Errorf("build context: %s changed while it was read", path.Join(src, e.Path))
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
