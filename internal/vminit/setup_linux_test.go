//go:build linux

package vminit

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCmdline(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want map[string]string
	}{
		{"console=ttyS0 panic=-1 warren.vm=1 warren.hostname=sb-1\n", map[string]string{
			"console": "ttyS0", "panic": "-1", "warren.vm": "1", "warren.hostname": "sb-1",
		}},
		{`quiet  x="a b"  "y=c d" z= w==v`, map[string]string{"quiet": "", "x": "a b", "y": "c d", "z": "", "w": "=v"}},
		{"warren.vm=0 warren.vm=1", map[string]string{"warren.vm": "1"}},
		{"", map[string]string{}},
	} {
		if got := parseCmdline(tt.in); !maps.Equal(got, tt.want) {
			t.Errorf("parseCmdline(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestStartedOnlyAsPID1(t *testing.T) {
	if Started() {
		t.Error("Started in a test process")
	}
}

// TestRemoveOnDeviceStaysOnItsFilesystem empties a directory tree but
// leaves what is mounted inside it, as emptyInitramfs must leave the root
// disk mounted on /newroot.
func TestRemoveOnDeviceStaysOnItsFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	for _, d := range []string{"lib/modules", "dev", "newroot"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "init"), []byte("agent"), 0o755)
	os.WriteFile(filepath.Join(dir, "lib/modules/virtio.ko"), []byte("ko"), 0o644)
	os.Symlink("init", filepath.Join(dir, "link"))
	mnt := filepath.Join(dir, "newroot")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	os.WriteFile(filepath.Join(mnt, "keep"), []byte("disk"), 0o644)

	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := removeOnDevice(dir, st.Dev, false); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "newroot" {
		t.Errorf("left %v, want only the mount point newroot", entries)
	}
	if _, err := os.Stat(filepath.Join(mnt, "keep")); err != nil {
		t.Errorf("the mounted filesystem lost its file: %v", err)
	}
}
