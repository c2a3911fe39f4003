// Package tenanttpl keeps tenants' own templates (docs/TEMPLATES.md):
// it builds their versions (from a snapshot, an OCI image or a build
// spec), lists, publishes and deletes them, and implements the API
// server's Templates. It is a client of the node's sandbox manager, not a
// part of it: a build drives the manager through Sandboxes (a sandbox to
// run a spec's steps in, its snapshots, its agent), and a create from a
// template is the manager's own (a restore of the version's snapshot).
//
// A version is a snapshot of the tenant's, with its config written into
// the disk (guest.TemplateFile): a create from it is a restore, so it
// starts the same on any node, and the snapshots of its sandboxes are
// stored against it. A version never changes; a rebuild is a new version,
// and a sandbox keeps the one it started from.
package tenanttpl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/guest"
	"warren/internal/ident"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
)

// Sandboxes is what a build does with the node's sandboxes
// (sandbox.Manager). Errors meant for the caller are *api.Error, with
// CodeNotFound for a sandbox or template that is not tenant's. Its
// methods may be called concurrently.
type Sandboxes interface {
	// Create starts a sandbox of tenant's from a built-in template.
	Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (api.Sandbox, error)
	// RestoreVersion starts one sandbox of tenant's from snapshot, the
	// disk of a version of owner's ("": tenant's own).
	RestoreVersion(ctx context.Context, tenant, owner, snapshot string, spec api.SandboxSpec) (api.Sandbox, error)
	// Get returns tenant's sandbox id.
	Get(ctx context.Context, tenant, id string) (api.Sandbox, error)
	// Agent is a connection to the agent of tenant's running sandbox id.
	Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error)
	// Snapshot snapshots tenant's sandbox id.
	Snapshot(ctx context.Context, tenant, id string, req api.CreateSnapshotRequest) (api.Snapshot, error)
	// Delete deletes tenant's sandbox id; a second delete is not an error.
	Delete(ctx context.Context, tenant, id string) error
	// TemplateVersion returns the ready version of tenant's template ref
	// that a create from ref starts from.
	TemplateVersion(ctx context.Context, tenant, ref string) (store.TemplateVersion, error)
	// CheckDiskFree refuses (507, naming what) when the node's disk is at
	// its reserve.
	CheckDiskFree(what string) error
	// HoldScratch holds n bytes of the node's free disk for scratch files,
	// until release; 507, naming what, past the node's reserve.
	HoldScratch(n int64, what string) (release func(), err error)
}

// Deps are what the templates need of the node.
type Deps struct {
	Log *slog.Logger
	// Store keeps the versions, Snapshots their disks, Catalog the node's
	// built-in templates (a build's base).
	Store     *store.Store
	Snapshots *snapshot.Engine
	Catalog   *template.Catalog
	Sandboxes Sandboxes
	// Dir is the disk pool's directory, on whose filesystem a build's
	// scratch files go (never a tmpfs).
	Dir string
	// NodeID names this node: the versions it builds carry it.
	NodeID string
}

// Config is what the operator sets.
type Config struct {
	// DefaultTemplate is the node's default template, whose name no
	// tenant's template may take.
	DefaultTemplate string
	// RegistryAllow are the registries (HOST or HOST:PORT) a template's
	// image may come from although they are not at a public address.
	RegistryAllow []string
}

// Templates keeps tenants' templates on a node. It is safe for concurrent
// use.
type Templates struct {
	log  *slog.Logger
	deps Deps
	cfg  Config

	// base is the context of background builds, ended by Close; builds
	// are the background builds running.
	base   context.Context
	stop   context.CancelFunc
	builds sync.WaitGroup
	// builders bounds the builds running (build.go).
	builders builders
}

// New returns the templates of the node, once the versions it was
// building when its last process ended are failed.
func New(ctx context.Context, deps Deps, cfg Config) (*Templates, error) {
	if err := deps.Store.FailTemplateBuilds(ctx, deps.NodeID); err != nil {
		return nil, err
	}
	base, stop := context.WithCancel(context.Background())
	return &Templates{log: deps.Log, deps: deps, cfg: cfg, base: base, stop: stop}, nil
}

