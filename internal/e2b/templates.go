package e2b

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"warren/api"
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

// Bounds of the builds this handler holds between a request and its
// trigger: their number, an hour each, and the files uploaded for them.
const (
	maxPendingBuilds = 64
	maxBuildsPerKey  = 8
	pendingFor       = time.Hour
	maxPendingFiles  = 256 << 20
)

// pendingBuild is an E2B build requested and not yet done.
type pendingBuild struct {
	key      [32]byte // sha256 of the caller's API key: only it goes on
	name     string
	made     time.Time
	files    map[string][]byte // uploaded, by E2B's files hash
	uploads  map[string]string // upload token → files hash
	ref      string            // the warren version, NAME@VERSION, once one is made
	building bool              // the trigger came: the build is the version's
	err      string            // why it failed before a version was
}

// pending are the builds in between: guarded by mu.
type pending struct {
	mu     sync.Mutex
	builds map[string]*pendingBuild // by build ID
	bytes  int64                    // of every build's files
}

func keyHash(r *http.Request) [32]byte {
	k := r.Header.Get("X-API-Key")
	if k == "" {
		k = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return sha256.Sum256([]byte(k))
}

// sweepLocked forgets builds older than pendingFor.
func (p *pending) sweepLocked(now time.Time) {
	for id, b := range p.builds {
		if now.Sub(b.made) > pendingFor {
			for _, f := range b.files {
				p.bytes -= int64(len(f))
			}
			delete(p.builds, id)
		}
	}
}

// build returns the caller's build id of template name (any build of the
// caller's of name, the newest, when id is "").
func (p *pending) build(r *http.Request, name, id string) (*pendingBuild, string, error) {
	k := keyHash(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(time.Now())
	if id != "" {
		b := p.builds[id]
		if b == nil || subtle.ConstantTimeCompare(b.key[:], k[:]) != 1 || b.name != name {
			return nil, "", errorf(http.StatusNotFound, "build %s of template %s not found", id, name)
		}
		return b, id, nil
	}
	var newest *pendingBuild
	for bid, b := range p.builds {
		if b.name == name && subtle.ConstantTimeCompare(b.key[:], k[:]) == 1 && !b.building && (newest == nil || b.made.After(newest.made)) {
			newest, id = b, bid
		}
	}
	if newest == nil {
		return nil, "", errorf(http.StatusNotFound, "no build of template %s is waiting for its files", name)
	}
	return newest, id, nil
}

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
	id := ident.New("bld-")
	k := keyHash(r)
	h.builds.mu.Lock()
	defer h.builds.mu.Unlock()
	h.builds.sweepLocked(time.Now())
	mine := 0
	for _, b := range h.builds.builds {
		if b.key == k {
			mine++
		}
	}
	if len(h.builds.builds) >= maxPendingBuilds || mine >= maxBuildsPerKey {
		return errorf(http.StatusTooManyRequests, "too many template builds waiting for their files: finish or wait for one")
	}
	if h.builds.builds == nil {
		h.builds.builds = map[string]*pendingBuild{}
	}
	h.builds.builds[id] = &pendingBuild{key: k, name: name, made: time.Now(), files: map[string][]byte{}, uploads: map[string]string{}}
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

// fileLink answers GET /templates/{id}/files/{hash}: where to upload a
// COPY step's files, unless they are there.
func (h *Handler) fileLink(w http.ResponseWriter, r *http.Request, name, hash string) error {
	if !validHash(hash) {
		return errorf(http.StatusBadRequest, "files hash %q: want hex", hash)
	}
	b, _, err := h.builds.build(r, name, "")
	if err != nil {
		return err
	}
	h.builds.mu.Lock()
	_, present := b.files[hash]
	token := ident.New("up-")
	b.uploads[token] = hash
	h.builds.mu.Unlock()
	if present {
		writeJSON(w, http.StatusOK, map[string]any{"present": true})
		return nil
	}
	u := url.URL{Scheme: "http", Host: r.Host, Path: strings.TrimSuffix(r.URL.Path, "/"), RawQuery: "token=" + token}
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		u.Scheme = "https"
	}
	writeJSON(w, http.StatusOK, map[string]any{"present": false, "url": u.String()})
	return nil
}

func validHash(h string) bool {
	return h != "" && len(h) <= 128 && strings.Trim(h, "0123456789abcdef") == ""
}

// upload answers PUT /templates/{id}/files/{hash}?token=T: the files of a
// COPY step, a tar (gzipped or not), with the token fileLink gave.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, name, hash string) error {
	token := r.URL.Query().Get("token")
	h.builds.mu.Lock()
	var b *pendingBuild
	for _, c := range h.builds.builds {
		if got, ok := c.uploads[token]; ok && got == hash && c.name == name {
			b = c
		}
	}
	room := int64(maxPendingFiles) - h.builds.bytes
	if b != nil {
		used := 0
		for _, f := range b.files {
			used += len(f)
		}
		room = min(room, int64(api.MaxTemplateContext-used))
	}
	h.builds.mu.Unlock()
	if b == nil || token == "" {
		return errorf(http.StatusForbidden, "no upload of these files was asked for with this token")
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, room+1))
	if err != nil {
		return errorf(http.StatusBadRequest, "read the upload: %v", err)
	}
	if int64(len(data)) > room {
		return errorf(http.StatusRequestEntityTooLarge, "a build's files are at most %d MiB (%d MiB on the server at once)", api.MaxTemplateContext>>20, maxPendingFiles>>20)
	}
	h.builds.mu.Lock()
	defer h.builds.mu.Unlock()
	if old, ok := b.files[hash]; ok {
		h.builds.bytes -= int64(len(old))
	}
	b.files[hash] = data
	h.builds.bytes += int64(len(data))
	delete(b.uploads, token)
	w.WriteHeader(http.StatusOK)
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
	h.builds.mu.Lock()
	if b.building {
		h.builds.mu.Unlock()
		return errorf(http.StatusConflict, "build %s was started already", id)
	}
	b.building = true
	files := b.files
	h.builds.mu.Unlock()
	steps, tarball, err := translate(t, files)
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
// one, then the steps' (the spec's body, translate's) on it.
func (h *Handler) runBuild(r *http.Request, b *pendingBuild, name string, t e2bTemplate, steps string, tarball []byte) {
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
	req := api.CreateTemplateRequest{Name: name, Spec: "from: " + from + "\n" + steps, Context: tarball, Background: true}
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

// translate turns E2B's template into the body of a warren build spec (its
// steps and start, the from line left to the caller), and the files its
// COPY steps name into one context tar. An image's template with no steps
// has no body ("").
func translate(t e2bTemplate, files map[string][]byte) (string, []byte, error) {
	switch {
	case t.FromTemplate != "" && t.FromImage != "":
		return "", nil, errorf(http.StatusBadRequest, "a template is from a template or from an image, not both")
	case t.FromTemplate == "" && t.FromImage == "":
		return "", nil, errorf(http.StatusBadRequest, "a template needs fromTemplate or fromImage")
	case t.FromImage != "" && len(t.Steps) == 0:
		return "", nil, nil
	}
	var steps []map[string]any
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	seen := map[string]bool{}
	user := ""
	for i, s := range t.Steps {
		bad := func(format string, args ...any) error {
			return errorf(http.StatusBadRequest, "step %d (%s): %s", i+1, s.Type, fmt.Sprintf(format, args...))
		}
		switch s.Type {
		case "RUN":
			if len(s.Args) < 1 || len(s.Args) > 2 {
				return "", nil, bad("want a command and an optional user")
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
				return "", nil, bad("want a source and a destination")
			}
			data, ok := files[s.FilesHash]
			if !ok {
				return "", nil, bad("its files (hash %s) were not uploaded", s.FilesHash)
			}
			if err := addTar(tw, data, seen); err != nil {
				return "", nil, bad("its files: %v", err)
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
				return "", nil, bad("want names and values")
			}
			env := map[string]string{}
			for j := 0; j < len(s.Args); j += 2 {
				env[s.Args[j]] = s.Args[j+1]
			}
			steps = append(steps, map[string]any{"env": env})
		case "WORKDIR":
			if len(s.Args) != 1 {
				return "", nil, bad("want a directory")
			}
			steps = append(steps, map[string]any{"workdir": s.Args[0]})
		case "USER":
			if len(s.Args) != 1 {
				return "", nil, bad("want a user")
			}
			user = s.Args[0]
			steps = append(steps, map[string]any{"user": user})
		default:
			return "", nil, bad("warren's builds have no such step")
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
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
		return "", nil, err
	}
	if len(seen) == 0 {
		return string(body), nil, nil
	}
	return string(body), ctxTar.Bytes(), nil
}

// addTar copies the entries of data, a tar (gzipped or not), into tw,
// each name once.
func addTar(tw *tar.Writer, data []byte, seen map[string]bool) error {
	var rd io.Reader = bytes.NewReader(data)
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return err
		}
		rd = io.LimitReader(zr, api.MaxTemplateContext+1)
	}
	tr := tar.NewReader(rd)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if seen[h.Name] {
			continue
		}
		seen[h.Name] = true
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
