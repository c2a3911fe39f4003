package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"warren/api"
	"warren/client"
)

// sciSpec is a data-science template's spec: an apt package, a pip
// package from the test internet's index, a copied file, env, workdir, a
// command, and a service its sandboxes start. last is its last step.
func sciSpec(last string) string {
	return fmt.Sprintf(`from: default
network:
  allow: [%[1]s]
env: {LANG: C.UTF-8}
steps:
  - apt: [python3-pip]
  - pip: {packages: [warrentest], index_url: "http://%[1]s/files/simple/"}
  - copy: {src: app/, dest: /opt/app}
  - env: {APP_MODE: test}
  - workdir: /opt/app
  - run: %[2]s
start:
  command: python3 -m http.server 8000 --directory /opt/app
  ready: curl -sf http://127.0.0.1:8000/built.txt
  ready_timeout_seconds: 30
`, inetAllowed, last)
}

// TestTemplateFromSpec: a spec builds into a template whose sandboxes have
// what each step made and start its service; changing only the last step
// rebuilds only that step; a rebuild is a new version that leaves running
// sandboxes and older snapshots as they were; another tenant neither sees
// nor uses it.
func TestTemplateFromSpec(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	servePipPackage(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app", "hello.txt"), []byte("from the context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "warren.yaml")
	// A tenant of this run's own: the suite's data directory, and its
	// templates, outlive runs.
	c, key := newTenant(t, "tpl-spec")
	build := func(last string) (string, string, time.Duration) {
		t.Helper()
		if err := os.WriteFile(spec, []byte(sciSpec(last)), 0o644); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		stdout, stderr, code := cliAs(t, key, "template", "build", "--no-progress", "-f", spec, "sci")
		if code != 0 {
			t.Fatalf("template build: exit %d\n%s", code, stderr)
		}
		return strings.TrimSpace(stdout), stderr, time.Since(t0)
	}
	ref1, log1, cold := build("echo built > /opt/app/built.txt")
	if ref1 != "sci@1" {
		t.Fatalf("first build made %q, want sci@1", ref1)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "sci"})
	if err != nil {
		t.Fatalf("create from sci: %v\nbuild log:\n%s", err, log1)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
	if sb.TemplateVersion != "sci@1" || sb.Template != "default" {
		t.Errorf("sandbox's template %q version %q, want default and sci@1", sb.Template, sb.TemplateVersion)
	}
	// The service was ready before the create answered.
	res := shellIn(t, c, sb.ID, `python3 -c 'import warrentest; print(warrentest.VALUE)'; pwd; cat hello.txt; echo $APP_MODE $LANG; curl -sf http://127.0.0.1:8000/built.txt`)
	if want := "42\n/opt/app\nfrom the context\ntest C.UTF-8\nbuilt\n"; res.Stdout != want || res.ExitCode != 0 {
		t.Errorf("a sandbox of sci@1: %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
	snap, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}

	ref2, log2, warm := build("echo rebuilt > /opt/app/built.txt")
	if ref2 != "sci@2" {
		t.Fatalf("rebuild made %q, want sci@2", ref2)
	}
	for _, step := range []string{"[1/6 apt] cached", "[2/6 pip] cached", "[3/6 copy] cached"} {
		if !strings.Contains(log2, step) {
			t.Errorf("the rebuild's log lacks %q:\n%s", step, log2)
		}
	}
	if strings.Contains(log2, "fetching the package lists") || strings.Contains(log2, "installing") {
		t.Errorf("the rebuild ran the apt step again:\n%s", log2)
	}
	t.Logf("sci: built in %v, rebuilt (last step changed) in %v", cold.Round(time.Millisecond), warm.Round(time.Millisecond))

	for _, tc := range []struct{ template, want string }{{"sci", "rebuilt\n"}, {"sci@1", "built\n"}, {"sci@2", "rebuilt\n"}} {
		kid, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tc.template})
		if err != nil {
			t.Fatalf("create from %s: %v", tc.template, err)
		}
		if got := shellIn(t, c, kid.ID, "cat built.txt").Stdout; got != tc.want {
			t.Errorf("a sandbox of %s has %q, want %q", tc.template, got, tc.want)
		}
		c.DeleteSandbox(ctx, kid.ID)
	}
	if got := shellIn(t, c, sb.ID, "cat built.txt").Stdout; got != "built\n" {
		t.Errorf("the sandbox running sci@1 changed: %q", got)
	}
	restored, err := c.Restore(ctx, snap.ID, api.RestoreRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := shellIn(t, c, restored[0].ID, "cat /opt/app/built.txt").Stdout; got != "built\n" {
		t.Errorf("a snapshot of a sci@1 sandbox restored after the rebuild has %q", got)
	}
	c.DeleteSandbox(ctx, restored[0].ID)
	if err := c.DeleteTemplate(ctx, "sci@1"); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("deleting sci@1 while a sandbox runs it: %v, want a conflict", err)
	}

	other, _ := newTenant(t, "tpl-other")
	if _, err := other.GetTemplate(ctx, "sci"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("another tenant's get of sci: %v, want not found", err)
	}
	if _, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "sci@1"}); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("another tenant's create from sci@1: %v, want not found", err)
	}
	list, err := other.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range list {
		if tpl.Name == "sci" {
			t.Errorf("another tenant lists %+v", tpl)
		}
	}

	// A failing step names itself and shows its output; the version is
	// failed and the name still gives the last good one.
	if err := os.WriteFile(spec, []byte(sciSpec("echo it broke >&2; exit 3")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cliAs(t, key, "template", "build", "--no-progress", "-f", spec, "sci")
	if code == 0 || !strings.Contains(stderr, "6/6 run") || !strings.Contains(stderr, "it broke") || !strings.Contains(stderr, "exit code 3") {
		t.Errorf("a failing build: exit %d, stderr:\n%s\nwant the step, its output and its exit code", code, stderr)
	}
	if got, err := c.GetTemplate(ctx, "sci@3"); err != nil || got.State != api.TemplateFailed {
		t.Errorf("sci@3: %+v, %v; want failed", got, err)
	}
	if kid, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "sci"}); err != nil || kid.TemplateVersion != "sci@2" {
		t.Errorf("create from sci after a failed build: %+v, %v; want sci@2", kid, err)
	} else {
		c.DeleteSandbox(ctx, kid.ID)
	}
}

