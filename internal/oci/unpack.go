package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"warren/internal/archive"
)

// Limits bound what Unpack writes. A zero field takes its default.
type Limits struct {
	MaxBytes int64 // bytes of file content written (default DefaultMaxBytes)
	// MaxFiles bounds the tar entries acted on: created, skipped or
	// whiteouts (default DefaultMaxFiles).
	MaxFiles int64
	// Room, if set, is asked for the bytes of each file's content before
	// the file is written; its error stops the unpack and is returned
	// as it is. The node holds its free disk this way.
	Room func(n int64) error
}

// Unpack's default limits.
const (
	DefaultMaxBytes = 8 << 30
	DefaultMaxFiles = 1_000_000
)

// maxTrailing bounds what a layer may hold past the end of its tar: the
// rest is read so that a digest is checked, and no real layer has more.
const maxTrailing = 1 << 20

// Stats says what Unpack did. Entries later replaced or whited out by an
// upper layer still count.
type Stats struct {
	Bytes     int64 // file content written
	Files     int64 // entries created: files, directories, links, device nodes, FIFOs
	Skipped   int64 // entries not created: device nodes without root, types unknown
	Whiteouts int64 // whiteouts and opaque markers applied
}

func (st *Stats) entries() int64 { return st.Files + st.Skipped + st.Whiteouts }

// Tar entry names that are not files.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh." // AUFS's own files; .wh..wh..opq is the one that means anything
	opaqueMarker   = ".wh..wh..opq"
)

// Unpack applies the image's layers in order into dir, which must exist
// and be empty, with OCI whiteouts: `.wh.NAME` deletes NAME of the lower
// layers, `.wh..wh..opq` empties its directory of what lower layers put
// there; either keeps what its own layer adds, wherever the marker lies in
// the layer's tar. It returns the bytes and entries written.
//
// Files, directories, symlinks (their targets verbatim, never followed),
// hardlinks within dir and FIFOs are made with their mode bits (setuid,
// setgid and sticky too), mtimes and `user.*` xattrs of files and
// directories. Running as root (euid 0), it also makes device nodes (else
// skips them, counting them in Stats.Skipped), sets owners, and sets
// `trusted.*` and `security.capability` xattrs.
//
// Nothing is ever written outside dir: see the package comment. Nobody
// else may write in dir while Unpack runs, nor enter it at all: dir or a
// directory above it must be the caller's own, closed to group and others
// (os.MkdirTemp makes such directories), or Unpack refuses it; the image's
// setuid files and device nodes are made there. It stops between entries (and
// within a file's content) once ctx is done, returning ctx's error; past a
// limit it returns an error matching ErrLimit that names the limit. On an
// error dir holds part of the image: the caller removes it.
func Unpack(ctx context.Context, im *Image, dir string, lim Limits) (Stats, error) {
	var st Stats
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	if lim.MaxFiles <= 0 {
		lim.MaxFiles = DefaultMaxFiles
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	w, err := newWriter(dir)
	if err != nil {
		return st, err
	}
	defer w.close()
	layers, err := im.layers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		return st, err
	}
	for i, l := range layers {
		u := unpacker{w: w, st: &st, lim: lim, layer: i + 1}
		if err := u.apply(ctx, l); err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			return st, err
		}
	}
	if err := w.finish(); err != nil {
		return st, fmt.Errorf("unpack: set directories' modes and times: %w", err)
	}
	return st, nil
}

// unpacker applies one layer.
type unpacker struct {
	w     *writer
	st    *Stats
	lim   Limits
	layer int // 1-based, for messages
}

func (u *unpacker) apply(ctx context.Context, l v1.Layer) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return u.readError(err)
	}
	defer rc.Close()
	r := ctxReader{ctx: ctx, r: rc}
	// The layer is charged what its entries expand to against what the
	// image has left; image builders never write sparse entries, and a
	// layer that holds one is refused rather than expanded.
	tr := archive.NewReader(r, archive.Limits{Bytes: u.lim.MaxBytes - u.st.Bytes, Entries: int(u.lim.MaxFiles - u.st.entries())})
	u.w.startLayer()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, archive.ErrLimit) || errors.Is(err, archive.ErrSparse) {
			return u.limitError(err)
		}
		if err != nil {
			return u.readError(err)
		}
		if err := u.entry(hdr, ctxReader{ctx: ctx, r: tr}); err != nil {
			return err
		}
	}
	// Read the layer to its end so that its digest is checked.
	n, err := io.Copy(io.Discard, io.LimitReader(r, maxTrailing+1))
	if err != nil {
		return u.readError(err)
	}
	if n > maxTrailing {
		return userError(ErrImage, nil, "layer %d: more than %d bytes after the end of its tar", u.layer, maxTrailing)
	}
	return nil
}

