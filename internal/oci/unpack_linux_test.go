package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"warren/internal/archive/archivetest"
)

func TestUnpackWhiteouts(t *testing.T) {
	img := imageOf(t,
		[]ent{
			dir("a/"), dir("a/b/"), file("a/b/f1", "1"), file("a/f2", "2"),
			dir("d/"), dir("d/sub/"), file("d/sub/x", "x"), file("keep", "k"),
			dir("o/"), file("o/old", "old"), dir("o/sub/"), file("o/sub/old2", "old2"),
		},
		[]ent{
			file("a/.wh.f2", ""), // a file
			file(".wh.d", ""),    // a whole tree
			file(".wh.nothing", ""),
			dir("o/"), file("o/new", "new"), dir("o/sub/"), file("o/sub/new2", "new2"),
			file("o/.wh..wh..opq", ""), // after the siblings it keeps
		},
		[]ent{
			file("a/.wh.b", ""),
			file("a/b", "now a file"), // same layer as its whiteout: stays
			file("keep2", "k2"),
			file(".wh.keep2", ""), // after what it would hide in its own layer
		},
	)
	root, st := unpack(t, img)
	wantTree(t, root,
		"a d 0755", "a/b f 0644 now a file",
		"keep f 0644 k", "keep2 f 0644 k2",
		"o d 0755", "o/new f 0644 new", "o/sub d 0755", "o/sub/new2 f 0644 new2",
	)
	if st.Whiteouts != 6 {
		t.Errorf("Whiteouts = %d, want 6", st.Whiteouts)
	}
}

func TestUnpackOpaqueFirst(t *testing.T) {
	img := imageOf(t,
		[]ent{dir("o/"), file("o/old", "old"), dir("o/sub/"), file("o/sub/old", "old"), file("o2", "x")},
		[]ent{dir("o/"), file("o/.wh..wh..opq", ""), file("o/new", "new"), file("o/sub/new", "new")},
	)
	root, _ := unpack(t, img)
	wantTree(t, root, "o d 0755", "o/new f 0644 new", "o/sub d 0755", "o/sub/new f 0644 new", "o2 f 0644 x")
}

func TestUnpackOpaqueRoot(t *testing.T) {
	img := imageOf(t,
		[]ent{file("old", "old"), dir("etc/"), file("etc/x", "x")},
		[]ent{file("new", "new"), file("./.wh..wh..opq", "")},
	)
	root, _ := unpack(t, img)
	wantTree(t, root, "new f 0644 new")
}

func TestUnpackReplace(t *testing.T) {
	img := imageOf(t,
		[]ent{dir("d/"), file("d/x", "x"), dir("d/y/"), file("f", "file"), file("g", "g"), dir("h/"), file("h/z", "z"),
			{name: "m/", typ: tar.TypeDir, mode: 0o500}},
		// m's mode is not given to the directory made again for m/f.
		[]ent{file("d", "now a file"), dir("f/"), file("f/inner", "in"), symlink("g", "d"), dir("h/"), file("h/w", "w"),
			file(".wh.m", ""), file("m/f", "f")},
	)
	root, _ := unpack(t, img)
	wantTree(t, root,
		"m d 0755", "m/f f 0644 f",
		"d f 0644 now a file",
		"f d 0755", "f/inner f 0644 in",
		"g l d",
		"h d 0755", "h/w f 0644 w", "h/z f 0644 z",
	)
}

