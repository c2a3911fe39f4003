package tenanttpl

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/archive"
	"warren/internal/buildspec"
	"warren/internal/store"
	"warren/internal/template"
)

// A spec build runs the spec's steps in one sandbox of the tenant's, in
// order, and snapshots after each step that changes the disk, keeping the
// snapshot as the step's cache entry under its key (buildspec.Keys: the
// step, what it runs with, what it copies, and every step before). A build
// starts from the last step of the cached prefix: changing only the last
// step runs only it.

// Bounds of a build context: its files, and what they hold, together.
const (
	maxContextEntries = 100_000
	maxContextBytes   = api.MaxTemplateContext
)

// planSpec parses req's spec and resolves what it builds from.
func (tt *Templates) planSpec(ctx context.Context, tenant string, req api.CreateTemplateRequest) (buildFunc, string, time.Duration, error) {
	var spec *buildspec.Spec
	var err error
	switch req.SpecFormat {
	case "", "yaml":
		spec, err = buildspec.Parse([]byte(req.Spec))
	case "dockerfile":
		spec, err = buildspec.ParseDockerfile([]byte(req.Spec))
	default:
		return nil, "", 0, api.Errorf(api.CodeBadRequest, "spec_format must be yaml or dockerfile, got %q", req.SpecFormat)
	}
	if err != nil {
		return nil, "", 0, api.Errorf(api.CodeBadRequest, "spec: %v", err)
	}
	from, err := tt.buildBase(ctx, tenant, spec.From)
	if err != nil {
		return nil, "", 0, err
	}
	timeout := defaultBuildTimeout
	if spec.Limits.Timeout > 0 {
		timeout = spec.Limits.Timeout
	}
	return func(ctx context.Context, tv *store.TemplateVersion, progress Progress) error {
		return tt.buildSpec(ctx, tv, spec, from, req.Context, progress)
	}, "spec", timeout, nil
}

// buildFrom is where a build starts: a built-in template, or a snapshot
// (a tenant's version's), and the digest that names it; or a Debian
// suite's template, which the build makes first when the node lacks it.
type buildFrom struct {
	builtIn, snapshot, digest string
	suite                     string
	// owner is the tenant whose snapshot is (the admin's for a published
	// version; "": the building tenant's).
	owner string
}

func (tt *Templates) buildBase(ctx context.Context, tenant, ref string) (buildFrom, error) {
	if suite, ok := buildspec.DebianSuite(ref); ok {
		name, err := template.SuiteTemplate(suite)
		if err != nil {
			return buildFrom{}, api.Errorf(api.CodeBadRequest, "from: %v", err)
		}
		return buildFrom{suite: name}, nil
	}
	if !strings.Contains(ref, "@") {
		if tpl, err := tt.deps.Catalog.Get(ref); err == nil {
			return buildFrom{builtIn: ref, digest: fmt.Sprintf("template %s built %d", ref, tpl.BuiltAt.UnixNano())}, nil
		}
	}
	tv, err := tt.deps.Sandboxes.TemplateVersion(ctx, tenant, ref)
	if err != nil {
		return buildFrom{}, err
	}
	return buildFrom{snapshot: tv.Snapshot, digest: tv.Digest, owner: tv.Tenant}, nil
}