// servePipPackage serves a package index on the test internet with one
// pure-Python wheel, warrentest (VALUE = 42).
func servePipPackage(t testing.TB) {
	t.Helper()
	files := map[string]string{
		"warrentest/__init__.py":                 "VALUE = 42\n",
		"warrentest-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: warrentest\nVersion: 1.0\n",
		"warrentest-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: warren-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"warrentest-1.0.dist-info/top_level.txt": "warrentest\n",
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"warrentest/__init__.py", "warrentest-1.0.dist-info/METADATA", "warrentest-1.0.dist-info/WHEEL", "warrentest-1.0.dist-info/top_level.txt"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[name]))
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("warrentest-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("warrentest-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	const wheel = "warrentest-1.0-py3-none-any.whl"
	sum := sha256.Sum256(buf.Bytes())
	page := fmt.Sprintf(`<!DOCTYPE html><html><body><a href="/files/pkgs/%s#sha256=%x">%s</a></body></html>`, wheel, sum, wheel)
	inet.serve("/files/pkgs/"+wheel, buf.Bytes())
	inet.serve("/files/simple/warrentest/", []byte(page))
	inet.serve("/files/simple/", []byte(`<!DOCTYPE html><html><body><a href="/files/simple/warrentest/">warrentest</a></body></html>`))
}

