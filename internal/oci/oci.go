// Package oci turns an OCI or Docker image into a root filesystem
// directory: it resolves an image (a registry reference, a `docker save`
// tarball or an OCI image layout), reads its config, and unpacks its layers
// with their whiteouts into an empty directory, from which a template's
// disk is made.
//
// Images come from tenants and are hostile. Unpack writes nothing outside
// its directory whatever the layers hold (`..`, absolute paths, symlinks
// and hardlinks pointing out, whiteouts of `..`): every path is resolved
// with the directory as its root (openat2 RESOLVE_IN_ROOT), and the last
// component of a path is never followed. What it writes there (setuid
// files, device nodes) is the image's, so the directory must be closed to
// the host's other users, which Unpack checks. Everything a tenant
// controls is bounded: bytes and entries (Limits), the layers of an image
// (MaxLayers), the size of manifests and configs, the entries of an
// archive. Errors about the image are safe to show the tenant: they name
// the image, the layer and the entry, not what the network looked like
// (see Error); only errors about the caller's directory name a host path.
//
// It is not a container runtime nor an image store: it does not cache
// blobs, run anything, build or push images, read ~/.docker or credential
// helpers, nor verify signatures. It does not make the disk either (the
// caller runs mkfs.ext4 -d on the directory).
package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MaxLayers bounds the layers of an image Open accepts. Docker's own
// overlay driver stops near 128; a tenant's image with thousands would cost
// a request and a pass over the tree each.
const MaxLayers = 256

// maxMetadata bounds a manifest, an index or a config read from an archive.
const maxMetadata = 8 << 20

// DefaultPlatform is the platform Open picks from an index when
// Options.Platform is empty.
const DefaultPlatform = "linux/amd64"

// Options says how Open reaches an image.
type Options struct {
	// Insecure allows plain HTTP to the registry (loopback registries in
	// tests). Without it every request is HTTPS, even to a loopback or
	// private address.
	Insecure bool
	// Platform picks the manifest of an index, "os/arch[/variant]"
	// (default linux/amd64). An image whose config names another platform
	// is refused.
	Platform string
	// Username and Password: optional basic auth for the registry.
	// Anonymous otherwise; ~/.docker is never read.
	Username, Password string
	// Dial, when set, makes every connection to the registry (and to
	// where it redirects blobs): the caller's guard on which addresses a
	// tenant's reference may reach.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Sentinels that errors of this package match with errors.Is.
var (
	ErrNotFound = errors.New("not found in registry")
	ErrDenied   = errors.New("registry refused access")
	ErrNetwork  = errors.New("cannot reach the registry")
	ErrFormat   = errors.New("not an OCI layout or docker save tarball")
	ErrImage    = errors.New("not a usable image")
	ErrLimit    = errors.New("over an unpack limit")
)

// Error is an error whose message is safe to show the tenant who named the
// image. It matches its Kind (one of the sentinels) with errors.Is; Err is
// the internal cause, for logs only: it may name hosts, addresses or paths.
type Error struct {
	Msg  string
	Kind error
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives errors.Is and errors.As both the kind and the cause.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func userError(kind, cause error, format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...), Kind: kind, Err: cause}
}

// Image is an image Open resolved: its manifest and config are read, its
// layers are read by Unpack. It is safe for concurrent use.
type Image struct {
	img v1.Image
	cfg *v1.ConfigFile
	// layers gives the image's layers with their reads bound to ctx (a
	// registry's are fetched again per call, so that Unpack's ctx, not
	// Open's, governs the download).
	layers func(ctx context.Context) ([]v1.Layer, error)
	// size is the bytes of the layers as the source holds them.
	size func() (int64, error)
}

// localImage is an image whose layers are read in this process (an
// archive, or one a test built).
func localImage(img v1.Image) *Image {
	return &Image{
		img:    img,
		size:   manifestSize(img),
		layers: func(context.Context) ([]v1.Layer, error) { return img.Layers() },
	}
}