func (tt *Templates) buildSpec(ctx context.Context, tv *store.TemplateVersion, spec *buildspec.Spec, from buildFrom, tarball []byte, progress Progress) error {
	var bctx buildspec.Context
	if len(tarball) > 0 {
		// What the context's files may take (archive.Reader counts it),
		// held of the node's disk until they are gone.
		release, err := tt.deps.Sandboxes.HoldScratch(min(int64(len(tarball)), maxContextBytes), "template builds are")
		if err != nil {
			return err
		}
		defer release()
		dir, err := os.MkdirTemp(tt.deps.Dir, ".context-"+tv.ID+"-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := extractContext(tarball, dir); err != nil {
			return fmt.Errorf("context: %w", err)
		}
		bctx = buildspec.DirContext(dir)
	}
	if from.suite != "" {
		tpl, err := tt.suiteTemplate(ctx, from.suite, progress)
		if err != nil {
			return err
		}
		from = buildFrom{builtIn: tpl.Name, digest: fmt.Sprintf("template %s built %d", tpl.Name, tpl.BuiltAt.UnixNano())}
	}
	keys, err := spec.Keys(from.digest, bctx)
	if err != nil {
		return err
	}
	each, final := spec.States()
	n := len(spec.Steps)
	name := func(i int) string { return fmt.Sprintf("%d/%d %s", i+1, n, spec.Steps[i].Kind) }
	// The cached prefix.
	start := 0
	for i, st := range spec.Steps {
		if !st.Layered() {
			continue
		}
		id, err := tt.deps.Store.TemplateStep(ctx, tv.Tenant, keys[i])
		if err != nil {
			break
		}
		if _, err := tt.deps.Snapshots.Lookup(ctx, tv.Tenant, id); err != nil {
			break // deleted since
		}
		from.snapshot, from.builtIn, from.owner, start = id, "", "", i+1
	}
	for i := range start {
		progress(api.TemplateBuildEvent{Step: name(i), Progress: "cached"})
	}
	var sb string
	defer func() {
		if sb != "" {
			tt.deps.Sandboxes.Delete(context.WithoutCancel(ctx), tv.Tenant, sb)
		}
	}()
	var conn *agentconn.Conn
	boot := func(network *api.NetworkPolicy) error {
		if sb != "" {
			return nil
		}
		id, err := tt.buildSandbox(ctx, tv, from, api.SandboxSpec{Network: network}, spec.Limits.DiskMB)
		if err != nil {
			return err
		}
		sb = id
		conn, err = tt.deps.Sandboxes.Agent(ctx, tv.Tenant, sb)
		return err
	}
	for i := start; i < n; i++ {
		st := spec.Steps[i]
		step := name(i)
		if !st.Layered() {
			progress(api.TemplateBuildEvent{Step: step, Progress: "set"})
			continue
		}
		t0 := time.Now()
		progress(api.TemplateBuildEvent{Step: step, Progress: fmt.Sprintf("line %d", st.Line)})
		out := func(line string) { progress(api.TemplateBuildEvent{Step: step, Progress: line}) }
		err := boot(spec.Network)
		if err == nil {
			err = tt.runStep(ctx, conn, tv.Tenant, sb, st, each[i], bctx, out)
		}
		if err != nil {
			return fmt.Errorf("step %s (line %d) failed: %w", step, st.Line, err)
		}
		id, err := tt.durableSnapshot(ctx, tv.Tenant, sb, step, progress)
		if err != nil {
			return fmt.Errorf("step %s: %w", step, err)
		}
		if err := tt.deps.Store.PutTemplateStep(ctx, tv.Tenant, keys[i], id); err != nil {
			return err
		}
		progress(api.TemplateBuildEvent{Step: step, Progress: fmt.Sprintf("done in %v", time.Since(t0).Round(time.Millisecond))})
	}
	cfg := api.TemplateConfig{Env: final.Env, Workdir: final.Workdir, User: final.User}
	if spec.Start != nil {
		cfg.Start, cfg.Ready = spec.Start.Command, spec.Start.Ready
		cfg.ReadyTimeoutSeconds = int64(spec.Start.ReadyTimeout / time.Second)
	}
	if len(cfg.Env) == 0 {
		cfg.Env = nil
	}
	if err := boot(&api.NetworkPolicy{None: true}); err != nil {
		return err
	}
	id, err := tt.finishDisk(ctx, tv, sb, cfg, progress)
	if err != nil {
		return err
	}
	last := from.digest
	if n > 0 {
		last = keys[n-1]
	}
	if err := setConfig(tv, cfg); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(last + "\n" + tv.Config))
	tv.Snapshot, tv.Digest = id, "sha256:"+hex.EncodeToString(sum[:])
	return nil
}

// suiteTemplate returns the built-in template of a Debian suite, building
// it first (debootstrap from the host's mirror, cached like the default
// template's root filesystem) when the node lacks it, with its base layer.
func (tt *Templates) suiteTemplate(ctx context.Context, name string, progress Progress) (template.Info, error) {
	progress(api.TemplateBuildEvent{Step: "from", Progress: "the built-in template " + name})
	tpl, err := tt.deps.Catalog.Ensure(ctx, name, progressWriter("from", progress))
	if err != nil {
		return template.Info{}, fmt.Errorf("from: %w", err)
	}
	if _, err := tt.deps.Snapshots.EnsureBase(ctx, tpl.Name, tpl.Path, tpl.BuiltAt); err != nil {
		return template.Info{}, fmt.Errorf("from: %w", err)
	}
	return tpl, nil
}

