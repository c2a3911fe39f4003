package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"warren/internal/archive/archivetest"
)

// testRegistry serves a registry on loopback; wrap, if given, sees every
// request first.
func testRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func withConfig(t *testing.T, img v1.Image, c v1.Config) v1.Image {
	t.Helper()
	img, err := mutate.Config(img, c)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func openUnpack(t *testing.T, src string, opts Options) string {
	t.Helper()
	im, err := Open(context.Background(), src, opts)
	if err != nil {
		t.Fatalf("Open %s: %v", src, err)
	}
	root, _ := unpackDir(t)
	if _, err := Unpack(context.Background(), im, root, Limits{}); err != nil {
		t.Fatalf("Unpack %s: %v", src, err)
	}
	return root
}

func TestRegistry(t *testing.T) {
	reg := testRegistry(t, nil)
	img := withConfig(t, imageOf(t,
		[]ent{dir("app/"), file("app/main.py", "print('hi')"), file("app/old", "old")},
		[]ent{file("app/.wh.old", "")},
	), v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		WorkingDir: "/app",
		User:       "1000:1000",
		Entrypoint: []string{"python3", "-c"},
		Cmd:        []string{"print('hi')"},
	})
	push(t, reg+"/test/app:v1", img)

	im, err := Open(context.Background(), reg+"/test/app:v1", Options{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if im.Digest() != want.String() {
		t.Errorf("Digest = %s, want %s", im.Digest(), want)
	}
	if size, err := im.Size(); err != nil || size <= 0 {
		t.Errorf("Size = %d, %v", size, err)
	}
	cfg, err := im.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%q %q %q %q %q", cfg.Env, cfg.WorkingDir, cfg.User, cfg.Entrypoint, cfg.Cmd); got !=
		`["PATH=/usr/bin:/bin" "LANG=C.UTF-8"] "/app" "1000:1000" ["python3" "-c"] ["print('hi')"]` {
		t.Errorf("Config = %s", got)
	}
	if want := `python3 -c 'print('\''hi'\'')'`; cfg.Start != want {
		t.Errorf("Start = %s, want %s", cfg.Start, want)
	}
	root, _ := unpackDir(t)
	if _, err := Unpack(context.Background(), im, root, Limits{}); err != nil {
		t.Fatal(err)
	}
	wantTree(t, root, "app d 0755", "app/main.py f 0644 print('hi')")

	// By digest too.
	root = openUnpack(t, reg+"/test/app@"+want.String(), Options{Insecure: true})
	wantTree(t, root, "app d 0755", "app/main.py f 0644 print('hi')")
}

func TestRegistryCompressions(t *testing.T) {
	reg := testRegistry(t, nil)
	raw := tarBytes(t, file("hello", "world"))
	for _, c := range []struct {
		name  string
		layer v1.Layer
	}{
		{"gzip", layerOf(t, raw, compression.GZip)},
		{"zstd", layerOf(t, raw, compression.ZStd)},
		{"none", static.NewLayer(raw, types.OCIUncompressedLayer)},
	} {
		t.Run(c.name, func(t *testing.T) {
			img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), c.layer)
			if err != nil {
				t.Fatal(err)
			}
			push(t, reg+"/test/"+c.name+":v1", img)
			wantTree(t, openUnpack(t, reg+"/test/"+c.name+":v1", Options{Insecure: true}), "hello f 0644 world")
		})
	}
}