// readError says why a layer could not be read, without the network's
// details.
func (u *unpacker) readError(err error) error {
	var terr *transport.Error
	var nerr net.Error
	if errors.As(err, &terr) || errors.As(err, &nerr) {
		return userError(ErrNetwork, err, "layer %d: cannot download it", u.layer)
	}
	if errors.Is(err, errCorrupt) {
		return userError(ErrImage, err, "layer %d: %v", u.layer, errCorrupt)
	}
	return userError(ErrImage, err, "layer %d: not a readable tar", u.layer)
}

// limitError says which of the bounded reader's limits a layer passed,
// in the terms of Limits.
func (u *unpacker) limitError(err error) error {
	switch {
	case errors.Is(err, archive.ErrSparse):
		return userError(ErrImage, err, "layer %d: a sparse file: image layers with sparse files are not accepted", u.layer)
	case errors.Is(err, archive.ErrEntries):
		return userError(ErrLimit, err, "layer %d: more than %d entries (Limits.MaxFiles)", u.layer, u.lim.MaxFiles)
	case errors.Is(err, archive.ErrBytes):
		return userError(ErrLimit, err, "layer %d: more than %d bytes of file content (Limits.MaxBytes)", u.layer, u.lim.MaxBytes)
	}
	return userError(ErrImage, err, "layer %d: %v", u.layer, err)
}

func (u *unpacker) fail(name string, err error) error {
	return fmt.Errorf("layer %d: entry %q: %w", u.layer, name, err)
}

func (u *unpacker) entry(hdr *tar.Header, content io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX records for the entries after it, already merged by tar.Reader
	}
	rel, err := cleanPath(hdr.Name)
	if err != nil {
		return u.fail(hdr.Name, err)
	}
	dir, base := path.Split(rel)
	if strings.HasPrefix(base, whiteoutPrefix) {
		u.st.Whiteouts++
		switch {
		case base == opaqueMarker:
			err = u.w.opaque(path.Clean(dir))
		case strings.HasPrefix(base, whiteoutMeta):
		default:
			name := strings.TrimPrefix(base, whiteoutPrefix)
			if name == "" || name == "." || name == ".." {
				return u.fail(hdr.Name, errors.New(`whiteout of an empty name, "." or ".."`))
			}
			err = u.w.whiteout(path.Join(dir, name))
		}
		if err != nil {
			return u.fail(hdr.Name, err)
		}
		return nil
	}
	if rel == "." {
		if hdr.Typeflag != tar.TypeDir {
			return u.fail(hdr.Name, errors.New("the root is not a directory"))
		}
		return nil // dir keeps its own owner and mode
	}
	e := entry{hdr: hdr, rel: rel, content: content}
	switch hdr.Typeflag {
	case tar.TypeReg:
		if u.lim.Room != nil {
			if err := u.lim.Room(hdr.Size); err != nil {
				return err
			}
		}
	case tar.TypeLink:
		if e.link, err = cleanPath(hdr.Linkname); err != nil {
			return u.fail(hdr.Name, fmt.Errorf("hardlink target: %w", err))
		}
	case tar.TypeSymlink, tar.TypeDir, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
	default:
		u.st.Skipped++
		return nil
	}
	made, err := u.w.create(e)
	if err != nil {
		return u.fail(hdr.Name, err)
	}
	if !made {
		u.st.Skipped++
		return nil
	}
	u.st.Files++
	if hdr.Typeflag == tar.TypeReg {
		u.st.Bytes += hdr.Size
	}
	return nil
}

// entry is a tar entry to create at rel.
type entry struct {
	hdr     *tar.Header
	rel     string    // cleaned, relative to the root, never "."
	link    string    // a hardlink's target, cleaned like rel
	content io.Reader // a regular file's bytes
}

// errEscape is a path that names something above the root.
var errEscape = errors.New("path escapes the root")

// cleanPath makes a tar name relative to the root: "/a", "./a" and "a/"
// are "a", "" and "/" are "."; a ".." component anywhere is refused, as no
// real image has one, and so is a name no file system takes.
func cleanPath(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("NUL in the name")
	}
	for c := range strings.SplitSeq(name, "/") {
		if c == ".." {
			return "", errEscape
		}
	}
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if rel == "" {
		return ".", nil
	}
	if len(rel) >= 4096 {
		return "", errors.New("name longer than PATH_MAX")
	}
	return rel, nil
}

// ctxReader stops reading once ctx is done, so that a long layer or file
// stops promptly.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