// runStep runs one step that changes the disk, in the state st runs in,
// in tenant's build sandbox sb.
func (tt *Templates) runStep(ctx context.Context, conn *agentconn.Conn, tenant, sb string, st buildspec.Step, state buildspec.State, bctx buildspec.Context, out func(string)) error {
	switch st.Kind {
	case buildspec.KindApt:
		return tt.aptInstall(ctx, conn, tenant, sb, st.Packages, out)
	case buildspec.KindCopy:
		d, ok := bctx.(*buildspec.Dir)
		if !ok {
			return errors.New("no build context was sent")
		}
		return copyIn(ctx, conn, d, st)
	}
	argv := st.Command()
	if st.Kind == buildspec.KindPip {
		argv = trustPlainIndexes(argv, st.IndexURL, st.ExtraIndexURL)
	}
	return conn.RunLines(ctx, &processpb.ProcessConfig{
		Cmd: argv[0], Args: argv[1:], Envs: state.Env, Cwd: proto.String(state.Workdir), User: state.User,
	}, out)
}

// trustPlainIndexes lets pip use the plain-HTTP indexes a spec names (an
// index inside the cluster): pip ignores them otherwise.
func trustPlainIndexes(argv []string, urls ...string) []string {
	var hosts []string
	for _, u := range urls {
		if rest, ok := strings.CutPrefix(u, "http://"); ok {
			host, _, _ := strings.Cut(rest, "/")
			hosts = append(hosts, "--trusted-host", host)
		}
	}
	if len(hosts) == 0 {
		return argv
	}
	i := len(argv)
	for j, a := range argv {
		if a == "--" {
			i = j
			break
		}
	}
	return append(append(append([]string(nil), argv[:i]...), hosts...), argv[i:]...)
}

// copyIn copies a copy step's source from the context into the sandbox:
// as a tar, unpacked there by the sandbox's own tar, so that the sandbox's
// files are only ever written from inside it. A directory's content goes
// into Dest; a file goes to Dest, or into it when Dest ends with "/".
func copyIn(ctx context.Context, conn *agentconn.Conn, d *buildspec.Dir, st buildspec.Step) error {
	into, target := st.Dest, st.Dest
	root, err := os.OpenRoot(d.Root)
	if err != nil {
		return fmt.Errorf("copy %s: %w", st.Src, err)
	}
	fi, err := root.Lstat(st.Src)
	root.Close()
	if err == nil && !fi.IsDir() {
		// A file: named for where it goes.
		if strings.HasSuffix(st.Dest, "/") {
			target = path.Join(into, path.Base(st.Src))
		} else {
			into = path.Dir(st.Dest)
		}
	}
	// The tar is streamed to the sandbox as it is written: never held whole.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeCopyTar(pw, d, st)) }()
	tmp := fmt.Sprintf("/tmp/.warren-copy-%d.tar", time.Now().UnixNano())
	_, err = conn.WriteFile(ctx, tmp, 0o600, "root", pr)
	pr.CloseWithError(errors.New("the copy ended"))
	if err != nil {
		return fmt.Errorf("copy %s: %w", st.Src, err)
	}
	env := map[string]string{"INTO": into, "TAR": tmp, "TARGET": target, "OWNER": st.Owner, "MODE": ""}
	if st.Mode != nil {
		env["MODE"] = fmt.Sprintf("%o", *st.Mode)
	}
	const script = `set -e
mkdir -p "$INTO"
tar -xf "$TAR" -C "$INTO" --no-same-owner
rm -f "$TAR"
if [ -n "$OWNER" ]; then chown -R "$OWNER" "$TARGET"; fi
if [ -n "$MODE" ]; then chmod -R "$MODE" "$TARGET"; fi`
	return conn.RunLines(ctx, &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, Envs: env}, nil)
}