// platformIndex is an index of an amd64 and an arm64 image, each holding a
// file that names its platform.
func platformIndex(t *testing.T) v1.ImageIndex {
	var adds []mutate.IndexAddendum
	for _, arch := range []string{"arm64", "amd64"} {
		img := imageOf(t, []ent{file("arch", arch)})
		img, err := mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: arch, RootFS: must(img.ConfigFile()).RootFS})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return mutate.AppendManifests(empty.Index, adds...)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRegistryIndex(t *testing.T) {
	reg := testRegistry(t, nil)
	ref := must(name.ParseReference(reg + "/test/multi:v1"))
	idx := platformIndex(t)
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ platform, want string }{{"", "amd64"}, {"linux/arm64", "arm64"}, {"linux/amd64", "amd64"}} {
		root := openUnpack(t, ref.String(), Options{Insecure: true, Platform: c.platform})
		wantTree(t, root, "arch f 0644 "+c.want)
	}
	_, err := Open(context.Background(), ref.String(), Options{Insecure: true, Platform: "linux/s390x"})
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "no manifest for linux/s390x") {
		t.Errorf("s390x: err = %v", err)
	}
	// An image that is not of the platform asked for is refused.
	arm := must(idx.IndexManifest()).Manifests[0].Digest
	_, err = Open(context.Background(), reg+"/test/multi@"+arm.String(), Options{Insecure: true})
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "is linux/arm64, want linux/amd64") {
		t.Errorf("arm64 image for amd64: err = %v", err)
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := testRegistry(t, nil)
	ctx := context.Background()
	_, err := Open(ctx, reg+"/no/such:tag", Options{Insecure: true})
	if want := fmt.Sprintf("image %q: not found in registry", reg+"/no/such:tag"); !errors.Is(err, ErrNotFound) || err.Error() != want {
		t.Errorf("missing: err = %v, want %s", err, want)
	}
	_, err = Open(ctx, "Not A Reference!", Options{})
	if !errors.Is(err, ErrImage) {
		t.Errorf("bad reference: err = %v", err)
	}
	// Plain HTTP needs Insecure, even on loopback.
	push(t, reg+"/test/x:v1", imageOf(t, []ent{file("a", "a")}))
	_, err = Open(ctx, reg+"/test/x:v1", Options{})
	if !errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), "Insecure") {
		t.Errorf("plain HTTP without Insecure: err = %v", err)
	}
	// Nothing listens: the message says so without the network's details.
	ln := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(ln.URL, "http://")
	ln.Close()
	_, err = Open(ctx, addr+"/test/x:v1", Options{Insecure: true})
	if !errors.Is(err, ErrNetwork) || strings.Contains(err.Error(), "refused") {
		t.Errorf("nothing listening: err = %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Err == nil {
		t.Errorf("nothing listening: no cause kept for logs: %#v", err)
	}
}

func TestRegistryAuth(t *testing.T) {
	reg := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"who are you"}]}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	push(t, reg+"/private/app:v1", imageOf(t, []ent{file("a", "a")}), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	wantTree(t, openUnpack(t, reg+"/private/app:v1", Options{Insecure: true, Username: "alice", Password: "s3cret"}), "a f 0644 a")
	for _, opts := range []Options{{Insecure: true}, {Insecure: true, Username: "alice", Password: "wrong"}} {
		_, err := Open(context.Background(), reg+"/private/app:v1", opts)
		if !errors.Is(err, ErrDenied) {
			t.Errorf("%+v: err = %v, want ErrDenied", opts, err)
		}
	}
}

