// Package atomicfile writes small files whole: a reader sees the old
// content or the new, never a part, even across a crash. It is for state
// files (keys, recorded settings), not for large data.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a temporary file beside path and renames
// it over path, syncing both, so that path is never seen half-written.
func Write(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; Chmod states the mode asked
	// for whatever the umask.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	committed = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
