package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FuzzUnpack unpacks arbitrary bytes as a one-layer image and checks that
// nothing was made, changed or linked outside the unpack directory: its
// parent holds only it and a sibling whose file stays as it was.
func FuzzUnpack(f *testing.F) {
	for _, ents := range [][]ent{
		{dir("a/"), file("a/f", "x"), symlink("a/l", "f"), hardlink("a/h", "a/f")},
		{symlink("evil", "../outside"), file("evil/pwned", "x")},
		{symlink("up", "../../.."), file("up/outside/secret", "pwned")},
		{symlink("slash", "/"), file("slash/etc/passwd", "pwned"), hardlink("pw", "/etc/passwd")},
		{file("../pwned", "x")},
		{hardlink("s", "../outside/secret")},
		{symlink("o", "../outside"), file("o/.wh.secret", ""), file("o/.wh..wh..opq", "")},
		{dir("d/"), file("d/x", "x"), file("d", "file now"), dir("d/"), file(".wh.d", "")},
		{{name: "dev/null", typ: 'c', major: 1, minor: 3}, {name: "p", typ: '6'}, {name: "suid", body: "x", mode: 0o4777}},
	} {
		f.Add(tarBytes(f, ents...))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLayer(t, data) })
}

// FuzzUnpackEntries is FuzzUnpack on valid tars, which random bytes seldom
// are (a header has a checksum): each line of the input is an entry, its
// first byte the type and mode, the rest "name|target or content".
func FuzzUnpackEntries(f *testing.F) {
	for _, s := range []string{
		"\x02evil|../outside\n\x00evil/pwned|x",
		"\x02up|../../..\n\x00up/outside/secret|pwned",
		"\x02slash|/\n\x00slash/etc/passwd|x\n\x03pw|/etc/passwd\n\x03s|../outside/secret",
		"\x01d/|\n\x00d/x|x\n\x00d|file now\n\x00.wh.d|\n\x01d/|\n\x00d/.wh..wh..opq|",
		"\x02o|../outside\n\x00o/.wh.secret|\n\x00o/.wh..wh..opq|\n\x00.wh..|",
		"\x04fifo|\n\x05dev|\n\x03h|fifo\n\x03h2|dev\n\x02l|h\n\x03l2|l",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		kinds := []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo, tar.TypeChar}
		var ents []ent
		for i, line := range bytes.Split(data, []byte("\n")) {
			if len(line) == 0 || i == 64 {
				continue
			}
			name, rest, _ := strings.Cut(string(line[1:]), "|")
			e := ent{name: name, typ: kinds[int(line[0])%len(kinds)], mode: int64(line[0]) * 0o1001 & 0o7777}
			if e.typ == tar.TypeReg {
				e.body = rest
			} else {
				e.link = rest
			}
			ents = append(ents, e)
		}
		b, err := tarOf(ents...)
		if err != nil {
			t.Skip(err)
		}
		fuzzLayer(t, b)
	})
}

func fuzzLayer(t *testing.T, data []byte) {
	root, parent := unpackDir(t)
	outside := filepath.Join(parent, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(data, types.DockerLayer))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	Unpack(ctx, localImage(img), root, Limits{MaxBytes: 1 << 20, MaxFiles: 1000})
	checkOutside(t, root, outside)
}