// Open resolves src. A path that exists on disk is an archive (a `docker
// save` tarball, or an OCI image layout as a directory or a tar of one);
// anything else is a registry reference ("host:port/repo:tag",
// "repo@sha256:..."). It reads the manifest and the config, so that Digest,
// Size and Config do no network I/O afterwards.
func Open(ctx context.Context, src string, opts Options) (*Image, error) {
	want, err := parsePlatform(opts.Platform)
	if err != nil {
		return nil, err
	}
	var im *Image
	if _, statErr := os.Lstat(src); statErr == nil {
		im, err = openArchive(src, want)
	} else {
		im, err = openRemote(ctx, src, want, opts)
	}
	if err != nil {
		return nil, err
	}
	if err := im.check(src, want); err != nil {
		return nil, err
	}
	return im, nil
}

func parsePlatform(s string) (v1.Platform, error) {
	if s == "" {
		s = DefaultPlatform
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch[/variant]", s)
	}
	return *p, nil
}

// check reads the config and refuses what is not a container image of the
// wanted platform or has too many layers.
func (im *Image) check(src string, want v1.Platform) error {
	m, err := im.img.Manifest()
	if err != nil {
		return userError(ErrImage, err, "image %q: unreadable manifest", src)
	}
	switch m.Config.MediaType {
	case types.DockerConfigJSON, types.OCIConfigJSON, "":
	default:
		return userError(ErrImage, nil, "image %q: not a container image (config type %q)", src, m.Config.MediaType)
	}
	if len(m.Layers) > MaxLayers {
		return userError(ErrImage, nil, "image %q: %d layers, more than the %d allowed", src, len(m.Layers), MaxLayers)
	}
	cfg, err := im.img.ConfigFile()
	if err != nil {
		return userError(ErrImage, err, "image %q: unreadable config", src)
	}
	if (cfg.OS != "" && cfg.OS != want.OS) || (cfg.Architecture != "" && cfg.Architecture != want.Architecture) {
		return userError(ErrImage, nil, "image %q: is %s/%s, want %s/%s", src, cfg.OS, cfg.Architecture, want.OS, want.Architecture)
	}
	im.cfg = cfg
	return nil
}

// Digest is the digest of the image's manifest, "sha256:...". For a docker
// save tarball, which holds no manifest, go-containerregistry makes one,
// compressing any uncompressed layers to learn their digests: slow for a
// large image.
func (im *Image) Digest() string {
	h, err := im.img.Digest()
	if err != nil {
		return ""
	}
	return h.String()
}

// Size is the bytes of the image's layers as its source holds them:
// compressed in a registry or an OCI layout, as they are in a docker save
// tarball (usually uncompressed).
func (im *Image) Size() (int64, error) { return im.size() }

// manifestSize sums the layer sizes a manifest states.
func manifestSize(img v1.Image) func() (int64, error) {
	return func() (int64, error) {
		m, err := img.Manifest()
		if err != nil {
			return 0, err
		}
		var n int64
		for _, l := range m.Layers {
			n += l.Size
		}
		return n, nil
	}
}

// Config is what the image says about how it runs.
type Config struct {
	Env        []string // "K=V" as the image has them
	WorkingDir string
	User       string
	Entrypoint []string
	Cmd        []string
	// Start is the shell command the image would run: Entrypoint+Cmd,
	// each word quoted for a POSIX shell where it needs it; "" for none.
	Start string
}

// Config returns the image's run configuration.
func (im *Image) Config() (Config, error) {
	c := im.cfg.Config
	cfg := Config{
		Env:        append([]string(nil), c.Env...),
		WorkingDir: c.WorkingDir,
		User:       c.User,
		Entrypoint: append([]string(nil), c.Entrypoint...),
		Cmd:        append([]string(nil), c.Cmd...),
	}
	cfg.Start = ShellJoin(append(append([]string(nil), c.Entrypoint...), c.Cmd...))
	return cfg, nil
}

// ShellJoin joins words into one POSIX shell command line that a shell
// splits back into the same words: a word of only safe characters stays
// bare, any other is single-quoted, with each single quote in it written
//
//	'\''
func ShellJoin(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shellQuote(w)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(w string) string {
	if w == "" {
		return "''"
	}
	safe := true
	for _, r := range w {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-+=.,/:@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
