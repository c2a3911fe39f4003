//go:build linux

package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
)

// DefaultImageSize is the apparent size of a template image when
// Options.ImageSize is zero.
const DefaultImageSize int64 = 4 << 30

// lockPoll is how often a build waiting for another build of the same
// template checks again.
const lockPoll = 200 * time.Millisecond

// Options for NewCatalog.
type Options struct {
	// AgentBinary is the path of the static guest agent installed in every
	// template. Build needs it; List and Get do not.
	AgentBinary string
	// Mirror is the Debian mirror debootstrap installs from. "" means the
	// mirror the host's apt sources use for the recipe's suite, or
	// http://deb.debian.org/debian if they name none.
	Mirror string
	// ImageSize is the apparent size of template images, a multiple of
	// 1 MiB (default DefaultImageSize). Images are sparse: they cost only
	// their data.
	ImageSize int64
	// RootfsCache is the directory where root filesystems debootstrap
	// installed are kept, as tar files, for the next build of the same
	// packages; default: .cache in the templates directory. Data
	// directories on one host may share one.
	RootfsCache string
}

// Catalog is the set of templates of a node, stored in the disk pool as
// templates/NAME.img with the metadata NAME.json beside it. A template
// exists once its metadata does: the metadata is written last.
//
// Its methods may be called concurrently, also from several processes:
// builds of one name are serialized by a lock file, templates/.NAME.lock.
type Catalog struct {
	log  *slog.Logger
	dir  string
	opts Options
}

// NewCatalog opens the catalog in pool.Dir()/templates, creating the
// directory if needed.
func NewCatalog(pool *disk.Pool, log *slog.Logger, opts Options) (*Catalog, error) {
	return newCatalog(filepath.Join(pool.Dir(), "templates"), log, opts)
}

func newCatalog(dir string, log *slog.Logger, opts Options) (*Catalog, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.ImageSize == 0 {
		opts.ImageSize = DefaultImageSize
	}
	if opts.ImageSize < 64<<20 || opts.ImageSize%(1<<20) != 0 {
		return nil, fmt.Errorf("template catalog: image size %d: want a multiple of 1 MiB, at least 64 MiB", opts.ImageSize)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("template catalog: %w", err)
	}
	return &Catalog{log: log, dir: dir, opts: opts}, nil
}

func (c *Catalog) imagePath(name string) string { return filepath.Join(c.dir, name+".img") }
func (c *Catalog) metaPath(name string) string  { return filepath.Join(c.dir, name+".json") }

// List returns the templates, sorted by name. A template whose metadata
// cannot be read is logged and left out.
func (c *Catalog) List() ([]Info, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var infos []Info
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || ValidName(name) != nil {
			continue
		}
		info, err := c.Get(name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			c.log.Warn("skipping unreadable template", "name", name, "err", err)
			continue
		}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	return infos, nil
}

// Get returns the template called name, or an error wrapping ErrNotFound.
// Path, SizeBytes and UsedBytes describe the image file as it is now.
func (c *Catalog) Get(name string) (Info, error) {
	if err := ValidName(name); err != nil {
		return Info{}, fmt.Errorf("get template: %w", err)
	}
	b, err := os.ReadFile(c.metaPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("get template %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("get template %s: %w", name, err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("get template %s: metadata: %w", name, err)
	}
	if err := statImage(&info, c.imagePath(name)); errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("get template %s: image missing: %w", name, ErrNotFound)
	} else if err != nil {
		return Info{}, fmt.Errorf("get template %s: %w", name, err)
	}
	info.Name = name
	return info, nil
}

// statImage fills in info's Path, SizeBytes and UsedBytes from the image.
func statImage(info *Info, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	info.Path = path
	info.SizeBytes = fi.Size()
	info.UsedBytes = fi.Sys().(*syscall.Stat_t).Blocks * 512
	return nil
}

// Ensure returns the template called name, building it first if it does
// not exist.
func (c *Catalog) Ensure(ctx context.Context, name string, progress io.Writer) (Info, error) {
	info, err := c.Get(name)
	if !errors.Is(err, ErrNotFound) {
		return info, err
	}
	r, err := lookupRecipe(name)
	if err != nil {
		return Info{}, fmt.Errorf("ensure template: %w", err)
	}
	unlock, err := c.lock(ctx, name)
	if err != nil {
		return Info{}, fmt.Errorf("ensure template %s: %w", name, err)
	}
	defer unlock()
	// Someone else may have built it while we waited for the lock.
	info, err = c.Get(name)
	if !errors.Is(err, ErrNotFound) {
		return info, err
	}
	return c.build(ctx, name, r, progress)
}

// Build builds the template called name from the recipe of that name (an
// error wrapping ErrUnknownRecipe if there is none), writing progress lines
// to progress (nil to discard them). On success the new image replaces any
// old one atomically; on failure or cancellation the old one stays and the
// partial work is removed. Builds of one name wait for each other.
func (c *Catalog) Build(ctx context.Context, name string, progress io.Writer) (Info, error) {
	r, err := lookupRecipe(name)
	if err != nil {
		return Info{}, fmt.Errorf("build template: %w", err)
	}
	unlock, err := c.lock(ctx, name)
	if err != nil {
		return Info{}, fmt.Errorf("build template %s: %w", name, err)
	}
	defer unlock()
	return c.build(ctx, name, r, progress)
}

func lookupRecipe(name string) (recipe, error) {
	if err := ValidName(name); err != nil {
		return recipe{}, err
	}
	if suite, ok := strings.CutPrefix(name, suitePrefix); ok && suitePattern.MatchString(suite) {
		return suiteRecipe(suite), nil
	}
	r, ok := recipes[name]
	if !ok {
		return recipe{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownRecipe, name, strings.Join(Recipes(), ", "))
	}
	return r, nil
}

// lock takes the build lock of name, waiting for it until ctx ends, and
// returns its release. The lock is an flock on templates/.NAME.lock, so it
// serializes builds within this process and with other processes alike.
func (c *Catalog) lock(ctx context.Context, name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(c.dir, "."+name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// writeMeta writes name's metadata atomically.
func (c *Catalog) writeMeta(info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, "."+info.Name+".json-")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), c.metaPath(info.Name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
