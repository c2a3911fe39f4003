package e2b

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"go.yaml.in/yaml/v3"

	"warren/api"
	"warren/internal/archive"
	"warren/internal/backoff"
	"warren/internal/ident"
	wtemplate "warren/internal/template"
)

// E2B's template builds (its SDKs' Template.build and
// Template.buildInBackground) become builds of the caller's warren
// templates (docs/TEMPLATES.md): a build is requested, its COPY steps'
// files are uploaded to URLs this handler gives, and the trigger
// translates E2B's steps into a warren build spec, its files into the
// build's context, and sends POST /v1/templates; the build's status is the
// version's state. An image with steps becomes two versions: the image's,
// then the steps' on it.

// requestBuild answers POST /v3/templates: a build of the caller's
// template name, waiting for its files and its trigger.
func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount int      `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
		MinDisk  int      `json:"minFreeDiskMb"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	if len(req.Tags) > 0 {
		return errorf(http.StatusBadRequest, "warren's templates have versions, not tags: build without tags and pin NAME@VERSION")
	}
	// The key must be a tenant's, and the name a template's.
	if err := h.call(r, http.MethodGet, "/v1/templates?limit=1", nil, nil); err != nil {
		return err
	}
	if err := validTemplateName(name); err != nil {
		return err
	}
	tenant, err := h.tenant(r)
	if err != nil {
		return err
	}
	id := ident.New("bld-")
	now := time.Now()
	h.builds.mu.Lock()
	defer h.builds.mu.Unlock()
	h.builds.sweepLocked(now)
	if err := h.builds.admitLocked(tenant); err != nil {
		return err
	}
	if h.builds.builds == nil {
		h.builds.builds = map[string]*pendingBuild{}
	}
	h.builds.builds[id] = &pendingBuild{key: keyHash(r), tenant: tenant, name: name, made: now, last: now, files: map[string]*spooled{}, tokens: map[string]string{},
		timer: time.AfterFunc(waitFor+time.Second, func() { h.builds.expire(id) })}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": id, "tags": []string{}, "aliases": []string{name}, "names": []string{name}, "public": false,
	})
	return nil
}

// validTemplateName is warren's rule for a template's name, in E2B's
// error shape.
func validTemplateName(name string) error {
	if err := wtemplate.ValidName(name); err != nil {
		return errorf(http.StatusBadRequest, "template name: %v", err)
	}
	return nil
}

// e2bTemplate is the body of E2B's build trigger.
type e2bTemplate struct {
	FromTemplate      string    `json:"fromTemplate"`
	FromImage         string    `json:"fromImage"`
	FromImageRegistry any       `json:"fromImageRegistry"`
	Steps             []e2bStep `json:"steps"`
	StartCmd          string    `json:"startCmd"`
	ReadyCmd          string    `json:"readyCmd"`
	Force             bool      `json:"force"`
}

