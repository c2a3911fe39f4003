package tenanttpl

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/guest"
	"warren/internal/network/addrclass"
	"warren/internal/oci"
	"warren/internal/snapshot"
	"warren/internal/store"
)

// An OCI image becomes a template version without a sandbox: its layers
// are unpacked into a tree on the node, the tree gets what every sandbox
// needs and the version's config, and its disk image is recorded as a
// template base layer (plainly named chunks, shared by every tenant that
// imports the same image) with an empty snapshot of the tenant's over it.

// Bounds of an import: what the image may unpack to, and how long it may
// take.
const (
	maxImageBytes  = 16 << 30
	maxImageFiles  = 2_000_000
	maxImageImport = 30 * time.Minute
)

// planImage checks src and returns the import it asks for.
func (tt *Templates) planImage(src *api.ImageSource, cfg api.TemplateConfig) (buildFunc, string, error) {
	ref := strings.TrimSpace(src.Ref)
	if ref == "" || len(ref) > 1024 || strings.ContainsAny(ref, "\x00\n ") {
		return nil, "", api.Errorf(api.CodeBadRequest, "from_image.ref: want an image reference such as registry.example/team/app:1.2")
	}
	if _, err := os.Stat(ref); err == nil || strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, ".") {
		// A path would read the node's files: only references are taken.
		return nil, "", api.Errorf(api.CodeBadRequest, "from_image.ref %q: want a registry reference, not a path", ref)
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, "", api.Errorf(api.CodeBadRequest, "from_image.ref %q: %v", ref, err)
	}
	if err := tt.registryAllowed(context.Background(), parsed.Context().RegistryStr()); err != nil {
		return nil, "", api.Errorf(api.CodeBadRequest, "from_image.ref %q: %v", ref, err)
	}
	opts := oci.Options{Insecure: src.Insecure, Username: src.Username, Password: src.Password, Dial: tt.registryDial}
	return func(ctx context.Context, tv *store.TemplateVersion, progress Progress) error {
		sc := tt.newScratch("image imports are")
		defer sc.release()
		return tt.importImage(ctx, tv, ref, ref, opts, cfg, sc, progress)
	}, "image " + ref, nil
}

// maxImageArchive bounds an image archive a tenant sends.
const maxImageArchive = 16 << 30

// CreateTemplateFromArchive makes a new version of tenant's template name
// from an image archive, a docker save tarball or an OCI layout tar, read
// from body (at most maxImageArchive bytes) into a file of the node's,
// reporting progress.
func (tt *Templates) CreateTemplateFromArchive(ctx context.Context, tenant, name string, body io.Reader, progress Progress) (api.Template, error) {
	if progress == nil {
		progress = func(api.TemplateBuildEvent) {}
	}
	if err := tt.checkName(name); err != nil {
		return api.Template{}, err
	}
	slot, err := tt.buildSlot(tenant)
	if err != nil {
		return api.Template{}, err
	}
	f, err := os.CreateTemp(tt.deps.Dir, ".archive-")
	if err != nil {
		slot.cancel()
		return api.Template{}, err
	}
	defer os.Remove(f.Name())
	// The archive, its unpacked tree and its disk image hold the node's
	// free disk as they are written, until the import ends.
	sc := tt.newScratch("image imports are")
	defer sc.release()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(sc, f, h), io.LimitReader(body, maxImageArchive+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case api.IsCode(err, api.CodeInsufficientStorage):
		slot.cancel()
		return api.Template{}, err
	case err != nil:
		slot.cancel()
		return api.Template{}, api.Errorf(api.CodeBadRequest, "read the image archive: %v", err)
	case n > maxImageArchive:
		slot.cancel()
		return api.Template{}, api.Errorf(api.CodeTooLarge, "an image archive is at most %d GiB", maxImageArchive>>30)
	case n == 0:
		slot.cancel()
		return api.Template{}, api.Errorf(api.CodeBadRequest, "the image archive is empty")
	}
	label := fmt.Sprintf("archive sha256:%x", h.Sum(nil))
	progress(api.TemplateBuildEvent{Step: "upload", Progress: fmt.Sprintf("%s: %d MiB", label, n>>20)})
	build := func(ctx context.Context, tv *store.TemplateVersion, progress Progress) error {
		return tt.importImage(ctx, tv, f.Name(), label, oci.Options{}, api.TemplateConfig{}, sc, progress)
	}
	return tt.makeVersion(ctx, tenant, name, label, build, defaultBuildTimeout, false, slot, progress)
}

