package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"warren/api"
)

// BuildTemplate builds (or rebuilds) the built-in template name from its
// recipe (admin key only), writing each progress line to progress (nil
// to drop them), and returns the template once built. The build is not
// retried once sent: it may have begun.
func (c *Client) BuildTemplate(ctx context.Context, name string, progress io.Writer) (*api.Template, error) {
	const op = "build template"
	if name == "" {
		return nil, fmt.Errorf("%s: empty template name", op)
	}
	cl := &call{op: op, method: http.MethodPost, path: "/v1/templates/" + url.PathEscape(name) + "/build", retry: retryRefused}
	return c.buildStream(ctx, cl, progress)
}

// CreateTemplate makes a new version of the caller's template req.Name
// (docs/TEMPLATES.md) and returns it once built, writing each progress
// line to progress (nil to drop them), prefixed with its step. With
// req.Background it returns the version building at once. A build that
// failed is an *api.Error of code build_failed naming the failing step,
// with its output.
func (c *Client) CreateTemplate(ctx context.Context, req api.CreateTemplateRequest, progress io.Writer) (*api.Template, error) {
	const op = "create template"
	cl := &call{op: op, method: http.MethodPost, path: "/v1/templates", in: req, retry: retryRefused}
	if req.Background {
		var t api.Template
		if err := c.do(ctx, cl, &t); err != nil {
			return nil, err
		}
		return &t, nil
	}
	return c.buildStream(ctx, cl, progress)
}

// CreateTemplateFromArchive makes a new version of the caller's template
// name from an image archive read from archive (a docker save tarball, or
// an OCI layout tar), as CreateTemplate does. Sent once: the archive is a
// stream.
func (c *Client) CreateTemplateFromArchive(ctx context.Context, name string, archive io.Reader, progress io.Writer) (*api.Template, error) {
	if name == "" {
		return nil, fmt.Errorf("import template: empty name")
	}
	cl := &call{op: "import template", method: http.MethodPost, path: "/v1/templates/" + url.PathEscape(name) + "/image", body: archive, retry: retryNever}
	return c.buildStream(ctx, cl, progress)
}

// buildStream sends a build's request and reads its ndjson stream of
// TemplateBuildEvent to the end.
func (c *Client) buildStream(ctx context.Context, cl *call, progress io.Writer) (*api.Template, error) {
	resp, err := c.send(ctx, cl)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.TemplateBuildEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%s: read progress: %w", cl.op, err)
		}
		switch {
		case ev.Error != "" && ev.Template != nil && ev.Template.State == api.TemplateFailed:
			return ev.Template, &api.Error{Code: api.CodeBuildFailed, Message: ev.Error}
		case ev.Error != "":
			return nil, fmt.Errorf("%s: %s", cl.op, ev.Error)
		case ev.Template != nil:
			return ev.Template, nil
		case ev.Progress != "" && progress != nil:
			line := strings.TrimRight(ev.Progress, "\n")
			if ev.Step != "" {
				line = "[" + ev.Step + "] " + line
			}
			if _, err := io.WriteString(progress, line+"\n"); err != nil {
				return nil, fmt.Errorf("%s: write progress: %w", cl.op, err)
			}
		}
	}
}

// GetTemplate returns a built-in template, or a version of the caller's:
// ref is NAME (the newest) or NAME@VERSION.
func (c *Client) GetTemplate(ctx context.Context, ref string) (*api.Template, error) {
	if ref == "" {
		return nil, fmt.Errorf("get template: empty reference")
	}
	var t api.Template
	if err := c.do(ctx, &call{op: "get template", method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(ref)}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// TemplateVersions lists the versions of the caller's template name,
// newest first.
func (c *Client) TemplateVersions(ctx context.Context, name string) ([]api.Template, error) {
	if name == "" {
		return nil, fmt.Errorf("template versions: empty name")
	}
	var l api.TemplateList
	if err := c.do(ctx, &call{op: "template versions", method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(name) + "/versions"}, &l); err != nil {
		return nil, err
	}
	return l.Templates, nil
}

// DeleteTemplate deletes a version of the caller's template (ref
// NAME@VERSION) or all of them (ref NAME).
func (c *Client) DeleteTemplate(ctx context.Context, ref string) error {
	if ref == "" {
		return fmt.Errorf("delete template: empty reference")
	}
	return c.do(ctx, &call{op: "delete template", method: http.MethodDelete, path: "/v1/templates/" + url.PathEscape(ref)}, nil)
}

// ShareTemplate publishes the admin's template version ref (NAME@VERSION)
// to every tenant, or withdraws it (admin key only).
func (c *Client) ShareTemplate(ctx context.Context, ref string, shared bool) (*api.Template, error) {
	if ref == "" {
		return nil, fmt.Errorf("share template: empty reference")
	}
	var t api.Template
	cl := &call{op: "share template", method: http.MethodPut, path: "/v1/templates/" + url.PathEscape(ref) + "/shared",
		in: api.ShareTemplateRequest{Shared: shared}, retry: retryIdempotent}
	if err := c.do(ctx, cl, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