// TestTemplateFromSnapshot: a snapshot of a sandbox set up by hand becomes
// a template whose sandboxes start with its files and the config given;
// the snapshot a version's disk is cannot be deleted under it.
func TestTemplateFromSnapshot(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, _ := newTenant(t, "tpl-snap")
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "mkdir -p /srv/work && echo by hand > /srv/work/made.txt"}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "handmade", FromSnapshot: snap.ID}, nil)
	if err != nil || plain.Ref != "handmade@1" || plain.Snapshot != snap.ID {
		t.Fatalf("promote %s: %+v, %v", snap.ID, plain, err)
	}
	if err := c.DeleteSnapshot(ctx, snap.ID); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("deleting the snapshot under handmade@1: %v, want a conflict", err)
	}
	cfg, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "handmade", FromSnapshot: snap.ID,
		Config: &api.TemplateConfig{Env: map[string]string{"ROLE": "worker"}, Workdir: "/srv/work"}}, nil)
	if err != nil || cfg.Ref != "handmade@2" {
		t.Fatalf("promote with a config: %+v, %v", cfg, err)
	}
	kid, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "handmade"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, kid.ID)
	res, err := c.Exec(ctx, kid.ID, api.ExecRequest{Shell: "pwd; cat made.txt; echo $ROLE"})
	if err != nil || res.Stdout != "/srv/work\nby hand\nworker\n" {
		t.Errorf("a sandbox of handmade@2: %+v, %v", res, err)
	}
	if err := c.DeleteTemplate(ctx, "handmade@1"); err != nil {
		t.Errorf("delete handmade@1: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Errorf("delete the snapshot once no version is on it: %v", err)
	}
	if _, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "default", FromSnapshot: snap.ID}, nil); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("a tenant's template named default: %v, want a conflict", err)
	}
}

// TestTemplateFromImage: an OCI image pushed to a registry on loopback
// becomes a template whose env, workdir and files take effect; the
// sandbox's agent is warren's, the image's busybox its shell.
func TestTemplateFromImage(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	ref := strings.TrimPrefix(reg.URL, "http://") + "/e2e/busybox:1"
	pushBusybox(t, ref)
	c, _ := newTenant(t, "tpl-oci")
	tpl, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "tiny", FromImage: &api.ImageSource{Ref: ref, Insecure: true}}, nil)
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	if !strings.HasPrefix(tpl.Digest, "sha256:") || tpl.Config == nil || tpl.Config.Workdir != "/app" {
		t.Errorf("imported template %+v: want the image's digest and workdir", tpl)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo $GREETING; pwd; cat hello.txt; ls /app"})
	if err != nil || res.Stdout != "hi\n/app\nfrom the image\nhello.txt\n" {
		t.Errorf("a sandbox of the image: %+v, %v", res, err)
	}
	// The same image as a docker save tarball, sent from here.
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	bb, _ := os.ReadFile("/bin/busybox")
	r, err := name.ParseReference("e2e/busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(archive, r, busyboxImage(t, bb)); err != nil {
		t.Fatal(err)
	}
	_, key := newTenant(t, "tpl-archive")
	stdout, stderr, code := cliAs(t, key, "template", "create", "--no-progress", "--from-archive", archive, "tiny")
	if code != 0 || stdout != "tiny@1\n" {
		t.Fatalf("template create --from-archive: exit %d %q %s", code, stdout, stderr)
	}
	ac := client.New(shared.url, key)
	asb, err := ac.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.DeleteSandbox(ctx, asb.ID)
	if res := shellIn(t, ac, asb.ID, "echo $GREETING; cat hello.txt"); res.Stdout != "hi\nfrom the image\n" {
		t.Errorf("a sandbox of the archive: %+v", res)
	}
	// The same registry by another name is not one the node was told it
	// may reach at a loopback address.
	byName := strings.Replace(ref, "127.0.0.1", "localhost", 1)
	if _, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "byname", FromImage: &api.ImageSource{Ref: byName, Insecure: true}}, nil); err == nil || !strings.Contains(err.Error(), "not a public address") {
		t.Errorf("importing from %s: %v, want a refusal of the loopback address", byName, err)
	}
	if _, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "missing",
		FromImage: &api.ImageSource{Ref: strings.TrimPrefix(reg.URL, "http://") + "/e2e/nothing:1", Insecure: true}}, nil); err == nil {
		t.Error("importing an image the registry lacks: no error")
	}
}

