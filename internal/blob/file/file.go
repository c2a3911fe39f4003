// Package file is the blob store on a local directory: the snapshot store
// of a single node, and the reference backend for tests. Each object is a
// file named by its key under the directory, one subdirectory per '/'
// segment, so an operator can inspect it with ls. It is not shared storage:
// two nodes must not use the same directory over a network filesystem, and
// it keeps no copy of its own (back the directory up or use blob/s3).
//
// Invariant: every regular file under the directory whose name does not
// start with ".put~" (tmpPrefix) is a complete object, written whole by
// Put. Put writes a temporary file beside the target, syncs it, renames it
// into place and syncs the directory, so a crash at any point leaves the
// old object or the new one, and at worst a stale temporary file that List
// never shows and Open removes.
//
// Because keys become paths, a key cannot also be the directory of other
// keys: with "a/b" stored, Put of "a" fails (and the reverse), though Get,
// Stat and Delete of "a" behave as for any missing key. S3 has no such
// limit, so callers that want to run on both must not use such pairs.
package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"warren/internal/blob"
)

const (
	// tmpPrefix starts the name of every temporary file. '~' is not a key
	// byte, so no object can have such a name.
	tmpPrefix = ".put~"
	// staleAge is how old a temporary file must be for Open to remove it:
	// a younger one may belong to a Put still running in another process.
	staleAge = time.Minute
	fileMode = 0o600
	dirMode  = 0o700
)

// Store is a blob.Store on a local directory. Its methods may be called
// concurrently, also from several processes on the same directory.
type Store struct {
	dir string // absolute, cleaned
}

var _ blob.Store = (*Store)(nil)

// Open returns the store rooted at dir, creating the directory (0700) if it
// is missing, and removes temporary files that crashed Puts left behind
// more than a minute ago.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open blob dir: %w", err)
	}
	if err := os.MkdirAll(abs, dirMode); err != nil {
		return nil, fmt.Errorf("open blob dir: %w", err)
	}
	s := &Store{dir: abs}
	if err := s.removeStale(time.Now().Add(-staleAge)); err != nil {
		return nil, fmt.Errorf("open blob dir: %w", err)
	}
	return s, nil
}

// removeStale removes the temporary files last modified before cutoff.
func (s *Store) removeStale(cutoff time.Time) error {
	return filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by a concurrent Delete
			}
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if fi.ModTime().Before(cutoff) {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
}

// path returns the file of a valid key.
func (s *Store) path(key string) string {
	return filepath.Join(s.dir, filepath.FromSlash(key))
}

// Put writes data to a temporary file in the key's directory and renames
// it over the key, so readers never see a part of it.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := s.put(ctx, key, data); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

func (s *Store) put(ctx context.Context, key string, data []byte) error {
	target := s.path(key)
	dir := filepath.Dir(target)
	var tmp *os.File
	// A Delete of the directory's last object removes the directory; if
	// one does so between mkdirs and the create, make it again.
	for try := 0; ; try++ {
		err := s.mkdirs(dir)
		if err == nil {
			tmp, err = os.OpenFile(filepath.Join(dir, tmpPrefix+randomSuffix()),
				os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || try == 2 {
			return err
		}
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// The last moment a cancelled Put can still leave no trace.
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	done = true
	return syncDir(dir)
}

// mkdirs makes dir and its missing parents below the store's root, syncing
// each parent that gains an entry so the new path survives a crash.
func (s *Store) mkdirs(dir string) error {
	if dir == s.dir {
		return nil
	}
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Made by a concurrent Put, or a file is in the way.
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return nil
			}
		}
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Get reads the object's file.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	data, err := os.ReadFile(s.path(key))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	return data, nil
}

// Stat returns the size and modification time of the object's file.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, fmt.Errorf("stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Stat(s.path(key))
	if err == nil && !fi.Mode().IsRegular() {
		err = blob.ErrNotFound // a directory of other keys
	}
	if err != nil {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, notFound(err))
	}
	return blob.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// notFound turns the errors of a missing file into blob.ErrNotFound: the
// file is absent, one of its parents is a file (ENOTDIR), or it is a
// directory (EISDIR from reading one).
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) {
		return blob.ErrNotFound
	}
	return err
}

// Delete removes the object's file, then the directories it leaves empty.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := s.path(key)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return nil // missing, or only the directory of other keys
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	// Tidy up: rmdir fails harmlessly on a directory that is not empty
	// or that a concurrent Delete already removed.
	for dir := filepath.Dir(p); dir != s.dir; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// List walks the directories that can hold keys starting with prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := blob.ValidPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	// Every match lies under the prefix's last complete directory.
	root := s.dir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = s.path(prefix[:i])
	}
	var infos []blob.Info
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil // no such directory, or removed while walking
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) || !(d.Type().IsRegular() || d.IsDir()) {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip directories that cannot hold a match.
			if p != root && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while walking
			}
			return err
		}
		infos = append(infos, blob.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	// The walk's order is not key order: "a.b" sorts before "a/b".
	slices.SortFunc(infos, func(a, b blob.Info) int { return strings.Compare(a.Key, b.Key) })
	return infos, nil
}

// String names the store by its directory.
func (s *Store) String() string { return "file:" + s.dir }

// Close does nothing: the store holds no resources between calls.
func (s *Store) Close() error { return nil }