// A registry that stalls a layer's download: Unpack's ctx, not Open's,
// ends it.
func TestRegistryStalledDownload(t *testing.T) {
	img := imageOf(t, []ent{file("a", "a")})
	layer := must(must(img.Layers())[0].Digest()).String()
	stall := make(chan struct{})
	defer close(stall)
	reg := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+layer) {
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-stall:
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	push(t, reg+"/test/slow:v1", img)
	im, err := Open(context.Background(), reg+"/test/slow:v1", Options{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	root, _ := unpackDir(t)
	start := time.Now()
	_, err = Unpack(ctx, im, root, Limits{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Unpack returned %v after its deadline", d)
	}
}

func TestDockerSave(t *testing.T) {
	img := withConfig(t, imageOf(t, []ent{dir("etc/"), file("etc/os-release", "ID=test")}, []ent{file("etc/motd", "hi")}),
		v1.Config{Cmd: []string{"/bin/sh"}})
	p := filepath.Join(t.TempDir(), "image.tar")
	f := must(os.Create(p))
	if err := tarball.Write(must(name.NewTag("test/app:v1")), img, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	im, err := Open(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := im.Config(); cfg.Start != "/bin/sh" {
		t.Errorf("Start = %q", cfg.Start)
	}
	if !strings.HasPrefix(im.Digest(), "sha256:") {
		t.Errorf("Digest = %q", im.Digest())
	}
	wantTree(t, openUnpack(t, p, Options{}), "etc d 0755", "etc/os-release f 0644 ID=test", "etc/motd f 0644 hi")
}

// The docker save format before Docker 25: a directory per layer holding
// an uncompressed layer.tar, and no manifest of the registry's kind.
func TestDockerSaveLegacy(t *testing.T) {
	layer := tarBytes(t, file("hello", "legacy"))
	sum := sha256.Sum256(layer)
	cfg, _ := json.Marshal(v1.ConfigFile{OS: "linux", Architecture: "amd64",
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}}})
	manifest := `[{"Config":"cfg.json","RepoTags":["test:v1"],"Layers":["abc/layer.tar"]}]`
	p := filepath.Join(t.TempDir(), "legacy.tar")
	os.WriteFile(p, tarBytes(t, file("manifest.json", manifest), file("cfg.json", string(cfg)), dir("abc/"), file("abc/layer.tar", string(layer))), 0o644)
	im, err := Open(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if size, err := im.Size(); err != nil || size != int64(len(layer)) {
		t.Errorf("Size = %d, %v; want %d", size, err, len(layer))
	}
	wantTree(t, openUnpack(t, p, Options{}), "hello f 0644 legacy")
}

// writeLayout writes an OCI layout of the index's images; as a directory,
// and as a tar of it.
func writeLayout(t *testing.T, idx v1.ImageIndex) (dir, tarPath string) {
	dir = filepath.Join(t.TempDir(), "layout")
	if _, err := layout.Write(dir, idx); err != nil {
		t.Fatal(err)
	}
	var ents []ent
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() && rel != "." {
			ents = append(ents, ent{name: rel + "/", typ: tar.TypeDir})
		} else if !d.IsDir() {
			ents = append(ents, file(rel, string(must(os.ReadFile(p)))))
		}
		return nil
	})
	tarPath = dir + ".tar"
	os.WriteFile(tarPath, tarBytes(t, ents...), 0o644)
	return dir, tarPath
}

func TestLayout(t *testing.T) {
	img := imageOf(t, []ent{dir("srv/"), file("srv/index.html", "<p>")}, []ent{file("srv/.wh.index.html", ""), file("srv/app", "app")})
	dir, tarPath := writeLayout(t, mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img}))
	for _, src := range []string{dir, tarPath} {
		im, err := Open(context.Background(), src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want := must(img.Digest()).String(); im.Digest() != want {
			t.Errorf("%s: Digest = %s, want %s", src, im.Digest(), want)
		}
		wantTree(t, openUnpack(t, src, Options{}), "srv d 0755", "srv/app f 0644 app")
	}
	multiDir, multiTar := writeLayout(t, platformIndex(t))
	for _, src := range []string{multiDir, multiTar} {
		wantTree(t, openUnpack(t, src, Options{Platform: "linux/arm64"}), "arch f 0644 arm64")
	}
}

func TestArchiveRefused(t *testing.T) {
	tmp := t.TempDir()
	junk := filepath.Join(tmp, "junk.tar")
	os.WriteFile(junk, tarBytes(t, file("hello", "x")), 0o644)
	notTar := filepath.Join(tmp, "not.tar")
	os.WriteFile(notTar, []byte("hello, this is not a tar file at all, but it is long enough to fill a block: "+strings.Repeat("x", 600)), 0o644)
	gz := filepath.Join(tmp, "image.tar.gz")
	os.WriteFile(gz, []byte{0x1f, 0x8b, 8, 0}, 0o644)
	for _, src := range []string{junk, notTar, tmp} {
		_, err := Open(context.Background(), src, Options{})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not an OCI layout or docker save tarball") {
			t.Errorf("%s: err = %v", src, err)
		}
	}
	if _, err := Open(context.Background(), gz, Options{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "decompress") {
		t.Errorf("gzip: err = %v", err)
	}
	// An archive whose entry is a sparse file (a blob read as a stretch of
	// the archive longer than what it holds) is refused.
	sparse := filepath.Join(tmp, "sparse.tar")
	os.WriteFile(sparse, archivetest.SparseTar(1<<30), 0o644)
	if _, err := Open(context.Background(), sparse, Options{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("sparse: err = %v", err)
	}
}

// A layout's blob that is not what its digest says is refused, and one
// that is a symlink out of the layout is not read.
func TestLayoutTampered(t *testing.T) {
	raw := tarBytes(t, file("hello", "original"))
	img := must(mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), static.NewLayer(raw, types.OCIUncompressedLayer)))
	dir, _ := writeLayout(t, mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img}))
	blob := filepath.Join(dir, "blobs/sha256", must(must(img.Layers())[0].Digest()).Hex)
	tampered := strings.Replace(string(raw), "original", "tampered", 1)
	os.WriteFile(blob, []byte(tampered), 0o644)
	im, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := unpackDir(t)
	if _, err := Unpack(context.Background(), im, root, Limits{}); !errors.Is(err, errCorrupt) {
		t.Errorf("tampered layer: err = %v, want errCorrupt", err)
	}

	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, raw, 0o644)
	os.Remove(blob)
	if err := os.Symlink(secret, blob); err != nil {
		t.Fatal(err)
	}
	root, _ = unpackDir(t)
	if _, err := Unpack(context.Background(), im, root, Limits{}); err == nil {
		t.Error("a blob symlinked out of the layout was read")
	}
}