type e2bStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// trigger answers POST /v2/templates/{id}/builds/{build}: the steps
// translated and the build started, in the background.
func (h *Handler) trigger(w http.ResponseWriter, r *http.Request, name, id string) error {
	b, _, err := h.builds.build(r, name, id)
	if err != nil {
		return err
	}
	var t e2bTemplate
	if err := decode(r, &t); err != nil {
		return err
	}
	if t.FromImageRegistry != nil {
		return errorf(http.StatusBadRequest, "registry credentials of an image are not taken from E2B's SDK yet: make the template with warren's API (docs/TEMPLATES.md)")
	}
	p := &h.builds
	p.mu.Lock()
	switch {
	case b.building:
		err = errorf(http.StatusConflict, "build %s was started already", id)
	case b.uploading > 0:
		err = errorf(http.StatusConflict, "build %s has files still being uploaded", id)
	}
	if err != nil {
		p.mu.Unlock()
		return err
	}
	b.building = true
	b.last = time.Now()
	b.timer.Stop()
	files := b.files
	b.files, b.tokens = nil, nil
	p.mu.Unlock()
	steps, tarball, err := h.buildContext(b, t, files)
	if err != nil {
		h.setFailed(b, err)
		return err
	}
	// The build outlives this request: it goes on under the caller's key,
	// and its status answers where it is.
	bg := r.Clone(context.WithoutCancel(r.Context()))
	go h.runBuild(bg, b, name, t, steps, tarball)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// buildContext translates t, joining its COPY steps' files into the
// build's context, spooled (nil when it has none); the files are given
// back.
func (h *Handler) buildContext(b *pendingBuild, t e2bTemplate, files map[string]*spooled) (string, *spooled, error) {
	p := &h.builds
	readers := map[string]*io.SectionReader{}
	for hash, f := range files {
		readers[hash] = f.reader()
	}
	defer func() {
		for _, f := range files {
			p.release(b, f)
		}
	}()
	tarball, err := p.spool()
	if err != nil {
		return "", nil, err
	}
	steps, has, err := translate(t, readers, &contextWriter{p: p, b: b, f: tarball})
	if err != nil || !has {
		p.release(b, tarball)
		return steps, nil, err
	}
	return steps, tarball, nil
}

// contextWriter writes a build's context to its spooled file, at most
// api.MaxTemplateContext bytes, charging them to the build (by minCharge
// at a time) before they are written.
type contextWriter struct {
	p *pending
	b *pendingBuild
	f *spooled
}

func (w *contextWriter) Write(d []byte) (int, error) {
	end := w.f.size + int64(len(d))
	if end > api.MaxTemplateContext {
		return 0, errorf(http.StatusBadRequest, "the build's context (its COPY steps' files together, unpacked) is more than %s", archive.Size(api.MaxTemplateContext))
	}
	if end > w.f.charged {
		more := (end - w.f.charged + minCharge - 1) / minCharge * minCharge
		w.p.mu.Lock()
		err := w.p.chargeLocked(w.b, more)
		w.p.mu.Unlock()
		if err != nil {
			return 0, err
		}
		w.f.charged += more
	}
	n, err := w.f.f.Write(d)
	w.f.size += int64(n)
	return n, err
}

func (h *Handler) setFailed(b *pendingBuild, err error) {
	h.builds.mu.Lock()
	defer h.builds.mu.Unlock()
	b.err = err.Error()
	var ae *apiError
	if errors.As(err, &ae) {
		b.err = ae.message
	}
}

// runBuild makes the version: an image's first when the build starts from
// one, then the steps' (the spec's body, translate's) on it, with
// tarball, its context, given back once the build has it.
func (h *Handler) runBuild(r *http.Request, b *pendingBuild, name string, t e2bTemplate, steps string, tarball *spooled) {
	if tarball != nil {
		defer h.builds.release(b, tarball)
	}
	var out api.Template
	from := template(t.FromTemplate)
	if t.FromImage != "" {
		req := api.CreateTemplateRequest{Name: name, FromImage: &api.ImageSource{Ref: t.FromImage}}
		if steps == "" {
			req.Config = &api.TemplateConfig{Start: t.StartCmd, Ready: t.ReadyCmd}
		}
		req.Background = true
		if err := h.call(r, http.MethodPost, "/v1/templates", req, &out); err != nil {
			h.setFailed(b, err)
			return
		}
		h.setRef(b, out.Ref)
		if steps == "" {
			return
		}
		if err := h.awaitVersion(r, out.Ref); err != nil {
			h.setFailed(b, err)
			return
		}
		from = out.Ref
	}
	req := api.CreateTemplateRequest{Name: name, Spec: "from: " + from + "\n" + steps, Background: true}
	if tarball != nil {
		// warren's API takes the context whole: it is read in only now,
		// maxHandoffs at a time.
		h.handoffs <- struct{}{}
		defer func() { <-h.handoffs }()
		req.Context = make([]byte, tarball.size)
		if _, err := tarball.f.ReadAt(req.Context, 0); err != nil {
			h.setFailed(b, fmt.Errorf("read the context: %w", err))
			return
		}
	}
	if err := h.call(r, http.MethodPost, "/v1/templates", req, &out); err != nil {
		h.setFailed(b, err)
		return
	}
	h.setRef(b, out.Ref)
}

func (h *Handler) setRef(b *pendingBuild, ref string) {
	h.builds.mu.Lock()
	defer h.builds.mu.Unlock()
	b.ref = ref
}

// awaitVersion waits until version ref is built, or says why it is not.
func (h *Handler) awaitVersion(r *http.Request, ref string) error {
	return backoff.Poll(r.Context(), backoff.Backoff{Base: 100 * time.Millisecond, Max: time.Second}, func() (bool, error) {
		var t api.Template
		if err := h.call(r, http.MethodGet, "/v1/templates/"+url.PathEscape(ref), nil, &t); err != nil {
			return false, err
		}
		if t.State == api.TemplateFailed {
			return false, errorf(http.StatusBadRequest, "%s", t.Error)
		}
		return t.State == api.TemplateReady, nil
	})
}

// buildStatus answers GET /templates/{id}/builds/{build}/status: the
// version's state. warren keeps no log of a background build: the log is
// empty, and a failure's reason has the failing step and its output.
func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request, name, id string) error {
	b, _, err := h.builds.build(r, name, id)
	if err != nil {
		return err
	}
	h.builds.mu.Lock()
	ref, failed := b.ref, b.err
	h.builds.mu.Unlock()
	status := map[string]any{"templateID": name, "buildID": id, "status": "building", "logEntries": []any{}, "logs": []string{}}
	switch {
	case failed != "":
		status["status"], status["reason"] = "error", map[string]any{"message": failed}
	case ref != "":
		var t api.Template
		if err := h.call(r, http.MethodGet, "/v1/templates/"+url.PathEscape(ref), nil, &t); err != nil {
			return err
		}
		switch t.State {
		case api.TemplateReady:
			status["status"] = "ready"
		case api.TemplateFailed:
			status["status"], status["reason"] = "error", map[string]any{"message": t.Error}
		}
	}
	writeJSON(w, http.StatusOK, status)
	return nil
}

