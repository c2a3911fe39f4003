package oci

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"warren/internal/archive"
)

// maxArchiveEntries bounds the entries of an archive Open indexes: a docker
// save tarball or OCI layout holds a few files per layer.
const maxArchiveEntries = 100_000

// maxIndexDepth bounds indexes nested in indexes.
const maxIndexDepth = 4

// openArchive opens an archive on disk: a directory is an OCI layout; a
// file is a tar of an OCI layout (it has index.json) or a docker save
// tarball (it has manifest.json). Docker 25 and later write both: the
// layout is preferred, it keeps the real manifest and its digest.
func openArchive(src string, want v1.Platform) (*Image, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, userError(ErrFormat, err, "archive %q: cannot read it", src)
	}
	if fi.IsDir() {
		return openLayout(src, dirBlobs{src}, want)
	}
	if !fi.Mode().IsRegular() {
		return nil, userError(ErrFormat, nil, "archive %q: %v", src, ErrFormat)
	}
	idx, err := indexTar(src)
	if err != nil {
		return nil, err
	}
	if _, ok := idx.files["index.json"]; ok {
		return openLayout(src, idx, want)
	}
	if _, ok := idx.files["manifest.json"]; ok {
		return openDockerSave(src, idx)
	}
	return nil, userError(ErrFormat, nil, "archive %q: %v", src, ErrFormat)
}

// blobSource reads the files of an OCI layout by their slash-separated
// names ("index.json", "blobs/sha256/HEX").
type blobSource interface {
	open(name string) (io.ReadCloser, error)
}

// dirBlobs is a layout directory. os.OpenInRoot keeps a symlink inside it
// from reading a file of the host into the image.
type dirBlobs struct{ dir string }

func (d dirBlobs) open(name string) (io.ReadCloser, error) { return os.OpenInRoot(d.dir, name) }

// tarIndex is where each regular file of an uncompressed tar lies, so that
// blobs are read in place, without unpacking the archive.
type tarIndex struct {
	path  string
	files map[string]tarFile // by cleaned name; the first entry of a name wins, as in go-containerregistry's tarball
}

type tarFile struct {
	typ          byte // tar.TypeReg, TypeLink, TypeSymlink or another type, unusable
	offset, size int64
	link         string // the target of a hardlink or symlink, relative to the archive's root
}

func indexTar(src string) (*tarIndex, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, userError(ErrFormat, err, "archive %q: cannot read it", src)
	}
	defer f.Close()
	var magic [2]byte
	if _, err := io.ReadFull(f, magic[:]); err == nil && magic == [2]byte{0x1f, 0x8b} {
		return nil, userError(ErrFormat, nil, "archive %q: compressed (gzip); decompress it first", src)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, userError(ErrFormat, err, "archive %q: cannot read it", src)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, userError(ErrFormat, err, "archive %q: cannot read it", src)
	}
	idx := &tarIndex{path: src, files: map[string]tarFile{}}
	// A blob is never a sparse file: one is refused, never read as a
	// stretch of the archive longer than what it holds; and no archive
	// holds more than its own size.
	tr := archive.NewReader(f, archive.Limits{Bytes: fi.Size(), Entries: maxArchiveEntries})
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, archive.ErrEntries) {
			return nil, userError(ErrFormat, err, "archive %q: more than %d entries", src, maxArchiveEntries)
		}
		if err != nil {
			return nil, userError(ErrFormat, err, "archive %q: %v (%v)", src, ErrFormat, err)
		}
		name := path.Clean(hdr.Name)
		if _, dup := idx.files[name]; dup {
			continue
		}
		tf := tarFile{typ: hdr.Typeflag}
		switch hdr.Typeflag {
		case tar.TypeReg:
			// tar.Reader reads a header's blocks and no further: the
			// file's bytes start where the file now is.
			if tf.offset, err = f.Seek(0, io.SeekCurrent); err != nil {
				return nil, userError(ErrFormat, err, "archive %q: cannot read it", src)
			}
			tf.size = hdr.Size
		case tar.TypeSymlink:
			tf.link = path.Join(path.Dir(name), hdr.Linkname)
		case tar.TypeLink:
			tf.link = path.Clean(hdr.Linkname)
		}
		idx.files[name] = tf
	}
	return idx, nil
}