// importImage is the build of an image's version: src is its reference,
// or an archive's path on the node, and what names it to its tenant. What
// it writes on the node's disk (the unpacked tree, the disk image) is
// added to sc as it goes.
func (tt *Templates) importImage(ctx context.Context, tv *store.TemplateVersion, src, ref string, opts oci.Options, cfg api.TemplateConfig, sc *scratch, progress Progress) error {
	ctx, cancel := context.WithTimeout(ctx, maxImageImport)
	defer cancel()
	say := func(step, format string, args ...any) {
		progress(api.TemplateBuildEvent{Step: step, Progress: fmt.Sprintf(format, args...)})
	}
	t0 := time.Now()
	say("pull", "resolving %s", ref)
	im, err := oci.Open(ctx, src, opts)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	size, err := im.Size()
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	imgCfg, err := im.Config()
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	say("pull", "%s: %s, %d MiB of layers", ref, im.Digest(), size>>20)
	work, err := os.MkdirTemp(tt.deps.Dir, ".import-"+tv.ID+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	rootfs := filepath.Join(work, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return err
	}
	st, err := oci.Unpack(ctx, im, rootfs, oci.Limits{MaxBytes: maxImageBytes, MaxFiles: maxImageFiles, Room: sc.add})
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	say("unpack", "%d files, %d MiB, %d whiteouts, %d skipped, in %v", st.Files, st.Bytes>>20, st.Whiteouts, st.Skipped, time.Since(t0).Round(time.Millisecond))
	merged := imageConfig(imgCfg, cfg)
	b, err := agentConfig(merged)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc/warren"), 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	err = root.WriteFile(strings.TrimPrefix(guest.TemplateFile, "/"), b, 0o644)
	root.Close()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// The disk image holds the tree's bytes again, and its filesystem's.
	if err := sc.add(st.Bytes + st.Bytes/16 + 64<<20); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	img := filepath.Join(work, "disk.img")
	if err := tt.deps.Catalog.ImageFromTree(ctx, rootfs, img, progressWriter("image", progress)); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	digest := im.Digest()
	base := "oci-" + strings.TrimPrefix(digest, "sha256:")[:16]
	built := time.Now()
	sn, err := tt.deps.Snapshots.Take(ctx, snapshot.Source{
		Tenant: tv.Tenant, SandboxID: tv.ID, Scope: api.ScopeRoot, Image: img,
		Template: base, TemplateImage: img, TemplateBuilt: built,
	}, func(context.Context) (func() error, error) { return func() error { return nil }, nil })
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	say("upload", "snapshot %s over base layer of %s", sn.ID, base)
	done, err := tt.deps.Snapshots.Wait(ctx, sn.ID)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if done.State != api.SnapshotDurable {
		return fmt.Errorf("upload: snapshot %s is %s: %s", sn.ID, done.State, done.Error)
	}
	say("done", "%s imported in %v", ref, time.Since(t0).Round(time.Millisecond))
	tv.Snapshot, tv.Digest = sn.ID, digest
	return setConfig(tv, merged)
}

// imageConfig is an image's config as a template's, with over's fields
// taking the place of the image's where set (its env on top).
func imageConfig(c oci.Config, over api.TemplateConfig) api.TemplateConfig {
	out := api.TemplateConfig{Workdir: c.WorkingDir, User: c.User, Start: c.Start,
		Ready: over.Ready, ReadyTimeoutSeconds: over.ReadyTimeoutSeconds}
	if len(c.Env) > 0 || len(over.Env) > 0 {
		out.Env = map[string]string{}
	}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out.Env[k] = v
		}
	}
	maps.Copy(out.Env, over.Env)
	if over.Workdir != "" {
		out.Workdir = over.Workdir
	}
	if over.User != "" {
		out.User = over.User
	}
	if over.Start != "" {
		out.Start = over.Start
	}
	return out
}

// progressWriter turns lines written to it into step's progress events.
func progressWriter(step string, progress Progress) io.Writer {
	return &agentconn.Lines{Emit: func(line string) { progress(api.TemplateBuildEvent{Step: step, Progress: line}) }}
}

// registryDial connects to a registry a tenant's image reference names
// (or one it redirects to), at an address registryAddr allows: the one it
// checked, so that a name that resolves anew cannot slip past.
func (tt *Templates) registryDial(ctx context.Context, network, addr string) (net.Conn, error) {
	to, err := tt.registryAddr(ctx, addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// registryAllowed checks a registry's host[:port] as registryDial would.
func (tt *Templates) registryAllowed(ctx context.Context, registry string) error {
	if _, _, err := net.SplitHostPort(registry); err != nil {
		registry = net.JoinHostPort(registry, "443")
	}
	_, err := tt.registryAddr(ctx, registry)
	return err
}

// registryAddr resolves addr (host:port) and returns the address to dial,
// refusing one that is not public (loopback, private, link-local, the
// cloud's metadata address...) unless the operator allowed the host
// (Config.RegistryAllow: HOST, or HOST:PORT).
func (tt *Templates) registryAddr(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if slices.Contains(tt.cfg.RegistryAllow, host) || slices.Contains(tt.cfg.RegistryAllow, addr) {
		return addr, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("registry %s has no address", host)
	}
	for _, ip := range ips {
		if addrclass.Internal(ip) {
			return "", fmt.Errorf("registry %s is at %s, not a public address: the node pulls only from public registries and those its operator allows (--registry-allow)", host, ip.Unmap())
		}
	}
	return net.JoinHostPort(ips[0].Unmap().String(), port), nil
}
