//go:build linux

package template

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// addTemplate puts a template into the catalog's directory the way Build
// leaves it: a sparse image and its metadata.
func addTemplate(t *testing.T, c *Catalog, name string, size int64, builtAt time.Time) {
	t.Helper()
	if err := os.WriteFile(c.imagePath(name), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(c.imagePath(name), size); err != nil {
		t.Fatal(err)
	}
	if err := c.writeMeta(Info{Name: name, BuiltAt: builtAt, Recipe: "default"}); err != nil {
		t.Fatal(err)
	}
}

func TestCatalogFromFiles(t *testing.T) {
	c, err := newCatalog(t.TempDir(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if infos, err := c.List(); err != nil || len(infos) != 0 {
		t.Fatalf("empty catalog: List = %v, %v", infos, err)
	}
	built := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	addTemplate(t, c, "zeta", 8<<20, built)
	addTemplate(t, c, "alpha", 4<<20, built)
	// Not templates: metadata without an image (a crash), an image without
	// metadata (a crash), a build's temporary file, corrupt metadata.
	if err := c.writeMeta(Info{Name: "noimage"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.imagePath("nometa"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ".alpha.json-123"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	addTemplate(t, c, "corrupt", 1<<20, built)
	if err := os.WriteFile(c.metaPath("corrupt"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}

	infos, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	if strings.Join(names, ",") != "alpha,zeta" {
		t.Fatalf("List names = %v, want [alpha zeta]", names)
	}

	got, err := c.Get("zeta")
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Name: "zeta", Path: c.imagePath("zeta"), SizeBytes: 8 << 20, BuiltAt: built, Recipe: "default"}
	want.UsedBytes = got.UsedBytes // whatever the filesystem allocated for 4 bytes
	if got != want {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	if got.UsedBytes <= 0 || got.UsedBytes >= got.SizeBytes {
		t.Errorf("UsedBytes = %d, want allocated blocks of a sparse %d-byte file", got.UsedBytes, got.SizeBytes)
	}

	var onDisk Info
	b, _ := os.ReadFile(c.metaPath("alpha"))
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk.Name != "alpha" || !onDisk.BuiltAt.Equal(built) {
		t.Errorf("metadata file = %s (%v)", b, err)
	}

	for _, name := range []string{"missing", "noimage", "nometa"} {
		if _, err := c.Get(name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) err = %v, want ErrNotFound", name, err)
		}
	}
	if _, err := c.Get("corrupt"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Get(corrupt) err = %v, want a metadata error", err)
	}
	if _, err := c.Get("../etc"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Get(../etc) err = %v, want ErrInvalidName", err)
	}
}

func TestBuildRefusals(t *testing.T) {
	c, err := newCatalog(t.TempDir(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Build(ctx, "nosuchrecipe", nil); !errors.Is(err, ErrUnknownRecipe) {
		t.Errorf("Build(nosuchrecipe) err = %v, want ErrUnknownRecipe", err)
	}
	if _, err := c.Ensure(ctx, "nosuchrecipe", nil); !errors.Is(err, ErrUnknownRecipe) {
		t.Errorf("Ensure(nosuchrecipe) err = %v, want ErrUnknownRecipe", err)
	}
	if _, err := c.Build(ctx, "Bad/Name", nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Build(Bad/Name) err = %v, want ErrInvalidName", err)
	}
	// A template that exists needs no recipe to be ensured.
	addTemplate(t, c, "imported", 1<<20, time.Now())
	if info, err := c.Ensure(ctx, "imported", nil); err != nil || info.Name != "imported" {
		t.Errorf("Ensure(imported) = %+v, %v", info, err)
	}
	// Build without an agent fails before doing anything.
	if _, err := c.Build(ctx, "default", nil); err == nil {
		t.Error("Build without an agent binary succeeded")
	}
	if _, err := newCatalog(t.TempDir(), nil, Options{ImageSize: 1<<30 + 1}); err == nil {
		t.Error("newCatalog accepted an image size that is not a multiple of 1 MiB")
	}
}

func TestBuildLock(t *testing.T) {
	c, err := newCatalog(t.TempDir(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := c.lock(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*lockPoll)
	defer cancel()
	if _, err := c.lock(ctx, "default"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second lock while held: err = %v, want DeadlineExceeded", err)
	}
	other, err := c.lock(context.Background(), "other")
	if err != nil {
		t.Errorf("lock of another name: %v", err)
	} else {
		other()
	}
	unlock()
	again, err := c.lock(context.Background(), "default")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
}

func TestRemoveStaleWork(t *testing.T) {
	c, err := newCatalog(t.TempDir(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{".build-a-123", ".build-a-1-456", ".build-ab-789", ".build-a-x"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.removeStaleWork("a")
	for d, want := range map[string]bool{".build-a-123": false, ".build-a-1-456": true, ".build-ab-789": true, ".build-a-x": true} {
		_, err := os.Stat(filepath.Join(c.dir, d))
		if got := err == nil; got != want {
			t.Errorf("after removeStaleWork(a), %s exists = %v, want %v", d, got, want)
		}
	}
}

func TestWithEntry(t *testing.T) {
	const passwd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:old:/home/old:/bin/sh\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin"
	got, err := withEntry(passwd, "user:x:1000:1000::/home/user:/bin/bash", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\nuser:x:1000:1000::/home/user:/bin/bash\n"
	if got != want {
		t.Errorf("withEntry = %q, want %q", got, want)
	}
	if _, err := withEntry("other:x:1000:1000::/:/bin/sh\n", "user:x:1000:1000::/home/user:/bin/bash", 2); err == nil {
		t.Error("withEntry let two accounts share uid 1000")
	}
}

// TestCustomize runs the customization on a small fake tree whose
// /etc/resolv.conf is an absolute symlink to a host file: it must be
// replaced, and the host file left alone.
func TestCustomize(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chowns the home directory to uid 1000")
	}
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	hostFile := filepath.Join(dir, "host-resolv.conf")
	files := map[string]string{
		"etc/passwd":                          "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":                           "root:x:0:\n",
		"etc/shadow":                          "root:*:20000:0:99999:7:::\n",
		"etc/skel/.bashrc":                    "# bashrc\n",
		"var/lib/apt/lists/deb_Packages":      "big",
		"var/cache/apt/pkgcache.bin":          "big",
		"var/cache/apt/archives/git_1.0.deb":  "big",
		"var/cache/apt/archives/partial/keep": "",
		"usr/bin/python3":                     "",
	}
	for name, data := range files {
		p := filepath.Join(rootfs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(hostFile, []byte("nameserver 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(rootfs, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "agent")
	if err := os.WriteFile(agent, []byte("#!/bin/true\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := customize(rootfs, agent, time.Unix(86400*20000, 0), false); err != nil {
		t.Fatal(err)
	}

	if b, _ := os.ReadFile(hostFile); string(b) != "nameserver 10.0.0.1\n" {
		t.Errorf("host file behind the symlink changed to %q", b)
	}
	checkFile := func(name, want string, mode fs.FileMode) {
		t.Helper()
		p := filepath.Join(rootfs, name)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		b, _ := os.ReadFile(p)
		if string(b) != want || fi.Mode() != mode {
			t.Errorf("%s = %q mode %v, want %q mode %v", name, b, fi.Mode(), want, mode)
		}
	}
	checkFile("etc/resolv.conf", "", 0o644)
	checkFile("etc/hostname", "sandbox\n", 0o644)
	checkFile("usr/local/sbin/warren-agent", "#!/bin/true\n", 0o755)
	checkFile("etc/passwd", "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n", 0o644)
	checkFile("etc/group", "root:x:0:\nuser:x:1000:\n", 0o644)
	checkFile("etc/shadow", "root:*:20000:0:99999:7:::\nuser:*:20000:0:99999:7:::\n", 0o644)
	checkFile("home/user/.bashrc", "# bashrc\n", 0o644)
	checkFile("var/cache/apt/archives/partial/keep", "", 0o644)
	for _, gone := range []string{"var/lib/apt/lists/deb_Packages", "var/cache/apt/pkgcache.bin", "var/cache/apt/archives/git_1.0.deb"} {
		if _, err := os.Lstat(filepath.Join(rootfs, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there (err %v)", gone, err)
		}
	}
	for name, mode := range map[string]fs.FileMode{
		"tmp": fs.ModeDir | fs.ModeSticky | 0o777, "dev/shm": fs.ModeDir | fs.ModeSticky | 0o777,
		"proc": fs.ModeDir | 0o555, "dev/pts": fs.ModeDir | 0o755, "run": fs.ModeDir | 0o755,
		"root": fs.ModeDir | 0o700, "home/user": fs.ModeDir | 0o750,
	} {
		fi, err := os.Lstat(filepath.Join(rootfs, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v (err %v), want %v", name, fi.Mode(), err, mode)
		}
	}
	for _, name := range []string{"home/user", "home/user/.bashrc"} {
		fi, err := os.Lstat(filepath.Join(rootfs, name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", name, st.Uid, st.Gid)
		}
	}
}

// TestCustomizeImported: an imported tree without account files gets
// them, with root's entry and the sandbox user; one whose account holds
// the sandbox user's ID keeps it, and has no sandbox user.
func TestCustomizeImported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chowns the home directory to uid 1000")
	}
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("#!/bin/true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bare := t.TempDir()
	if err := customize(bare, agent, time.Unix(86400*20000, 0), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(bare, "etc/passwd")); string(b) != "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n" {
		t.Errorf("a bare tree's passwd: %q", b)
	}
	if _, err := os.Stat(filepath.Join(bare, "usr/local/sbin/warren-agent")); err != nil {
		t.Errorf("the agent: %v", err)
	}
	node := t.TempDir()
	if err := os.MkdirAll(filepath.Join(node, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n"
	if err := os.WriteFile(filepath.Join(node, "etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := customize(node, agent, time.Unix(86400*20000, 0), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(node, "etc/passwd")); string(b) != passwd {
		t.Errorf("the image's account lost its ID: %q", b)
	}
	if _, err := os.Stat(filepath.Join(node, "home/user")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("home/user made for a user that is not there (%v)", err)
	}
	if err := customize(node, agent, time.Unix(86400*20000, 0), false); err == nil {
		t.Error("a built tree whose ID is taken: no error")
	}
}