// Close ends the background builds and waits for them.
func (tt *Templates) Close() {
	tt.stop()
	tt.builds.Wait()
}

// parseRef is template.ParseRef, its error the API's.
func parseRef(ref string) (name string, version int64, err error) {
	name, version, err = template.ParseRef(ref)
	if err != nil {
		return "", 0, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return name, version, nil
}

// builtIn reports whether name is a template of the node's catalog (or a
// recipe one), whose name no tenant may take.
func (tt *Templates) builtIn(name string) bool {
	if _, err := tt.deps.Catalog.Get(name); err == nil {
		return true
	}
	return name == tt.cfg.DefaultTemplate || template.IsRecipe(name)
}

// TenantTemplates lists tenant's templates: the newest version of each
// name, and the admin's published ones the tenant has no name of its own
// for, by name.
func (tt *Templates) TenantTemplates(ctx context.Context, tenant string) ([]api.Template, error) {
	tvs, err := tt.deps.Store.TemplateVersions(ctx, tenant, "")
	if err != nil {
		return nil, err
	}
	out := make([]api.Template, 0, len(tvs))
	own := map[string]bool{}
	for _, tv := range tvs {
		out = append(out, tt.templateView(ctx, tv))
		own[tv.Name] = true
	}
	if tenant == api.AdminTenant {
		return out, nil
	}
	shared, err := tt.deps.Store.PublishedTemplates(ctx, api.AdminTenant)
	if err != nil {
		return nil, err
	}
	for _, tv := range shared {
		if !own[tv.Name] {
			out = append(out, tt.templateView(ctx, tv))
		}
	}
	slices.SortFunc(out, func(a, b api.Template) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ShareTemplate publishes the admin's version ref (NAME@VERSION) to
// every tenant, or withdraws it: a tenant's own template of the name
// still comes first for it.
func (tt *Templates) ShareTemplate(ctx context.Context, ref string, shared bool) (api.Template, error) {
	name, version, err := parseRef(ref)
	if err != nil {
		return api.Template{}, err
	}
	if version == 0 {
		return api.Template{}, api.Errorf(api.CodeBadRequest, "template %q: publish a version, NAME@VERSION", ref)
	}
	tv, err := tt.deps.Store.TemplateVersion(ctx, api.AdminTenant, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	if err != nil {
		return api.Template{}, err
	}
	if err := tt.deps.Store.PublishTemplateVersion(ctx, api.AdminTenant, tv.ID, shared); errors.Is(err, store.ErrTransition) {
		return api.Template{}, api.Errorf(api.CodeConflict, "template %s is %s: only a ready version is published", ref, tv.State)
	} else if err != nil {
		return api.Template{}, err
	}
	tv.Published = shared
	return tt.templateView(ctx, tv), nil
}

// TenantTemplate returns the version of tenant's template ref names: the
// newest (whatever its state) or the pinned one.
func (tt *Templates) TenantTemplate(ctx context.Context, tenant, ref string) (api.Template, error) {
	name, version, err := parseRef(ref)
	if err != nil {
		return api.Template{}, err
	}
	tv, err := tt.deps.Store.SeenTemplate(ctx, tenant, name, version, true)
	if errors.Is(err, store.ErrNotFound) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	if err != nil {
		return api.Template{}, err
	}
	return tt.templateView(ctx, tv), nil
}

// TemplateVersions lists the versions of tenant's template name, newest
// first.
func (tt *Templates) TemplateVersions(ctx context.Context, tenant, name string) ([]api.Template, error) {
	if _, _, err := parseRef(name); err != nil || strings.Contains(name, "@") {
		return nil, api.Errorf(api.CodeBadRequest, "template name %q: want NAME", name)
	}
	tvs, err := tt.deps.Store.TemplateVersions(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if len(tvs) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "template %q not found", name)
	}
	out := make([]api.Template, 0, len(tvs))
	for _, tv := range tvs {
		out = append(out, tt.templateView(ctx, tv))
	}
	return out, nil
}

func (tt *Templates) templateView(ctx context.Context, tv store.TemplateVersion) api.Template {
	t := api.Template{
		Name: tv.Name, Version: tv.Version, Ref: fmt.Sprintf("%s@%d", tv.Name, tv.Version),
		State: tv.State, Error: tv.Error, Source: tv.Source, Digest: tv.Digest, Snapshot: tv.Snapshot,
		BuiltAt: tv.BuiltAt, Shared: tv.Published,
	}
	created := tv.CreatedAt
	t.CreatedAt = &created
	if cfg, err := tv.TemplateConfig(); err == nil && !emptyConfig(cfg) {
		t.Config = &cfg
	}
	if tv.Snapshot != "" {
		if sn, err := tt.deps.Store.GetSnapshot(ctx, tv.Snapshot); err == nil {
			t.SizeBytes = sn.DiskBytes
		}
	}
	return t
}

func emptyConfig(c api.TemplateConfig) bool {
	return len(c.Env) == 0 && c.Workdir == "" && c.User == "" && c.Start == "" && c.Ready == ""
}

// DeleteTemplate deletes the version of tenant's template ref pins, or
// every version of the name; a version a live sandbox started from stays
// (409), as does one still building. Its snapshot goes with it: the
// sandboxes and snapshots made from it keep the layers they need, and the
// collector reclaims the rest.
func (tt *Templates) DeleteTemplate(ctx context.Context, tenant, ref string) error {
	name, version, err := parseRef(ref)
	if err != nil {
		return err
	}
	var tvs []store.TemplateVersion
	if version != 0 {
		tv, err := tt.deps.Store.TemplateVersion(ctx, tenant, name, version)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			tvs = append(tvs, tv)
		}
	} else if tvs, err = tt.deps.Store.TemplateVersions(ctx, tenant, name); err != nil {
		return err
	}
	if len(tvs) == 0 {
		return api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	for _, tv := range tvs {
		r := fmt.Sprintf("%s@%d", tv.Name, tv.Version)
		if tv.State == store.TemplateBuilding {
			return api.Errorf(api.CodeConflict, "template %s is still building", r)
		}
		id, err := tt.deps.Store.TemplateInUse(ctx, tenant, r)
		if err != nil {
			return err
		}
		if id != "" {
			return api.Errorf(api.CodeConflict, "template %s is in use by sandbox %s", r, id)
		}
	}
	for _, tv := range tvs {
		if err := tt.deps.Store.DeleteTemplateVersion(ctx, tenant, tv.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if tv.Snapshot == "" || tv.Source == "snapshot "+tv.Snapshot {
			continue // none, or the tenant's own, promoted: it stays theirs
		}
		if use, err := tt.deps.Store.TemplateSnapshotUse(ctx, tv.Snapshot); err != nil || use != "" {
			continue // another version, or a cached step, keeps it
		}
		if err := tt.deps.Snapshots.Delete(ctx, tenant, tv.Snapshot); err != nil && !api.IsCode(err, api.CodeNotFound) {
			tt.log.Warn("delete template version's snapshot", "template", tv.Name, "version", tv.Version, "snapshot", tv.Snapshot, "err", err)
		}
	}
	return nil
}

// newVersion records a building version of tenant's template name (a
// valid name no built-in template has), made by this node from source.
func (tt *Templates) newVersion(ctx context.Context, tenant, name, source string) (store.TemplateVersion, error) {
	tv := store.TemplateVersion{ID: ident.New("tv-"), Tenant: tenant, Name: name, Source: source, Node: tt.deps.NodeID}
	if err := tt.deps.Store.InsertTemplateVersion(ctx, &tv); err != nil {
		return store.TemplateVersion{}, err
	}
	return tv, nil
}

// agentConfig is the file a version's disk carries for the agent.
func agentConfig(c api.TemplateConfig) ([]byte, error) {
	b, err := json.Marshal(guest.TemplateConfig{Env: c.Env, Workdir: c.Workdir, User: c.User, Start: c.Start})
	if err != nil {
		return nil, err
	}
	if _, err := guest.ParseTemplateConfig(b); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "config: %v", err)
	}
	return b, nil
}
