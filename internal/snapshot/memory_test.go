//go:build linux

package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"warren/internal/snapshot"
)

// memoryImage writes a directory image at dir: a big file with data, a
// hole and a tail that ends mid-block, and a small one.
func memoryImage(t *testing.T, dir string, seed uint64) map[string][]byte {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	big := append(randBytes(seed, 3*MiB), make([]byte, 5*MiB)...)
	big = append(big, randBytes(seed+1, MiB+123)...)
	files := map[string][]byte{"checkpoint.img": big, "agent-token": []byte("token")}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	punchHole(t, filepath.Join(dir, "checkpoint.img"), 3*MiB, 5*MiB)
	return files
}

func TestMemoryImages(t *testing.T) {
	ctx := context.Background()
	blobs := openFileBlobs(t, t.TempDir())
	a := newNode(t, "a", blobs, testConfig())
	b := newNode(t, "b", blobs, testConfig())
	src := filepath.Join(t.TempDir(), "memory")
	want := memoryImage(t, src, 7)

	img, err := a.eng.PutImage(ctx, tenant, "gvisor-f1", src)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bytes != int64(len(want["checkpoint.img"])+len(want["agent-token"])) || img.Stored == 0 {
		t.Errorf("image %+v: want every byte counted and some stored", img)
	}
	// Another node fetches it whole, as it was.
	dst := filepath.Join(t.TempDir(), "fetched")
	if err := b.eng.GetImage(ctx, tenant, img.ID, "gvisor-f1", dst); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("%s: %d bytes (err %v), want the %d saved", name, len(got), err, len(w))
		}
	}
	// Not for another format, nor another tenant.
	other := filepath.Join(t.TempDir(), "other")
	if err := b.eng.GetImage(ctx, tenant, img.ID, "gvisor-f2", other); !errors.Is(err, snapshot.ErrImageFormat) {
		t.Errorf("fetch in another format: %v, want ErrImageFormat", err)
	}
	if err := b.eng.GetImage(ctx, otherTenant, img.ID, "gvisor-f1", other); err == nil {
		t.Error("another tenant fetched the image")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a refused fetch left %s: %v", other, err)
	}

	// The next pause of the same memory stores next to nothing.
	again, err := a.eng.PutImage(ctx, tenant, "gvisor-f1", src)
	if err != nil {
		t.Fatal(err)
	}
	if again.Stored > img.Stored/10 {
		t.Errorf("the same image again stored %d bytes, the first %d", again.Stored, img.Stored)
	}
	// A file image.
	file := filepath.Join(t.TempDir(), "memory.snap")
	os.WriteFile(file, want["checkpoint.img"][:MiB+5], 0o600)
	fimg, err := a.eng.PutImage(ctx, tenant, "vm-f1", file)
	if err != nil {
		t.Fatal(err)
	}
	fdst := filepath.Join(t.TempDir(), "memory.snap")
	if err := b.eng.GetImage(ctx, tenant, fimg.ID, "vm-f1", fdst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(fdst); !bytes.Equal(got, want["checkpoint.img"][:MiB+5]) {
		t.Errorf("file image: %d bytes back, want %d", len(got), MiB+5)
	}

	// Deleted, all three leave nothing once collected.
	for _, id := range []string{img.ID, again.ID, fimg.ID} {
		if err := b.eng.DeleteImage(ctx, tenant, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.eng.DeleteImage(ctx, tenant, img.ID); err != nil {
		t.Errorf("delete of a deleted image: %v", err)
	}
	if err := b.eng.GetImage(ctx, tenant, img.ID, "gvisor-f1", filepath.Join(t.TempDir(), "gone")); err == nil {
		t.Error("a deleted image was fetched")
	}
	if _, err := a.eng.GC(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"chunks/", "manifests/", "images/"} {
		if left := keys(t, blobs, prefix); len(left) > 0 {
			t.Errorf("left in the blob store under %s: %v", prefix, left)
		}
	}
	checkBlobInvariants(t, blobs)
}
