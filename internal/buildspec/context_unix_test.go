//go:build unix

package buildspec

import (
	"path/filepath"
	"syscall"
	"testing"
)

func TestHashRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "app/main.py"), "", 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "app/fifo"), 0o644); err != nil {
		t.Skipf("no FIFO: %v", err)
	}
	want := "build context: app/fifo is not a regular file, directory or symlink"
	if _, err := DirContext(dir).Hash("app"); err == nil || err.Error() != want {
		t.Errorf("Hash of a tree with a FIFO: %v, want %s", err, want)
	}
}