// lookup follows links (a few hops) to a regular file.
func (t *tarIndex) lookup(name string) (tarFile, error) {
	name = path.Clean(name)
	for range 8 {
		tf, ok := t.files[name]
		switch {
		case !ok:
			return tarFile{}, fs.ErrNotExist
		case tf.typ == tar.TypeReg:
			return tf, nil
		case tf.typ != tar.TypeLink && tf.typ != tar.TypeSymlink:
			return tarFile{}, fmt.Errorf("%s: not a regular file", name)
		}
		name = tf.link
	}
	return tarFile{}, errors.New("too many links")
}

func (t *tarIndex) open(name string) (io.ReadCloser, error) {
	tf, err := t.lookup(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, tf.offset, tf.size), f}, nil
}

// readSmall reads a metadata file whole, refusing one past maxMetadata.
func readSmall(bs blobSource, name string) ([]byte, error) {
	rc, err := bs.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxMetadata+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMetadata {
		return nil, fmt.Errorf("%s: more than %d bytes", name, maxMetadata)
	}
	return b, nil
}

func blobName(h v1.Hash) (string, error) {
	if h.Algorithm != "sha256" {
		return "", fmt.Errorf("digest %s: only sha256 is supported", h)
	}
	if _, err := hex.DecodeString(h.Hex); err != nil || len(h.Hex) != 64 {
		return "", fmt.Errorf("digest %s: malformed", h)
	}
	return "blobs/sha256/" + h.Hex, nil
}

// readDescribed reads the small blob a descriptor names and checks it is
// what the descriptor says.
func readDescribed(bs blobSource, d v1.Descriptor) ([]byte, error) {
	name, err := blobName(d.Digest)
	if err != nil {
		return nil, err
	}
	b, err := readSmall(bs, name)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != d.Digest.Hex || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s: content does not match its digest", d.Digest)
	}
	return b, nil
}

// openLayout resolves the index.json of an OCI layout to one image.
func openLayout(src string, bs blobSource, want v1.Platform) (*Image, error) {
	raw, err := readSmall(bs, "index.json")
	if err != nil {
		return nil, userError(ErrFormat, err, "archive %q: %v", src, ErrFormat)
	}
	var desc *v1.Descriptor
	for depth := 0; ; depth++ {
		var idx v1.IndexManifest
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, userError(ErrFormat, err, "archive %q: malformed index", src)
		}
		if desc, err = pickManifest(src, idx.Manifests, want); err != nil {
			return nil, err
		}
		if raw, err = readDescribed(bs, *desc); err != nil {
			return nil, userError(ErrImage, err, "archive %q: unreadable manifest %s", src, desc.Digest)
		}
		if !desc.MediaType.IsIndex() {
			break
		}
		if depth == maxIndexDepth {
			return nil, userError(ErrImage, nil, "archive %q: indexes nested more than %d deep", src, maxIndexDepth)
		}
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, userError(ErrImage, err, "archive %q: malformed manifest %s", src, desc.Digest)
	}
	img, err := partial.CompressedToImage(&layoutImage{bs: bs, raw: raw, mediaType: desc.MediaType, m: &m})
	if err != nil {
		return nil, userError(ErrImage, err, "archive %q: unreadable manifest %s", src, desc.Digest)
	}
	return localImage(img), nil
}

// pickManifest picks the descriptor of an index for a platform: the first
// image or index whose platform satisfies want; else the only one that
// states no platform, when no other is an image.
func pickManifest(src string, ds []v1.Descriptor, want v1.Platform) (*v1.Descriptor, error) {
	var plain []v1.Descriptor
	platforms := 0
	for _, d := range ds {
		if !d.MediaType.IsImage() && !d.MediaType.IsIndex() {
			continue
		}
		if d.Platform == nil {
			plain = append(plain, d)
			continue
		}
		if d.Platform.OS == "unknown" { // buildx's attestations
			continue
		}
		platforms++
		if d.Platform.Satisfies(want) {
			return &d, nil
		}
	}
	if len(plain) == 1 && platforms == 0 {
		return &plain[0], nil
	}
	if len(plain) > 1 {
		return nil, userError(ErrImage, nil, "image %q: holds %d images; give one", src, len(plain))
	}
	return nil, userError(ErrImage, nil, "image %q: no manifest for %s", src, want.String())
}