func TestUnpackLinks(t *testing.T) {
	img := imageOf(t,
		[]ent{
			dir("usr/"), dir("usr/bin/"), file("usr/bin/python3", "py"),
			hardlink("usr/bin/python", "usr/bin/python3"),
			hardlink("usr/bin/abs", "/usr/bin/python3"),
			symlink("bin", "usr/bin"), symlink("abs", "/etc/passwd"), symlink("up", "../../../x"),
			symlink("dangling", "nowhere"),
			file("bin/via-symlink", "v"), // through the symlinked directory
			hardlink("sl", "abs"),        // a hardlink to a symlink is a symlink
		},
		[]ent{file("usr/bin/python", "replaced")}, // replaces the name, not the other
	)
	root, st := unpack(t, img)
	wantTree(t, root,
		"usr d 0755", "usr/bin d 0755", "usr/bin/python3 f 0644 py", "usr/bin/abs f 0644 py",
		"usr/bin/python f 0644 replaced", "usr/bin/via-symlink f 0644 v",
		"bin l usr/bin", "abs l /etc/passwd", "up l ../../../x", "dangling l nowhere", "sl l /etc/passwd",
	)
	a, _ := os.Stat(filepath.Join(root, "usr/bin/python3"))
	b, _ := os.Stat(filepath.Join(root, "usr/bin/abs"))
	if !os.SameFile(a, b) {
		t.Error("usr/bin/abs is not a hardlink of usr/bin/python3")
	}
	if st.Files != 12 {
		t.Errorf("Files = %d, want 12", st.Files)
	}
}

func TestUnpackModesAndTimes(t *testing.T) {
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	img := imageOf(t, []ent{
		{name: "bin/", typ: tar.TypeDir, mode: 0o555, mtime: old},
		{name: "bin/su", body: "su", mode: 0o4755},
		{name: "bin/wall", body: "w", mode: 0o2755},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "secret", body: "s", mode: 0o400, mtime: old},
		{name: "link", typ: tar.TypeSymlink, link: "secret", mtime: old},
		{name: "fifo", typ: tar.TypeFifo, mode: 0o640},
	})
	root, _ := unpack(t, img)
	wantTree(t, root,
		"bin d 0555", "bin/su f 4755 su", "bin/wall f 2755 w",
		"tmp d 1777", "secret f 0400 s", "link l secret", "fifo p 0640",
	)
	for _, name := range []string{"bin", "secret", "link"} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			t.Errorf("%s: mtime %v, want %v", name, fi.ModTime(), old)
		}
	}
}

// xattrImage is a file with an xattr of each kind.
func xattrImage(t *testing.T) v1.Image {
	return imageOf(t, []ent{{name: "f", body: "x", pax: map[string]string{
		"SCHILY.xattr.user.color":       "blue",
		"SCHILY.xattr.trusted.t":        "only root",
		"SCHILY.xattr.security.selinux": "never",
		// A v2 file capability: cap_net_raw permitted.
		"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
	}}})
}

func getxattr(p, name string) string {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func TestUnpackXattrs(t *testing.T) {
	root, _ := unpack(t, xattrImage(t))
	p := filepath.Join(root, "f")
	if got := getxattr(p, "user.color"); got != "blue" {
		if errors.Is(unix.Lsetxattr(p, "user.probe", []byte("1"), 0), unix.ENOTSUP) {
			t.Skip("the file system of TMPDIR has no user xattrs")
		}
		t.Errorf("user.color = %q, want blue", got)
	}
	if got := getxattr(p, "security.selinux"); got == "never" {
		t.Error("security.selinux was set")
	}
	if os.Geteuid() != 0 && getxattr(p, "trusted.t") != "" {
		t.Error("trusted.t set without root")
	}
}

func TestUnpackXattrsAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("trusted.* and security.capability xattrs need root (euid 0)")
	}
	root, _ := unpack(t, xattrImage(t))
	p := filepath.Join(root, "f")
	if got := getxattr(p, "trusted.t"); got != "only root" {
		t.Errorf("trusted.t = %q", got)
	}
	if getxattr(p, "security.capability") == "" {
		t.Error("security.capability not set")
	}
}