// writeCopyTar writes the tar of a copy step's source to w: a directory's
// contents, or a file named for where it goes. Each file is read as Walk
// gives it, at most the size it had, in pieces.
func writeCopyTar(w io.Writer, d *buildspec.Dir, st buildspec.Step) error {
	tw := tar.NewWriter(w)
	err := d.Walk(st.Src, func(e buildspec.Entry, r io.Reader) error {
		name := e.Path
		if name == "." {
			if e.Mode.IsDir() {
				return nil
			}
			name = path.Base(st.Src)
			if !strings.HasSuffix(st.Dest, "/") {
				name = path.Base(st.Dest)
			}
		}
		h := &tar.Header{Name: name, Mode: int64(e.Mode.Perm() | e.Mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)), ModTime: time.Unix(0, 0)}
		switch {
		case e.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case e.Mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
		default:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if r != nil {
			_, err := io.Copy(tw, io.LimitReader(r, e.Size))
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy %s: %w", st.Src, err)
	}
	return tw.Close()
}

// extractContext unpacks a build context tar into dir: directories,
// regular files and symlinks (kept as they are, never followed), nothing
// outside dir, through archive.Reader: at most maxContextEntries entries
// holding maxContextBytes, no sparse file.
func extractContext(b []byte, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := archive.NewReader(bytes.NewReader(b), archive.Limits{Bytes: maxContextBytes, Entries: maxContextEntries})
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%q is outside the context", h.Name)
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil && path.Dir(name) != "." {
			return fmt.Errorf("%s: %w", name, err)
		}
		mode := os.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			err = root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			var f *os.File
			if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o600); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		default:
			err = fmt.Errorf("a context holds only files, directories and symlinks")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

// aptInstall installs Debian packages in tenant's build sandbox sb from
// package files the node fetched (aptFetch): the node resolves them
// against the sandbox's own package database for the suite of the
// sandbox's built-in template (warren's record, never the sandbox's
// /etc/os-release), and the sandbox installs them with its own apt, with
// no network of its own.
func (tt *Templates) aptInstall(ctx context.Context, conn *agentconn.Conn, tenant, sb string, pkgs []string, out func(string)) error {
	rec, err := tt.deps.Sandboxes.Get(ctx, tenant, sb)
	if err != nil {
		return err
	}
	suite, err := aptSuite(rec.Template)
	if err != nil {
		return fmt.Errorf("apt: %w", err)
	}
	status := func() (io.ReadCloser, error) {
		rc, _, err := conn.ReadFile(ctx, "/var/lib/dpkg/status", "root")
		if err != nil {
			return nil, fmt.Errorf("read /var/lib/dpkg/status: %w", err)
		}
		return rc, nil
	}
	const into = "/var/cache/warren-apt"
	if err := conn.RunLines(ctx, &processpb.ProcessConfig{Cmd: "mkdir", Args: []string{"-p", into}}, nil); err != nil {
		return err
	}
	args := []string{"install", "-y", "--no-install-recommends"}
	log := &aptLog{out: out, scrub: aptMirrors(suite)}
	fetch := &aptFetch{dir: filepath.Join(tt.deps.Dir, "templates", ".apt"), suite: suite, pkgs: pkgs, hold: tt.deps.Sandboxes.HoldScratch, log: log}
	err = fetch.run(ctx, status, func(d aptDeb, r io.Reader) error {
		if _, err := conn.WriteFile(ctx, into+"/"+d.name, 0o644, "root", r); err != nil {
			return fmt.Errorf("upload %s: %w", d.name, err)
		}
		args = append(args, into+"/"+d.name)
		return nil
	})
	if err != nil {
		tt.log.Warn("template build: the host's apt failed", "tenant", tenant, "sandbox", sb, "suite", suite, "err", err, "apt", strings.Join(log.raw, "\n"))
		return fmt.Errorf("apt: %w", err)
	}
	if n := len(args) - 3; n > 0 {
		out(fmt.Sprintf("installing %d package files", n))
		err = conn.RunLines(ctx, &processpb.ProcessConfig{Cmd: "apt-get", Args: args,
			Envs: map[string]string{"DEBIAN_FRONTEND": "noninteractive"}}, out)
	}
	rerr := conn.RunLines(ctx, &processpb.ProcessConfig{Cmd: "rm", Args: []string{"-rf", into}}, nil)
	return errors.Join(err, rerr)
}
