package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"

	"warren/api"
	"warren/client"
	"warren/internal/buildspec"
)

// templateCommands are the subcommands of `warren template`.
var templateCommands = []command{
	{"ls", "list templates", runTemplateList},
	{"build", "build a template from a spec (or a built-in one from its recipe)", runTemplateBuild},
	{"create", "make a template from a snapshot or an OCI image", runTemplateCreate},
	{"get", "show a template", runTemplateGet},
	{"versions", "list the versions of a template", runTemplateVersions},
	{"rm", "delete a template version, or all of a template's", runTemplateRemove},
	{"share", "publish a version of the admin's template to every tenant", runTemplateShare},
}

func runTemplate(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "template", templateCommands, args)
}

func runTemplateList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template ls", "[flags]", "List the templates sandboxes can be created from.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list, err := cl.ListTemplates(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "NAME\tVERSION\tSTATE\tSOURCE\tSIZE\tBUILT")
		for _, t := range list {
			version, state, source := "-", cmp.Or(t.State, api.TemplateReady), cmp.Or(t.Source, "built in")
			if t.Version > 0 {
				version = fmt.Sprint(t.Version)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, version, state, source, mib(t.SizeBytes), when(t.BuiltAt))
		}
	})
}

// mib formats a byte count in MiB.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func runTemplateBuild(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template build", "-f SPEC NAME | NAME",
		"With -f, build a new version of your template NAME from a build spec\n"+
			"(warren.yaml, or a Dockerfile: docs/TEMPLATES.md); the directory -C\n"+
			"names (default: the spec's) is the context its copy steps read.\n"+
			"Without -f, build the built-in template NAME from its recipe (admin\n"+
			"key only). Progress goes to stderr as it comes: on a terminal, the\n"+
			"current step on one line; else every line of the build's log. The\n"+
			"template's reference is printed on stdout when it is built.")
	file := fs.String("f", "", "the build spec `FILE` (a Dockerfile when named like one)")
	dir := fs.String("C", "", "the build context `DIR` (default: the spec's directory)")
	background := fs.Bool("background", false, "start the build and print the version at once (follow it with template get)")
	noProgress := fs.Bool("no-progress", false, "print every line of the build's log on stderr, even on a terminal")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *file == "" {
		var log io.Writer = c.stderr
		p := c.progress(*noProgress, "template build "+rest[0], -1, false)
		if p != nil {
			log = statusWriter{p}
		}
		t, err := cl.BuildTemplate(ctx, rest[0], log)
		p.end(true, "") // the last step stays on the screen, above an error too
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.stdout, t.Name)
		return err
	}
	req, err := specRequest(rest[0], *file, *dir)
	if err != nil {
		return err
	}
	req.Background = *background
	return c.createTemplate(ctx, cl, req, *noProgress)
}

// specRequest reads a build spec and, when its steps copy files, the
// context they copy from, as a tar.
func specRequest(name, file, dir string) (api.CreateTemplateRequest, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return api.CreateTemplateRequest{}, err
	}
	spec, err := buildspec.Load(b, file)
	if err != nil {
		return api.CreateTemplateRequest{}, err
	}
	req := api.CreateTemplateRequest{Name: name, Spec: string(b)}
	if buildspec.IsDockerfile(file) {
		req.SpecFormat = "dockerfile"
	}
	if !slices.ContainsFunc(spec.Steps, func(s buildspec.Step) bool { return s.Kind == buildspec.KindCopy }) {
		return req, nil
	}
	if dir == "" {
		dir = filepath.Dir(file)
	}
	if req.Context, err = tarContext(dir, api.MaxTemplateContext); err != nil {
		return api.CreateTemplateRequest{}, fmt.Errorf("build context %s: %w", dir, err)
	}
	return req, nil
}

// tarContext is a tar of dir's files, directories and symlinks (others
// are skipped), at most max bytes.
func tarContext(dir string, max int) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case fi.Mode()&iofs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !fi.IsDir() && !fi.Mode().IsRegular():
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.Uid, h.Gid = filepath.ToSlash(rel), "", "", 0, 0
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		if buf.Len() > max {
			return fmt.Errorf("larger than %d MiB", max>>20)
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	return buf.Bytes(), err
}

func runTemplateCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template create", "NAME (--from SNAPSHOT | --from-image REF | --from-archive FILE)",
		"Make a new version of your template NAME from one of your durable\n"+
			"snapshots (set up a sandbox by hand, snapshot it), from an OCI image\n"+
			"the server pulls, or from an image archive sent from here. The flags\n"+
			"set what its sandboxes start with (an image's own env, workdir, user\n"+
			"and entrypoint are under them; an archive keeps its image's).")
	from := fs.String("from", "", "the `SNAPSHOT` to promote")
	image := fs.String("from-image", "", "the OCI image `REF` to import")
	archive := fs.String("from-archive", "", "the image archive `FILE` to import: a docker save tarball or an OCI layout tar")
	insecure := fs.Bool("insecure", false, "reach the image's registry over plain HTTP")
	env := kvFlag{}
	fs.Var(env, "env", "set `K=V` in every process's environment (repeatable)")
	workdir := fs.String("workdir", "", "a process's working `DIR` when it names none")
	user := fs.String("user", "", "a process's `USER` when it names none")
	start := fs.String("start", "", "a `COMMAND` each sandbox starts (sh -c)")
	ready := fs.String("ready", "", "a `COMMAND` that succeeds once the start command is ready")
	background := fs.Bool("background", false, "print the version at once, building")
	noProgress := fs.Bool("no-progress", false, "print every line of the build's log on stderr, even on a terminal")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	req := api.CreateTemplateRequest{Name: rest[0], FromSnapshot: *from, Background: *background}
	if *image != "" {
		req.FromImage = &api.ImageSource{Ref: *image, Insecure: *insecure}
	}
	if n := len(slices.DeleteFunc([]string{*from, *image, *archive}, func(s string) bool { return s == "" })); n != 1 {
		return badUsage(fs, "give one of --from, --from-image and --from-archive")
	}
	if *archive != "" {
		return c.importArchive(ctx, cl, rest[0], *archive, *noProgress)
	}
	cfg := api.TemplateConfig{Workdir: *workdir, User: *user, Start: *start, Ready: *ready}
	if len(env) > 0 {
		cfg.Env = env
	}
	if cfg.Env != nil || cfg.Workdir != "" || cfg.User != "" || cfg.Start != "" || cfg.Ready != "" {
		req.Config = &cfg
	}
	return c.createTemplate(ctx, cl, req, *noProgress)
}

// createTemplate sends req, shows its progress, and prints the version's
// reference.
func (c *cli) createTemplate(ctx context.Context, cl *client.Client, req api.CreateTemplateRequest, noProgress bool) error {
	var log io.Writer = c.stderr
	p := c.progress(noProgress || req.Background, "template "+req.Name, -1, false)
	if p != nil {
		log = statusWriter{p}
	}
	t, err := cl.CreateTemplate(ctx, req, log)
	p.end(true, "")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, t.Ref)
	return err
}

// importArchive sends an image archive as a new version of name.
func (c *cli) importArchive(ctx context.Context, cl *client.Client, name, file string, noProgress bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var log io.Writer = c.stderr
	p := c.progress(noProgress, "template "+name, -1, false)
	if p != nil {
		log = statusWriter{p}
	}
	t, err := cl.CreateTemplateFromArchive(ctx, name, f, log)
	p.end(true, "")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, t.Ref)
	return err
}

func runTemplateGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template get", "REF", "Show a template: NAME (its newest version) or NAME@VERSION, as JSON.")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	t, err := cl.GetTemplate(ctx, rest[0])
	if err != nil {
		return err
	}
	return printTable(c.stdout, true, t, 0, nil)
}

func runTemplateVersions(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template versions", "NAME", "List the versions of your template NAME, newest first.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	list, err := cl.TemplateVersions(ctx, rest[0])
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "REF\tSTATE\tSOURCE\tDIGEST\tBUILT\tERROR")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.19s\t%s\t%s\n", t.Ref, t.State, t.Source, t.Digest, when(t.BuiltAt), t.Error)
		}
	})
}

func runTemplateRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template rm", "REF",
		"Delete NAME@VERSION, or every version of NAME. A version a live sandbox\n"+
			"started from stays. What was made from a version keeps what it needs.")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return cl.DeleteTemplate(ctx, rest[0])
}

func runTemplateShare(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template share", "NAME@VERSION",
		"Publish a version of the admin's template to every tenant (admin key only):\n"+
			"a tenant then starts sandboxes from NAME, the newest version published,\n"+
			"or NAME@VERSION, unless it has a template of that name of its own.")
	withdraw := fs.Bool("withdraw", false, "withdraw the version instead")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	t, err := cl.ShareTemplate(ctx, rest[0], !*withdraw)
	if err != nil {
		return err
	}
	state := "shared"
	if !t.Shared {
		state = "withdrawn"
	}
	_, err = fmt.Fprintln(c.stdout, t.Ref, state)
	return err
}
