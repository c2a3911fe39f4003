//go:build linux

package disk

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/wait"
)

// trimPool opens an XFS loop pool in a fresh data directory with a fast
// trimmer, and returns it with the path of its image.
func trimPool(t testing.TB, interval time.Duration) (*Pool, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: attaches loop devices and mounts")
	}
	dataDir := t.TempDir()
	if ok, err := reflinkWorks(dataDir); err != nil || ok {
		t.Skipf("temp dir has reflink (or probe failed: %v): no xfs loop image to trim", err)
	}
	p, err := Open(context.Background(), dataDir, nil, Options{XFSImageSize: 16 << 30, TrimInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		unix.Unmount(p.Dir(), 0)
	})
	if p.Mode() != CloneReflinkXFSLoop {
		t.Skipf("pool mode %v: no xfs loop image to trim", p.Mode())
	}
	return p, filepath.Join(filepath.Dir(p.Dir()), xfsImageName)
}

// mountExt4 mounts the ext4 image img as the container runtime does (a
// direct-I/O loop device, -o discard when discard) on a new directory and
// returns it; it is unmounted when the test ends.
func mountExt4(t testing.TB, img string, discard bool) string {
	t.Helper()
	loop, err := AttachLoop(img, LoopOptions{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	dir := t.TempDir()
	opts := ""
	if discard {
		opts = "discard"
	}
	if err := unix.Mount(loop.Path(), dir, "ext4", unix.MS_NODEV, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir
}

// writeRandom writes size bytes of random data to a new file at path and
// syncs it.
func writeRandom(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{3}), size); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// syncFS commits the journal of the filesystem holding dir (which is
// when ext4 issues its discards).
func syncFS(t testing.TB, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// TestTrimGivesSpaceBack is the regression test of issue 13, item 5: freed
// blocks never went back to the host (the pool image grew to 4.2 GB and
// stayed there after every sandbox was deleted). A file deleted in a
// sandbox's ext4 and a deleted sandbox image must both leave the host's
// usage of the pool image where it was, while a template sharing the
// clone's blocks keeps every byte.
func TestTrimGivesSpaceBack(t *testing.T) {
	requireTools(t, "mkfs.ext4", "mkfs.xfs")
	p, image := trimPool(t, 100*time.Millisecond)
	ctx := context.Background()
	const written = 256 << 20

	// A template with 64 MiB of data, and a sandbox disk cloned from it.
	template := filepath.Join(p.Dir(), "template.img")
	if err := MakeExt4(ctx, template, 2<<30); err != nil {
		t.Fatal(err)
	}
	tdir := mountExt4(t, template, true)
	writeRandom(t, filepath.Join(tdir, "shared"), 64<<20)
	if err := unix.Unmount(tdir, 0); err != nil {
		t.Fatal(err)
	}
	templateSum := fileHash(t, template)
	sandbox := filepath.Join(p.Dir(), "sandbox.img")
	if err := p.Clone(ctx, template, sandbox); err != nil {
		t.Fatal(err)
	}
	if err := p.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	base := allocated(t, image)

	// The sandbox writes 256 MiB, then deletes it and the template's file.
	sdir := mountExt4(t, sandbox, true)
	writeRandom(t, filepath.Join(sdir, "scratch"), written)
	full := allocated(t, image)
	if full < base+written*7/8 {
		t.Fatalf("pool image grew by %d MiB for %d MiB written: the test measures nothing", (full-base)>>20, written>>20)
	}
	for _, f := range []string{"scratch", "shared"} {
		if err := os.Remove(filepath.Join(sdir, f)); err != nil {
			t.Fatal(err)
		}
	}
	syncFS(t, sdir)
	waitAllocated(t, image, base+written/16, "the file deleted in the sandbox's ext4")
	t.Logf("pool image: %d MiB, %d MiB with the sandbox's file, %d MiB after its delete",
		base>>20, full>>20, allocated(t, image)>>20)
	if got := fileHash(t, template); got != templateSum {
		t.Error("the template changed when its clone discarded the blocks they shared")
	}

	// The sandbox deleted: the blocks only its image held go too.
	writeRandom(t, filepath.Join(sdir, "scratch"), written)
	if err := unix.Unmount(sdir, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sandbox); err != nil {
		t.Fatal(err)
	}
	waitAllocated(t, image, base+written/16, "the deleted sandbox image")
	if got := fileHash(t, template); got != templateSum {
		t.Error("the template changed when its clone was deleted and trimmed")
	}
}

// waitAllocated waits until the host's usage of path is at most want. The
// trims it waits for go through two filesystems and two loop devices: on
// a machine busy with other tests, more than 15 s was seen once.
func waitAllocated(t *testing.T, path string, want int64, what string) {
	t.Helper()
	last := int64(-1)
	defer func() {
		if t.Failed() {
			t.Logf("the pool image took %d MiB of the host at the end", last>>20)
		}
	}()
	wait.For(t, 45*time.Second, fmt.Sprintf("the pool image to take at most %d MiB of the host after %s", want>>20, what),
		func() bool { last = allocated(t, path); return last <= want })
}

// TestTrimOtherModes: a filesystem the data directory has of its own is
// left to its operator's discard policy.
func TestTrimOtherModes(t *testing.T) {
	p := &Pool{dir: t.TempDir(), mode: CloneCopy}
	if err := p.Trim(context.Background()); err != nil {
		t.Errorf("Trim of a copy-mode pool: %v", err)
	}
	if _, err := Open(context.Background(), t.TempDir(), nil, Options{TrimInterval: -time.Second}); err == nil {
		t.Error("Open with a negative trim interval: no error")
	}
}

// BenchmarkDiscard measures what discard costs on the paths it is on: a
// delete of 64 MiB in a sandbox's ext4 (rm and the journal commit, where
// ext4 issues its discards), with and without -o discard, and a trim of the
// pool after a 64 MiB image was deleted, and when nothing was.
func BenchmarkDiscard(b *testing.B) {
	const size = 64 << 20
	p, _ := trimPool(b, time.Hour) // trimmed by hand only
	for _, discard := range []bool{false, true} {
		b.Run(fmt.Sprintf("ext4-rm/discard=%v", discard), func(b *testing.B) {
			img := filepath.Join(p.Dir(), fmt.Sprintf("bench-%v.img", discard))
			if err := MakeExt4(context.Background(), img, 4<<30); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.Remove(img) }) // after the unmount
			dir := mountExt4(b, img, discard)
			for b.Loop() {
				b.StopTimer()
				f := filepath.Join(dir, "f")
				writeRandom(b, f, size)
				syncFS(b, dir)
				b.StartTimer()
				if err := os.Remove(f); err != nil {
					b.Fatal(err)
				}
				syncFS(b, dir)
			}
		})
	}
	b.Run("pool-trim/after-delete", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			f := filepath.Join(p.Dir(), "deleted.img")
			writeRandom(b, f, size)
			if err := os.Remove(f); err != nil {
				b.Fatal(err)
			}
			syncFS(b, p.Dir())
			b.StartTimer()
			if err := p.Trim(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pool-trim/idle", func(b *testing.B) {
		for b.Loop() {
			if err := p.Trim(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