// ownedImage has owners other than root's, a setuid file, and device
// nodes, one of them hardlinked.
func ownedImage(t *testing.T) v1.Image {
	return imageOf(t, []ent{
		{name: "home/", typ: tar.TypeDir, uid: 1000, gid: 1000},
		{name: "home/f", body: "x", uid: 1000, gid: 100, mode: 0o4755},
		{name: "home/l", typ: tar.TypeSymlink, link: "f", uid: 1001, gid: 1001},
		{name: "dev/", typ: tar.TypeDir},
		{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666},
		{name: "dev/loop9", typ: tar.TypeBlock, major: 7, minor: 9, mode: 0o660, gid: 6},
		{name: "dev/null2", typ: tar.TypeLink, link: "dev/null"},
	})
}

func TestUnpackOwnersAndDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners and device nodes need root (euid 0)")
	}
	root, st := unpack(t, ownedImage(t))
	if st.Skipped != 0 {
		t.Errorf("Skipped = %d, want 0", st.Skipped)
	}
	for _, c := range []struct {
		name     string
		uid, gid uint32
		rdev     uint64
	}{
		{"home", 1000, 1000, 0}, {"home/f", 1000, 100, 0}, {"home/l", 1001, 1001, 0},
		{"dev/null", 0, 0, unix.Mkdev(1, 3)}, {"dev/loop9", 0, 6, unix.Mkdev(7, 9)}, {"dev/null2", 0, 0, unix.Mkdev(1, 3)},
	} {
		fi, err := os.Lstat(filepath.Join(root, c.name))
		if err != nil {
			t.Fatal(err)
		}
		s := fi.Sys().(*syscall.Stat_t)
		if s.Uid != c.uid || s.Gid != c.gid || s.Rdev != c.rdev {
			t.Errorf("%s: uid %d gid %d rdev %x, want %d %d %x", c.name, s.Uid, s.Gid, s.Rdev, c.uid, c.gid, c.rdev)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "home/f")); fi.Mode()&os.ModeSetuid == 0 {
		t.Error("home/f lost setuid to its chown")
	}
}

func TestUnpackDevicesWithoutRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root device nodes are made (TestUnpackOwnersAndDevices); run the tests as another user")
	}
	root, st := unpack(t, ownedImage(t))
	if st.Skipped != 3 {
		t.Errorf("Skipped = %d, want 3 (two nodes, a hardlink to one)", st.Skipped)
	}
	wantTree(t, root, "home d 0755", "home/f f 4755 x", "home/l l f", "dev d 0755")
}

func TestUnpackLimits(t *testing.T) {
	img := imageOf(t, []ent{file("a", strings.Repeat("x", 600)), file("b", strings.Repeat("y", 600)), dir("c/"), dir("d/")})
	for _, c := range []struct {
		lim  Limits
		want string
	}{
		{Limits{MaxBytes: 1000}, "Limits.MaxBytes"},
		{Limits{MaxFiles: 3}, "Limits.MaxFiles"},
	} {
		root, _ := unpackDir(t)
		_, err := Unpack(context.Background(), localImage(img), root, c.lim)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want ErrLimit naming %s", c.lim, err, c.want)
		}
	}
	root, _ := unpackDir(t)
	if st, err := Unpack(context.Background(), localImage(img), root, Limits{MaxBytes: 1200, MaxFiles: 4}); err != nil || st.Bytes != 1200 || st.Files != 4 {
		t.Errorf("at the limits: %+v, %v", st, err)
	}
}

// TestUnpackRefusesSparse replays issue 35, row 6: a 30 KiB archive wrote
// 1.1 GB during its import, a layer's sparse file expanded on the node's
// disk. A layer with a sparse file is refused now, before a byte of it is
// written, whatever its size; Limits.MaxBytes bounded its logical size
// only.
func TestUnpackRefusesSparse(t *testing.T) {
	bomb := archivetest.SparseTar(1 << 30)
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, bomb, ""))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := unpackDir(t)
	st, err := Unpack(context.Background(), localImage(img), root, Limits{})
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("Unpack of a %d-byte layer expanding to 1 GiB: %+v, %v; want ErrImage naming the sparse file", len(bomb), st, err)
	}
	if du := diskUsage(t, root); du > 1<<20 {
		t.Errorf("%d bytes written under the root", du)
	}
}