// alias answers GET /templates/aliases/{alias}: whether the caller has a
// template of that name.
func (h *Handler) alias(w http.ResponseWriter, r *http.Request, name string) error {
	if err := validTemplateName(name); err != nil {
		return err
	}
	var t api.Template
	if err := h.call(r, http.MethodGet, "/v1/templates/"+url.PathEscape(name), nil, &t); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": t.Name, "public": t.Shared})
	return nil
}

// Bounds of a build's context beyond its size: its entries, and the tar
// streams read for it (headers and padding included, gzip undone).
const (
	maxContextEntries = 1 << 16
	maxContextStream  = 2 * api.MaxTemplateContext
)

// translate turns E2B's template into the body of a warren build spec (its
// steps and start, the from line left to the caller), and writes the files
// its COPY steps name, as one context tar, to out; it reports whether the
// context has any entry. An image's template with no steps has no body
// ("").
func translate(t e2bTemplate, files map[string]*io.SectionReader, out io.Writer) (string, bool, error) {
	switch {
	case t.FromTemplate != "" && t.FromImage != "":
		return "", false, errorf(http.StatusBadRequest, "a template is from a template or from an image, not both")
	case t.FromTemplate == "" && t.FromImage == "":
		return "", false, errorf(http.StatusBadRequest, "a template needs fromTemplate or fromImage")
	case t.FromImage != "" && len(t.Steps) == 0:
		return "", false, nil
	}
	var steps []map[string]any
	tw := tar.NewWriter(out)
	c := &contextTar{tw: tw, seen: map[[32]byte]bool{}, stream: maxContextStream}
	user := ""
	for i, s := range t.Steps {
		bad := func(format string, args ...any) error {
			return errorf(http.StatusBadRequest, "step %d (%s): %s", i+1, s.Type, fmt.Sprintf(format, args...))
		}
		switch s.Type {
		case "RUN":
			if len(s.Args) < 1 || len(s.Args) > 2 {
				return "", false, bad("want a command and an optional user")
			}
			as := ""
			if len(s.Args) == 2 {
				as = s.Args[1]
			}
			if as != "" && as != user {
				steps = append(steps, map[string]any{"user": as})
			}
			steps = append(steps, map[string]any{"run": s.Args[0]})
			if as != "" && as != user {
				steps = append(steps, map[string]any{"user": cmp.Or(user, "root")})
			}
		case "COPY":
			if len(s.Args) < 2 {
				return "", false, bad("want a source and a destination")
			}
			data, ok := files[s.FilesHash]
			if !ok {
				return "", false, bad("its files (hash %s) were not uploaded", s.FilesHash)
			}
			if err := c.add(io.NewSectionReader(data, 0, data.Size())); err != nil {
				if ae := (*apiError)(nil); errors.As(err, &ae) {
					return "", false, err
				}
				return "", false, bad("its files: %v", err)
			}
			cp := map[string]any{"src": s.Args[0], "dest": s.Args[1]}
			if len(s.Args) > 2 && s.Args[2] != "" {
				cp["owner"] = s.Args[2]
			}
			if len(s.Args) > 3 && s.Args[3] != "" {
				cp["mode"] = s.Args[3]
			}
			steps = append(steps, map[string]any{"copy": cp})
		case "ENV":
			if len(s.Args)%2 != 0 || len(s.Args) == 0 {
				return "", false, bad("want names and values")
			}
			env := map[string]string{}
			for j := 0; j < len(s.Args); j += 2 {
				env[s.Args[j]] = s.Args[j+1]
			}
			steps = append(steps, map[string]any{"env": env})
		case "WORKDIR":
			if len(s.Args) != 1 {
				return "", false, bad("want a directory")
			}
			steps = append(steps, map[string]any{"workdir": s.Args[0]})
		case "USER":
			if len(s.Args) != 1 {
				return "", false, bad("want a user")
			}
			user = s.Args[0]
			steps = append(steps, map[string]any{"user": user})
		default:
			return "", false, bad("warren's builds have no such step")
		}
	}
	if err := tw.Close(); err != nil {
		return "", false, err
	}
	doc := map[string]any{"steps": steps}
	if t.StartCmd != "" {
		start := map[string]any{"command": t.StartCmd}
		if t.ReadyCmd != "" {
			start["ready"] = t.ReadyCmd
		}
		doc["start"] = start
	}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return "", false, err
	}
	return string(body), len(c.seen) > 0, nil
}

// contextTar joins uploaded tars into one, each name once (the first
// upload's), within the context's bounds.
type contextTar struct {
	tw     *tar.Writer
	seen   map[[32]byte]bool // sha256 of the names written
	stream int64             // of maxContextStream, left to read
}

// add copies the entries of src, a tar (gzipped or not), read through
// archive's bounded reader: sparse entries are refused.
func (c *contextTar) add(src io.Reader) error {
	if c.stream <= 0 {
		return errorf(http.StatusBadRequest, "the build's files are more than %s of tar streams", archive.Size(maxContextStream))
	}
	rd, err := archive.Decompress(src)
	if err != nil {
		return err
	}
	tr := archive.NewReader(rd, archive.Limits{Bytes: api.MaxTemplateContext, Entries: maxContextEntries, Stream: c.stream})
	defer func() { c.stream -= tr.Consumed() }()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := sha256.Sum256([]byte(h.Name))
		if c.seen[name] {
			continue
		}
		if len(c.seen) >= maxContextEntries {
			return errorf(http.StatusBadRequest, "the build's context has more than %d entries", maxContextEntries)
		}
		c.seen[name] = true
		if err := c.tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(c.tw, tr); err != nil {
			return err
		}
	}
}
