package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"warren/api"
)

// Templates keeps tenants' own templates (docs/TEMPLATES.md). Errors are
// as Sandboxes's: CodeNotFound for another tenant's.
type Templates interface {
	// TenantTemplates lists tenant's templates, the newest version of each
	// name, by name.
	TenantTemplates(ctx context.Context, tenant string) ([]api.Template, error)
	// TenantTemplate returns the version of tenant's template ref
	// (NAME@VERSION, or NAME for the newest).
	TenantTemplate(ctx context.Context, tenant, ref string) (api.Template, error)
	// TemplateVersions lists the versions of tenant's template name,
	// newest first.
	TemplateVersions(ctx context.Context, tenant, name string) ([]api.Template, error)
	// CreateTemplate makes a version of tenant's template req.Name,
	// calling progress with the build's events until it returns (none for
	// a background build, which it returns building). A build that failed
	// returns the version, failed, and a CodeBuildFailed error.
	CreateTemplate(ctx context.Context, tenant string, req api.CreateTemplateRequest, progress func(api.TemplateBuildEvent)) (api.Template, error)
	// CreateTemplateFromArchive makes a version of tenant's template name
	// from an image archive read from body, as CreateTemplate does.
	CreateTemplateFromArchive(ctx context.Context, tenant, name string, body io.Reader, progress func(api.TemplateBuildEvent)) (api.Template, error)
	// DeleteTemplate deletes the version ref pins, or every version of
	// the name; CodeConflict while a live sandbox started from one.
	DeleteTemplate(ctx context.Context, tenant, ref string) error
	// ShareTemplate publishes the admin's version ref to every tenant, or
	// withdraws it.
	ShareTemplate(ctx context.Context, ref string, shared bool) (api.Template, error)
}

// builtIn is the node's templates as the API shows them: every tenant's.
func (s *Server) builtIn(ctx context.Context) ([]api.Template, error) {
	list, err := s.node.Templates(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Ref, list[i].Shared = list[i].Name, true
	}
	return list, nil
}

// listTemplates answers GET /v1/templates: the built-in templates and the
// caller's own, by name. A node has few built-in templates and a tenant
// few names: they are paged from the whole list.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	lr, err := parseList(r, "templates", "", api.DefaultListLimit, api.MaxListLimit, nil)
	if err != nil {
		return err
	}
	list, err := s.builtIn(r.Context())
	if err != nil {
		return err
	}
	if s.opts.Templates != nil {
		own, err := s.opts.Templates.TenantTemplates(r.Context(), caller(r).Tenant)
		if err != nil {
			return err
		}
		list = append(list, own...)
	}
	slices.SortFunc(list, func(a, b api.Template) int { return strings.Compare(a.Name, b.Name) })
	if lr.after != nil {
		list = slices.DeleteFunc(list, func(t api.Template) bool { return t.Name <= lr.after.Key })
	}
	var out api.TemplateList
	out.Templates, out.NextPageToken = page(lr, list[:min(len(list), lr.limit+1)], func(t api.Template) pageToken { return pageToken{Key: t.Name} })
	return writeJSON(w, http.StatusOK, out)
}

// templates returns s.opts.Templates, or the answer of a server that keeps
// none.
func (s *Server) templates() (Templates, error) {
	if s.opts.Templates == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server keeps no tenants' templates")
	}
	return s.opts.Templates, nil
}

// getTemplate answers GET /v1/templates/{ref}: a built-in template, or a
// version of the caller's.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("ref")
	if !strings.Contains(ref, "@") {
		list, err := s.builtIn(r.Context())
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(list, func(t api.Template) bool { return t.Name == ref }); i >= 0 {
			return writeJSON(w, http.StatusOK, list[i])
		}
	}
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	t, err := tpls.TenantTemplate(r.Context(), caller(r).Tenant, ref)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// templateVersions answers GET /v1/templates/{ref}/versions.
func (s *Server) templateVersions(w http.ResponseWriter, r *http.Request) error {
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	list, err := tpls.TemplateVersions(r.Context(), caller(r).Tenant, r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.TemplateList{Templates: list})
}

