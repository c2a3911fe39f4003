package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ent is a tar entry a test writes: a regular file unless typ says else,
// mode 0644 (0755 for a directory) unless mode does.
type ent struct {
	name         string
	typ          byte
	body         string
	link         string
	mode         int64
	uid, gid     int
	mtime        time.Time
	pax          map[string]string
	major, minor int64
}

var testTime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

func dir(name string) ent             { return ent{name: name, typ: tar.TypeDir} }
func file(name, body string) ent      { return ent{name: name, body: body} }
func symlink(name, target string) ent { return ent{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target}
}

func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	b, err := tarOf(ents...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tarOf(ents ...ent) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: e.mtime, PAXRecords: e.pax,
			Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX,
		}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.ModTime.IsZero() {
			h.ModTime = testTime
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layerOf makes a layer of raw tar bytes, compressed as comp says
// ("" for gzip, go-containerregistry's default).
func layerOf(t testing.TB, b []byte, comp compression.Compression) v1.Layer {
	t.Helper()
	opts := []tarball.LayerOption{}
	if comp != "" {
		opts = append(opts, tarball.WithCompression(comp))
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf makes an image of layers, each a list of entries.
func imageOf(t testing.TB, layers ...[]ent) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, ents := range layers {
		ls = append(ls, layerOf(t, tarBytes(t, ents...), ""))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// unpackDir is an empty directory for Unpack, inside a parent of its own.
// Its cleanup makes every directory writable first: an image may leave
// some that a non-root test could not empty.
func unpackDir(t testing.TB) (root, parent string) {
	t.Helper()
	parent = t.TempDir()
	root = filepath.Join(parent, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	return root, parent
}

// unpack unpacks img into a new directory and returns it.
func unpack(t testing.TB, img v1.Image) (string, Stats) {
	t.Helper()
	root, _ := unpackDir(t)
	st, err := Unpack(context.Background(), localImage(img), root, Limits{})
	if err != nil {
		t.Fatalf("Unpack: %v", err)
	}
	return root, st
}

// tree lists what is under root, one line an entry, sorted: "path d 0755",
// "path f 0644 content", "path l target", "path p 0644" (FIFO), "path c"
// (device).
func tree(t testing.TB, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		perm := fi.Mode().Perm() | fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		switch m := fi.Mode(); {
		case m.IsDir():
			lines = append(lines, fmt.Sprintf("%s d %s", rel, octal(perm)))
		case m.IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s f %s %s", rel, octal(perm), b))
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s l %s", rel, target))
		case m&fs.ModeNamedPipe != 0:
			lines = append(lines, fmt.Sprintf("%s p %s", rel, octal(perm)))
		default:
			lines = append(lines, fmt.Sprintf("%s c", rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// octal is a mode as chmod takes it, setuid, setgid and sticky included.
func octal(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

func wantTree(t testing.TB, root string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := tree(t, root); got != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