// TestUnpackAsksRoom: Limits.Room is asked for each file's bytes before
// they are written, and its error stops the unpack there.
func TestUnpackAsksRoom(t *testing.T) {
	img := imageOf(t, []ent{file("a", strings.Repeat("x", 600)), file("b", strings.Repeat("y", 700)), file("c", "z")})
	var asked []int64
	full := errors.New("the node's disk is full")
	root, _ := unpackDir(t)
	_, err := Unpack(context.Background(), localImage(img), root, Limits{Room: func(n int64) error {
		asked = append(asked, n)
		if len(asked) == 2 {
			return full
		}
		return nil
	}})
	if !errors.Is(err, full) || len(asked) != 2 || asked[0] != 600 || asked[1] != 700 {
		t.Errorf("Unpack: %v after asking %v; want the room's error after asking 600 and 700", err, asked)
	}
	if _, err := os.Stat(filepath.Join(root, "b")); !os.IsNotExist(err) {
		t.Errorf("b, refused room, exists: %v", err)
	}
}

// diskUsage is the bytes the files under root take on disk.
func diskUsage(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// cancelAfter is a layer's stream that cancels a context once n bytes have
// been read, and goes on giving bytes.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	if len(p) > 512 {
		p = p[:512]
	}
	n, err := c.r.Read(p)
	c.n -= n
	return n, err
}

func TestUnpackContext(t *testing.T) {
	ents := []ent{file("first", "1")}
	for i := range 100 {
		ents = append(ents, file("many/"+strings.Repeat("x", i+1), "x"))
	}
	raw := tarBytes(t, ents...)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	root, _ := unpackDir(t)
	if _, err := Unpack(ctx, localImage(imageOf(t, ents)), root, Limits{}); err != context.Canceled {
		t.Fatalf("cancelled before: err = %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(&cancelAfter{r: bytes.NewReader(raw), n: 3 * 512, cancel: cancel}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	root, _ = unpackDir(t)
	st, err := Unpack(ctx, localImage(img), root, Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled during: err = %v, want context.Canceled", err)
	}
	if st.Files > 3 {
		t.Errorf("went on after the cancel: %+v", st)
	}
}

func TestUnpackDirMustBeEmpty(t *testing.T) {
	root, _ := unpackDir(t)
	os.WriteFile(filepath.Join(root, "x"), nil, 0o644)
	img := localImage(imageOf(t, []ent{file("a", "a")}))
	if _, err := Unpack(context.Background(), img, root, Limits{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty dir: err = %v", err)
	}
	if _, err := Unpack(context.Background(), img, filepath.Join(root, "missing"), Limits{}); err == nil {
		t.Error("missing dir: no error")
	}
}

func TestUnpackSkipsUnknownTypes(t *testing.T) {
	img := imageOf(t, []ent{{name: "weird", typ: 'Z'}, file("ok", "ok"), file("x/.wh..wh.plnk", "")})
	root, st := unpack(t, img)
	wantTree(t, root, "ok f 0644 ok")
	if st.Skipped != 1 || st.Files != 1 {
		t.Errorf("stats %+v, want one skipped, one file", st)
	}
}

func TestUnpackRefusesSharedDir(t *testing.T) {
	tmp := t.TempDir()
	top := filepath.Dir(tmp) // made by the testing package, like tmp, closed to others
	if private(filepath.Dir(top)) == nil {
		t.Skip("TMPDIR is inside a private directory already")
	}
	dir := filepath.Join(tmp, "shared")
	for _, p := range []string{top, tmp} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := localImage(imageOf(t, []ent{file("a", "a")}))
	if _, err := Unpack(context.Background(), img, dir, Limits{}); err == nil || !strings.Contains(err.Error(), "other users") {
		t.Errorf("dir others can enter: err = %v", err)
	}
	os.Chmod(tmp, 0o700)
	if _, err := Unpack(context.Background(), img, dir, Limits{}); err != nil {
		t.Errorf("dir under a private one: %v", err)
	}
}