// deleteTemplate answers DELETE /v1/templates/{ref}.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	if err := tpls.DeleteTemplate(r.Context(), caller(r).Tenant, r.PathValue("ref")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// shareTemplate answers PUT /v1/templates/{ref}/shared (admin key only).
func (s *Server) shareTemplate(w http.ResponseWriter, r *http.Request) error {
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	var req api.ShareTemplateRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	t, err := tpls.ShareTemplate(r.Context(), r.PathValue("ref"), req.Shared)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// maxTemplateBody bounds POST /v1/templates: the context, base64, and the
// rest of the request.
const maxTemplateBody = api.MaxTemplateContext/3*4 + 8<<20

// createTemplate answers POST /v1/templates: 202 with the version building
// for a background build, else the build's ndjson stream of
// TemplateBuildEvent, ending with the template or the error. A request
// refused before the build began is a plain error answer.
func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) error {
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	tenant := caller(r).Tenant
	if r.ContentLength < 0 || r.ContentLength > largeTemplateBody {
		release, err := s.largeTemplateTurn(r, tenant)
		if err != nil {
			return err
		}
		defer release()
	}
	var req api.CreateTemplateRequest
	if err := s.decodeJSONUpTo(w, r, &req, false, maxTemplateBody); err != nil {
		return err
	}
	if req.Background {
		t, err := tpls.CreateTemplate(r.Context(), tenant, req, nil)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusAccepted, t)
	}
	nd := newNDJSON(w)
	t, err := tpls.CreateTemplate(r.Context(), tenant, req, func(ev api.TemplateBuildEvent) { nd.send(ev) })
	return s.endBuild(r, nd, t, err, req.Name)
}

// largeTemplateTurn waits for a turn to read and build a template request
// with a large body (Limits.LargeTemplatesOnNode), behind tenant's own
// earlier ones, so that the contexts held in memory are bounded on the
// node however many are sent at once, and each tenant holds one turn at
// most while it waits.
func (s *Server) largeTemplateTurn(r *http.Request, tenant string) (release func(), err error) {
	mine, err := s.largeTemplateTenants.wait(r.Context(), tenant)
	if err != nil {
		return nil, api.Errorf(api.CodeTimeout, "gave up waiting for a turn to build: %v", err)
	}
	select {
	case s.largeTemplates <- struct{}{}:
		return func() { <-s.largeTemplates; mine() }, nil
	case <-r.Context().Done():
		mine()
		return nil, api.Errorf(api.CodeTimeout, "gave up waiting for a turn to build: %v", r.Context().Err())
	}
}

// importArchive answers POST /v1/templates/{ref}/image: a version of the
// caller's template from the image archive that is the body (a docker save
// tarball, or an OCI layout tar), with the build's ndjson stream.
func (s *Server) importArchive(w http.ResponseWriter, r *http.Request) error {
	tpls, err := s.templates()
	if err != nil {
		return err
	}
	name := r.PathValue("ref")
	nd := newNDJSON(w)
	t, err := tpls.CreateTemplateFromArchive(r.Context(), caller(r).Tenant, name, r.Body,
		func(ev api.TemplateBuildEvent) { nd.send(ev) })
	return s.endBuild(r, nd, t, err, name)
}

// endBuild sends the last event of a build's stream: the template, or the
// error (a refusal before the stream began is a plain error answer).
func (s *Server) endBuild(r *http.Request, nd *ndjson, t api.Template, err error, name string) error {
	if err == nil {
		return nd.send(api.TemplateBuildEvent{Template: &t})
	}
	var ae *api.Error
	if !nd.began() && errors.As(err, &ae) && ae.Status() != http.StatusInternalServerError && ae.Code != api.CodeBuildFailed {
		return err
	}
	msg := "internal error"
	if errors.As(err, &ae) && ae.Status() != http.StatusInternalServerError {
		msg = ae.Message
	} else {
		level := slog.LevelError
		if r.Context().Err() != nil {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "build template", "request_id", requestID(r.Context()), "template", name, "err", err)
	}
	ev := api.TemplateBuildEvent{Error: msg}
	if t.Ref != "" {
		ev.Template = &t
	}
	return nd.send(ev)
}

// buildTemplate answers POST /v1/templates/{ref}/build, an admin's build of
// a built-in template from its recipe, with a stream of
// TemplateBuildEvent: one per line of progress, then the template or the
// error. The build runs on the request's context: a caller that leaves
// cancels it.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("ref")
	nd := newNDJSON(w)
	progress := &lineWriter{emit: func(line string) {
		nd.send(api.TemplateBuildEvent{Progress: line})
	}}
	t, err := s.node.BuildTemplate(r.Context(), name, progress)
	progress.close()
	if err == nil {
		t.Ref, t.Shared = t.Name, true
	}
	return s.endBuild(r, nd, t, err, name)
}
