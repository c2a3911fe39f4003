//go:build linux

package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// build makes the template name from r and publishes it. The caller holds
// name's build lock. Everything is made in a work directory beside the
// catalog (templates/.build-NAME-*), so that the final rename is atomic and
// the image is on the pool's filesystem; the work directory is removed
// whatever happens.
func (c *Catalog) build(ctx context.Context, name string, r recipe, progress io.Writer) (Info, error) {
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	info, err := c.buildLocked(ctx, name, r, progress)
	if err != nil {
		return Info{}, fmt.Errorf("build template %s: %w", name, err)
	}
	c.log.Info("template built", "name", name, "duration", time.Since(start).Round(time.Millisecond),
		"size", info.SizeBytes, "used", info.UsedBytes)
	newLineWriter(progress, "done").Printf("%s: %d MiB image, %d MiB used, in %v",
		info.Path, info.SizeBytes>>20, info.UsedBytes>>20, time.Since(start).Round(time.Second))
	return info, nil
}

func (c *Catalog) buildLocked(ctx context.Context, name string, r recipe, progress io.Writer) (Info, error) {
	if os.Geteuid() != 0 {
		return Info{}, errors.New("building a template needs root (debootstrap, device nodes, file owners)")
	}
	if c.opts.AgentBinary == "" {
		return Info{}, errors.New("no agent binary configured")
	}
	if _, err := os.Stat(c.opts.AgentBinary); err != nil {
		return Info{}, fmt.Errorf("agent binary: %w", err)
	}
	c.removeStaleWork(name)
	work, err := os.MkdirTemp(c.dir, ".build-"+name+"-")
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			c.log.Warn("removing template build directory", "dir", work, "err", err)
		}
	}()

	rootfs := filepath.Join(work, "rootfs")
	if err := c.makeRootfs(ctx, r, rootfs, progress); err != nil {
		return Info{}, err
	}
	newLineWriter(progress, "customize").Printf("installing the agent, user %q and sandbox config", sandboxUser)
	if err := customize(rootfs, c.opts.AgentBinary, time.Now(), false); err != nil {
		return Info{}, fmt.Errorf("customize: %w", err)
	}
	img := filepath.Join(work, name+".img")
	if err := makeImage(ctx, rootfs, img, c.opts.ImageSize, progress); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}

	// The old metadata goes first: a crash before the new metadata is
	// written leaves "not found" (and a rebuild), never metadata that
	// describes another image.
	if err := os.Remove(c.metaPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Info{}, err
	}
	if err := os.Rename(img, c.imagePath(name)); err != nil {
		return Info{}, err
	}
	info := Info{Name: name, BuiltAt: time.Now().UTC(), Recipe: r.name}
	if err := statImage(&info, c.imagePath(name)); err != nil {
		return Info{}, err
	}
	if err := c.writeMeta(info); err != nil {
		return Info{}, fmt.Errorf("write metadata: %w", err)
	}
	return info, nil
}

// removeStaleWork removes work directories of earlier builds of name that
// died without cleaning up. The caller holds name's build lock, so none of
// them is in use. MkdirTemp suffixes are digits only, which keeps
// .build-a-1-* (template "a-1") apart from .build-a-* (template "a").
func (c *Catalog) removeStaleWork(name string) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		c.log.Warn("listing template directory", "dir", c.dir, "err", err)
		return
	}
	prefix := ".build-" + name + "-"
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		path := filepath.Join(c.dir, e.Name())
		c.log.Info("removing stale template build directory", "dir", path)
		if err := os.RemoveAll(path); err != nil {
			c.log.Warn("removing stale template build directory", "dir", path, "err", err)
		}
	}
}

// makeRootfs fills rootfs with r's root filesystem: unpacked from the cache
// when r's package list was installed before, installed with debootstrap
// (and then cached) otherwise.
func (c *Catalog) makeRootfs(ctx context.Context, r recipe, rootfs string, progress io.Writer) error {
	cacheDir := c.opts.RootfsCache
	if cacheDir == "" {
		cacheDir = filepath.Join(c.dir, ".cache")
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return err
	}
	cache := filepath.Join(cacheDir, r.name+"-"+r.cacheKey()+".tar")
	// Another recipe's cache of the same packages of the same suite (the
	// default's for debian-bookworm) serves as well.
	if same, _ := filepath.Glob(filepath.Join(cacheDir, "*-"+r.cacheKey()+".tar")); len(same) > 0 {
		cache = same[0]
	}
	if _, err := os.Stat(cache); err == nil {
		w := newLineWriter(progress, "rootfs")
		w.Printf("unpacking cached root filesystem %s", filepath.Base(cache))
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return err
		}
		return run(ctx, w, nil, "tar", "--extract", "--file", cache, "--directory", rootfs,
			"--numeric-owner", "--same-owner", "--preserve-permissions", "--xattrs", "--xattrs-include=*")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	mirror := c.opts.Mirror
	if mirror == "" {
		mirror = aptMirror("/etc/apt", r.suite)
	}
	w := newLineWriter(progress, "debootstrap")
	w.Printf("installing %s %s with %s from %s", r.suite, r.variant, strings.Join(r.include, ","), mirror)
	if err := debootstrap(ctx, w, r.debootstrapArgs(rootfs, mirror), mirror, filepath.Dir(rootfs), defaultFetchBounds); err != nil {
		return err
	}
	c.saveCache(ctx, r, rootfs, cache, progress)
	return nil
}