// pushBusybox pushes to ref busyboxImage of the host's busybox-static.
func pushBusybox(t *testing.T, ref string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs Debian's busybox-static (scripts/deps.sh installs it): %v", err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, busyboxImage(t, bb)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// busyboxImage is an image of busybox bb: a layer with it as /bin/sh and
// the applets the tests use, a layer with /app/hello.txt and a whiteout
// of a file of the first, and a config with env and workdir.
func busyboxImage(t testing.TB, bb []byte) v1.Image {
	t.Helper()
	layer := func(entries func(tw *tar.Writer)) v1.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		entries(tw)
		tw.Close()
		b := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	base := layer(func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
		tw.Write(bb)
		for _, applet := range []string{"sh", "cat", "ls", "pwd", "echo", "mkdir", "rm", "tar", "sleep", "env", "id"} {
			tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
		tw.WriteHeader(&tar.Header{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "app/gone.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
		tw.Write([]byte("old\n"))
	})
	top := layer(func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "app/.wh.gone.txt", Typeflag: tar.TypeReg, Mode: 0o644})
		tw.WriteHeader(&tar.Header{Name: "app/hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 15})
		tw.Write([]byte("from the image\n"))
	})
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.Config.Env = []string{"PATH=/bin", "GREETING=hi"}
	cf.Config.WorkingDir = "/app"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// tarOf is a tar of one file.
func tarOf(t testing.TB, name string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// specRequestOf is the request that builds the spec file as name, with
// the spec's directory as its context (as warren template build -f sends
// it).
func specRequestOf(name, spec string) (api.CreateTemplateRequest, error) {
	b, err := os.ReadFile(spec)
	if err != nil {
		return api.CreateTemplateRequest{}, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(filepath.Dir(spec))); err != nil {
		return api.CreateTemplateRequest{}, err
	}
	if err := tw.Close(); err != nil {
		return api.CreateTemplateRequest{}, err
	}
	return api.CreateTemplateRequest{Name: name, Spec: string(b), Context: buf.Bytes()}, nil
}

// newTenant makes a tenant of this run's own, named from prefix, and
// returns a client with its key, and the key.
func newTenant(t testing.TB, prefix string) (*client.Client, string) {
	t.Helper()
	tenant := fmt.Sprintf("%s-%s", prefix, strconv.FormatInt(time.Now().UnixNano(), 36))
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return client.New(shared.url, k.Key), k.Key
}

// cliAs runs the warren CLI against the shared daemon with key.
func cliAs(t *testing.T, key string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "warren"), args...)
	cmd.Env = append(os.Environ(), "WARREN_URL="+shared.url, "WARREN_API_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("warren %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), 0
}

// shellIn runs script in sandbox id through c and returns the result.
func shellIn(t *testing.T, c *client.Client, id, script string) *api.ExecResult {
	t.Helper()
	res, err := c.Exec(context.Background(), id, api.ExecRequest{Shell: script, TimeoutMs: 20000})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// TestTemplateFromSuite: a spec from a Debian suite starts from the
// node's built-in template of that suite, made first when the node lacks
// it (here from the root filesystem the default template's build cached:
// the same packages of the same suite).
func TestTemplateFromSuite(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, _ := newTenant(t, "tpl-suite")
	spec := "from: debian:bookworm\nsteps:\n  - run: echo on bookworm > /root/suite.txt\n"
	var log strings.Builder
	tpl, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "plain", Spec: spec}, &log)
	if err != nil {
		t.Fatalf("build from debian:bookworm: %v\n%s", err, log.String())
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl.Ref})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	if sb.Template != "debian-bookworm" {
		t.Errorf("the sandbox's built-in template: %q, want debian-bookworm", sb.Template)
	}
	res := shellIn(t, c, sb.ID, ". /etc/os-release; echo $VERSION_CODENAME; cat /root/suite.txt")
	if res.Stdout != "bookworm\non bookworm\n" {
		t.Errorf("a sandbox of %s: %+v", tpl.Ref, res)
	}
	if _, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: "debian-bookworm", Spec: spec}, nil); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("a tenant's template named debian-bookworm: %v, want a conflict", err)
	}
}
