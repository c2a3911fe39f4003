package api

import (
	"time"
)

// Template is one template as the API shows it: a built-in one (Shared,
// no version: every tenant's), or a version of one of the tenant's own
// (docs/TEMPLATES.md).
type Template struct {
	Name string `json:"name"`
	// Version counts the builds of a tenant's template from 1; Ref is
	// NAME@VERSION, what pins it (NAME alone for a built-in one).
	Version int64  `json:"version,omitempty"`
	Ref     string `json:"ref"`
	Shared  bool   `json:"shared"`
	// State of a tenant's version: building, ready or failed (Error says
	// why, naming the step).
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	// Source says what it was made from: "spec", "image REF",
	// "snapshot ID"; Digest names its content; Snapshot is its disk.
	Source    string          `json:"source,omitempty"`
	Digest    string          `json:"digest,omitempty"`
	Snapshot  string          `json:"snapshot,omitempty"`
	Config    *TemplateConfig `json:"config,omitempty"`
	SizeBytes int64           `json:"size_bytes"` // apparent size of the disk image
	UsedBytes int64           `json:"used_bytes"` // bytes the image really occupies
	CreatedAt *time.Time      `json:"created_at,omitempty"`
	BuiltAt   time.Time       `json:"built_at"`
}

// Template version states.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// TemplateConfig is what a template's sandboxes start with: env under
// their own, a process's default working directory and user, and a
// service started in each, which a create waits for until Ready succeeds.
type TemplateConfig struct {
	Env                 map[string]string `json:"env,omitempty"`
	Workdir             string            `json:"workdir,omitempty"`
	User                string            `json:"user,omitempty"`
	Start               string            `json:"start,omitempty"`
	Ready               string            `json:"ready,omitempty"`
	ReadyTimeoutSeconds int64             `json:"ready_timeout_seconds,omitempty"`
}

// CreateTemplateRequest is the body of POST /v1/templates: a new version of
// the tenant's template Name, made from exactly one of a snapshot, an OCI
// image or a build spec.
type CreateTemplateRequest struct {
	Name string `json:"name"`
	// FromSnapshot promotes one of the tenant's durable snapshots.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// FromImage imports an OCI image.
	FromImage *ImageSource `json:"from_image,omitempty"`
	// Spec is a build spec: warren's YAML, or a Dockerfile when SpecFormat
	// is "dockerfile". Context is the build context its copy steps read,
	// a tar (base64 in JSON), at most MaxTemplateContext bytes.
	Spec       string `json:"spec,omitempty"`
	SpecFormat string `json:"spec_format,omitempty"`
	Context    []byte `json:"context,omitempty"`
	// Config, for a snapshot or an image, sets what the spec's env,
	// workdir, user and start would (an image's own config is under it).
	Config *TemplateConfig `json:"config,omitempty"`
	// Background answers 202 with the version, building, at once; GET
	// /v1/templates/NAME@VERSION follows it. Otherwise the answer is the
	// build's ndjson stream of TemplateBuildEvent.
	Background bool `json:"background,omitempty"`
}

// ShareTemplateRequest is the body of PUT /v1/templates/{ref}/shared (admin
// key only): the admin's version ref is published to every tenant, or
// withdrawn.
type ShareTemplateRequest struct {
	Shared bool `json:"shared"`
}

// MaxTemplateContext bounds a build's context.
const MaxTemplateContext = 64 << 20

// MaxReadyTimeout bounds a template config's ready_timeout_seconds: how
// long a create waits for the template's start command to be ready.
const MaxReadyTimeout = 10 * time.Minute

// ImageSource names an OCI image: a registry reference, pulled by the
// node. Insecure allows plain HTTP to the registry.
type ImageSource struct {
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// TemplateBuildEvent is one line of the stream answering a build
// (POST /v1/templates, POST /v1/templates/{name}/build): progress lines,
// each naming the step it is of, then the template or an error.
type TemplateBuildEvent struct {
	Step     string    `json:"step,omitempty"`
	Progress string    `json:"progress,omitempty"`
	Template *Template `json:"template,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// TemplateList is the answer to GET /v1/templates, by name.
type TemplateList struct {
	Templates     []Template `json:"templates"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}