// saveCache packs rootfs into the cache file for r, and drops the cache
// files of r's earlier package lists. A cache that cannot be written costs
// only time on the next build, so failures are logged, not returned.
func (c *Catalog) saveCache(ctx context.Context, r recipe, rootfs, cache string, progress io.Writer) {
	w := newLineWriter(progress, "cache")
	w.Printf("saving root filesystem as %s", filepath.Base(cache))
	tmp, err := os.CreateTemp(filepath.Dir(cache), "."+filepath.Base(cache)+"-")
	if err == nil {
		tmp.Close()
		err = run(ctx, w, nil, "tar", "--create", "--file", tmp.Name(), "--directory", rootfs,
			"--numeric-owner", "--xattrs", "--xattrs-include=*", ".")
		if err == nil {
			err = os.Rename(tmp.Name(), cache)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		c.log.Warn("caching template root filesystem", "recipe", r.name, "err", err)
		return
	}
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(cache), r.name+"-*.tar"))
	for _, p := range old {
		if p != cache {
			c.log.Info("removing outdated root filesystem cache", "path", p)
			os.Remove(p)
		}
	}
}

// makeImage makes img, a sparse ext4 image of size bytes holding rootfs.
func makeImage(ctx context.Context, rootfs, img string, size int64, progress io.Writer) error {
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	w := newLineWriter(progress, "mkfs")
	w.Printf("making a %d MiB ext4 image", size>>20)
	return run(ctx, w, nil, "mkfs.ext4", "-q", "-F", "-L", "warren-root", "-E", "root_owner=0:0",
		"-d", rootfs, img, fmt.Sprintf("%dk", size>>10))
}

// fetchBounds bound debootstrap's downloads, so that a mirror that does
// not answer makes a build fail within minutes, naming the mirror, instead
// of hanging.
type fetchBounds struct {
	// Connect and Read bound each of wget's connections and reads, and
	// Tries its attempts at one file.
	Connect, Read time.Duration
	Tries         int
	// Stall is how long debootstrap may go without printing a line of
	// progress (its retries of a failed download do not count).
	Stall time.Duration
	// Max bounds the whole install.
	Max time.Duration
}

// defaultFetchBounds are the bounds of every build. A good mirror serves
// the default template's packages in about 70 s on the machines warren is
// built on.
var defaultFetchBounds = fetchBounds{
	Connect: 15 * time.Second, Read: 30 * time.Second, Tries: 2,
	Stall: 3 * time.Minute, Max: 20 * time.Minute,
}

// errSlow is the cause of a debootstrap stopped by its bounds.
var errSlow = errors.New("debootstrap too slow")

// debootstrap runs debootstrap with args within bounds b: wget's through a
// wgetrc in work, the whole run's by a watchdog.
func debootstrap(ctx context.Context, w *lineWriter, args []string, mirror, work string, b fetchBounds) error {
	wgetrc := filepath.Join(work, "wgetrc")
	secs := func(d time.Duration) int { return max(1, int(d.Seconds())) }
	conf := fmt.Sprintf("connect_timeout = %d\ndns_timeout = %d\nread_timeout = %d\ntries = %d\n",
		secs(b.Connect), secs(b.Connect), secs(b.Read), b.Tries)
	if err := os.WriteFile(wgetrc, []byte(conf), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, b.Max, fmt.Errorf("%w: not done after %v", errSlow, b.Max))
	defer cancel()
	ctx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	w.progress = func(line string) bool { return !strings.Contains(line, "Retrying failed download") }
	w.touch()
	go func() {
		t := time.NewTicker(min(time.Second, b.Stall/4))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if w.idle() > b.Stall {
					stall(fmt.Errorf("%w: no progress for %v", errSlow, b.Stall))
					return
				}
			}
		}
	}()
	err := run(ctx, w, []string{"WGETRC=" + wgetrc}, "debootstrap", args...)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errSlow) {
		return fmt.Errorf("debootstrap from %s: %w (last output: %s; is the mirror reachable from this host?)", mirror, cause, w.last)
	}
	if err != nil {
		return fmt.Errorf("debootstrap from %s: %w", mirror, err)
	}
	return nil
}

// run runs a build command with its output going to out. The command gets
// its own mount namespace, so that whatever it mounts (debootstrap mounts
// /proc and /sys in the new root) disappears with it even if it is killed,
// and removing the work directory can never reach into a mount. It gets its
// own process group too, so that cancelling ctx kills its children as well.
func run(ctx context.Context, out *lineWriter, env []string, name string, args ...string) error {
	out.last = "" // only the command's own output explains its failure
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	out.Flush()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", name, ctx.Err())
	case out.last != "":
		return fmt.Errorf("%s: %w (last output: %s)", name, err, out.last)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// ImageFromTree makes a sandbox root disk image at img from the root
// filesystem in rootfs, an imported tree (an OCI image's, unpacked): it
// installs what every sandbox needs, as a build does, then makes the
// ext4 image of the catalog's image size. rootfs is changed.
func (c *Catalog) ImageFromTree(ctx context.Context, rootfs, img string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if c.opts.AgentBinary == "" {
		return errors.New("no agent binary configured")
	}
	newLineWriter(progress, "customize").Printf("installing the agent, user %q and sandbox config", sandboxUser)
	if err := customize(rootfs, c.opts.AgentBinary, time.Now(), true); err != nil {
		return fmt.Errorf("customize: %w", err)
	}
	return makeImage(ctx, rootfs, img, c.opts.ImageSize, progress)
}