// layoutImage is an image of an OCI layout, for partial.CompressedToImage.
type layoutImage struct {
	bs        blobSource
	raw       []byte
	mediaType types.MediaType
	m         *v1.Manifest
}

func (li *layoutImage) RawManifest() ([]byte, error)        { return li.raw, nil }
func (li *layoutImage) MediaType() (types.MediaType, error) { return li.mediaType, nil }
func (li *layoutImage) RawConfigFile() ([]byte, error)      { return readDescribed(li.bs, li.m.Config) }

func (li *layoutImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range li.m.Layers {
		if d.Digest == h {
			return &layoutLayer{bs: li.bs, d: d}, nil
		}
	}
	return nil, fmt.Errorf("layer %s: not in the manifest", h)
}

// layoutLayer is a layer blob; its reads are checked against its digest.
type layoutLayer struct {
	bs blobSource
	d  v1.Descriptor
}

func (l *layoutLayer) Digest() (v1.Hash, error)            { return l.d.Digest, nil }
func (l *layoutLayer) Size() (int64, error)                { return l.d.Size, nil }
func (l *layoutLayer) MediaType() (types.MediaType, error) { return l.d.MediaType, nil }

func (l *layoutLayer) Compressed() (io.ReadCloser, error) {
	name, err := blobName(l.d.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.bs.open(name)
	if err != nil {
		return nil, err
	}
	return &verifier{rc: rc, h: sha256.New(), want: l.d}, nil
}

// errCorrupt is a blob whose bytes are not those of its digest.
var errCorrupt = errors.New("content does not match its digest")

// verifier hashes a blob as it is read and fails the read that reaches its
// end, or passes its size, when the bytes are not those of the digest.
type verifier struct {
	rc   io.ReadCloser
	h    hash.Hash
	want v1.Descriptor
	n    int64
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want.Size {
		return n, fmt.Errorf("blob %s: %w", v.want.Digest, errCorrupt)
	}
	if err == io.EOF && (v.n != v.want.Size || !bytes.Equal(v.h.Sum(nil), mustHex(v.want.Digest.Hex))) {
		return n, fmt.Errorf("blob %s: %w", v.want.Digest, errCorrupt)
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}

// openDockerSave opens a docker save tarball through go-containerregistry's
// tarball, once the index shows its metadata is of a bounded size.
func openDockerSave(src string, idx *tarIndex) (*Image, error) {
	// go-containerregistry reads manifest.json and the config whole, from
	// the first entry of their name, links followed its own way: each must
	// be a regular file of bounded size.
	regular := func(name string) bool {
		tf := idx.files[path.Clean(name)]
		return tf.typ == tar.TypeReg && tf.size <= maxMetadata
	}
	if !regular("manifest.json") {
		return nil, userError(ErrFormat, nil, "archive %q: manifest.json is not a small file", src)
	}
	raw, err := readSmall(idx, "manifest.json")
	if err != nil {
		return nil, userError(ErrFormat, err, "archive %q: %v", src, ErrFormat)
	}
	var m tarball.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, userError(ErrFormat, err, "archive %q: malformed manifest.json", src)
	}
	if len(m) != 1 {
		return nil, userError(ErrImage, nil, "archive %q: holds %d images; save one", src, len(m))
	}
	if !regular(m[0].Config) {
		return nil, userError(ErrImage, nil, "archive %q: config is not a small file", src)
	}
	var size int64
	for _, l := range m[0].Layers {
		tf, err := idx.lookup(l)
		if err != nil {
			return nil, userError(ErrImage, err, "archive %q: layer %q missing", src, l)
		}
		size += tf.size
	}
	img, err := tarball.ImageFromPath(src, nil)
	if err != nil {
		return nil, userError(ErrImage, err, "archive %q: unreadable image", src)
	}
	im := localImage(img)
	im.size = func() (int64, error) { return size, nil }
	return im, nil
}
