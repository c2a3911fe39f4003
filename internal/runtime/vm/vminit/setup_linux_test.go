//go:build linux

package vminit

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
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
		{"warren.vm=1 warren.workspace=1", map[string]string{ParamVM: "1", ParamWorkspace: "1"}},
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

// TestMountDisk mounts an ext4 disk (a loop device standing in for
// /dev/vdb) on a mount point it makes, as Setup mounts the workspace disk
// on the root disk's /workspace.
func TestMountDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device and mount")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "ws.img")
	if err := disk.MakeExt4(t.Context(), img, 64<<20); err != nil {
		t.Fatal(err)
	}
	loop, err := disk.AttachLoop(img, disk.LoopOptions{})
	if err != nil {
		t.Skipf("needs a loop device: %v", err)
	}
	defer loop.Close()
	root := filepath.Join(dir, "newroot")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := root + WorkspaceDir
	if err := mountDisk("workspace disk", loop.Path(), mnt); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC {
		t.Errorf("%s: statfs type %#x (%v), want ext4", mnt, st.Type, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Errorf("write to the mounted disk: %v", err)
	}
}
