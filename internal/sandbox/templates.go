package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/internal/agent"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/backoff"
	"warren/internal/ident"
	"warren/internal/store"
	"warren/internal/template"
)

// Tenants' templates (docs/TEMPLATES.md). A version is a snapshot of the
// tenant's, with its config written into the disk (agent.TemplateFile): a
// create from it is a restore, so it starts the same on any node, and the
// snapshots of its sandboxes are stored against it. A version never
// changes; a rebuild is a new version, and a sandbox keeps the one it
// started from.

// maxReadyTimeout bounds how long a create waits for a template's start
// command to be ready.
const maxReadyTimeout = 10 * time.Minute

// templateRef splits NAME[@VERSION]; version is 0 for the newest.
func templateRef(ref string) (name string, version int64, err error) {
	name, v, pinned := strings.Cut(ref, "@")
	if err := template.ValidName(name); err != nil {
		return "", 0, api.Errorf(api.CodeBadRequest, "template: %v", err)
	}
	if pinned {
		version, err = strconv.ParseInt(v, 10, 64)
		if err != nil || version < 1 {
			return "", 0, api.Errorf(api.CodeBadRequest, "template %q: the version after @ must be a positive integer", ref)
		}
	}
	return name, version, nil
}

// tenantTemplate returns tenant's version that ref names: its newest
// ready one, or the pinned one, which must be ready.
func (m *Manager) tenantTemplate(ctx context.Context, tenant, ref string) (store.TemplateVersion, error) {
	name, version, err := templateRef(ref)
	if err != nil {
		return store.TemplateVersion{}, err
	}
	tv, err := m.deps.Store.TemplateVersion(ctx, tenant, name, version)
	tv, err = m.orPublished(ctx, tenant, ref, name, version, tv, err)
	if err != nil {
		return store.TemplateVersion{}, err
	}
	if tv.State != store.TemplateReady {
		return store.TemplateVersion{}, api.Errorf(api.CodeConflict, "template %s@%d is %s%s", tv.Name, tv.Version, tv.State, suffix(": ", tv.Error))
	}
	return tv, nil
}

// orPublished is tv, err of a lookup of tenant's own version of name,
// or, when it found none, the version the admin published under that
// name; a not-found of both is the API's 404 for ref.
func (m *Manager) orPublished(ctx context.Context, tenant, ref, name string, version int64, tv store.TemplateVersion, err error) (store.TemplateVersion, error) {
	if errors.Is(err, store.ErrNotFound) && tenant != api.AdminTenant {
		tv, err = m.deps.Store.PublishedTemplate(ctx, api.AdminTenant, name, version)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.TemplateVersion{}, api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	return tv, err
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// builtIn reports whether name is a template of the node's catalog (or a
// recipe one), whose name no tenant may take.
func (m *Manager) builtIn(name string) bool {
	if _, err := m.deps.Templates.Get(name); err == nil {
		return true
	}
	return name == m.cfg.DefaultTemplate || template.IsRecipe(name)
}

// createFromTemplate is Create for one of the tenant's templates: a
// restore of its version's snapshot, then, when the template starts a
// service, a wait until its readiness check succeeds.
func (m *Manager) createFromTemplate(ctx context.Context, tenant string, req api.CreateSandboxRequest, tv store.TemplateVersion) (api.Sandbox, error) {
	cfg, err := templateConfig(tv)
	if err != nil {
		return api.Sandbox{}, err
	}
	ref := fmt.Sprintf("%s@%d", tv.Name, tv.Version)
	out, err := m.restore(ctx, tenant, tv.Snapshot, api.RestoreRequest{Count: 1, SandboxSpec: req.SandboxSpec}, heldMachine{},
		fromVersion{ref: ref, owner: tv.Tenant})
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := out[0]
	if cfg.Ready == "" {
		return sb, nil
	}
	if err := m.waitReady(ctx, tenant, sb.ID, cfg); err != nil {
		m.Delete(context.WithoutCancel(ctx), tenant, sb.ID)
		return api.Sandbox{}, api.Errorf(api.CodeUnavailable, "template %s: %v", ref, err)
	}
	return sb, nil
}

func templateConfig(tv store.TemplateVersion) (api.TemplateConfig, error) {
	var cfg api.TemplateConfig
	if tv.Config == "" {
		return cfg, nil
	}
	if err := json.Unmarshal([]byte(tv.Config), &cfg); err != nil {
		return cfg, fmt.Errorf("template %s@%d: config: %w", tv.Name, tv.Version, err)
	}
	return cfg, nil
}

// waitReady runs the template's readiness check in the sandbox until it
// exits 0, or its timeout passes (then the error has its last output).
func (m *Manager) waitReady(ctx context.Context, tenant, id string, cfg api.TemplateConfig) error {
	timeout := time.Duration(cfg.ReadyTimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, maxReadyTimeout))
	defer cancel()
	conn, err := m.Agent(ctx, tenant, id)
	if err != nil {
		return err
	}
	ready := &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cfg.Ready}}
	last := "" // what the last check that ran said
	err = backoff.Poll(ctx, backoff.Backoff{Base: 20 * time.Millisecond, Max: time.Second}, func() (bool, error) {
		err := runIn(ctx, conn, ready, nil)
		if err != nil && ctx.Err() == nil {
			last = err.Error()
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("its readiness check %q did not succeed within %v%s", cfg.Ready, timeout, suffix("; last: ", last))
	}
	return nil
}

// TenantTemplates lists tenant's templates: the newest version of each
// name, and the admin's published ones the tenant has no name of its own
// for, by name.
func (m *Manager) TenantTemplates(ctx context.Context, tenant string) ([]api.Template, error) {
	tvs, err := m.deps.Store.TemplateVersions(ctx, tenant, "")
	if err != nil {
		return nil, err
	}
	out := make([]api.Template, 0, len(tvs))
	own := map[string]bool{}
	for _, tv := range tvs {
		out = append(out, m.templateView(ctx, tv))
		own[tv.Name] = true
	}
	if tenant == api.AdminTenant {
		return out, nil
	}
	shared, err := m.deps.Store.PublishedTemplates(ctx, api.AdminTenant)
	if err != nil {
		return nil, err
	}
	for _, tv := range shared {
		if !own[tv.Name] {
			out = append(out, m.templateView(ctx, tv))
		}
	}
	slices.SortFunc(out, func(a, b api.Template) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ShareTemplate publishes the admin's version ref (NAME@VERSION) to
// every tenant, or withdraws it: a tenant's own template of the name
// still comes first for it.
func (m *Manager) ShareTemplate(ctx context.Context, ref string, shared bool) (api.Template, error) {
	name, version, err := templateRef(ref)
	if err != nil {
		return api.Template{}, err
	}
	if version == 0 {
		return api.Template{}, api.Errorf(api.CodeBadRequest, "template %q: publish a version, NAME@VERSION", ref)
	}
	tv, err := m.deps.Store.TemplateVersion(ctx, api.AdminTenant, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	if err != nil {
		return api.Template{}, err
	}
	if err := m.deps.Store.PublishTemplateVersion(ctx, api.AdminTenant, tv.ID, shared); errors.Is(err, store.ErrTransition) {
		return api.Template{}, api.Errorf(api.CodeConflict, "template %s is %s: only a ready version is published", ref, tv.State)
	} else if err != nil {
		return api.Template{}, err
	}
	tv.Published = shared
	return m.templateView(ctx, tv), nil
}

// TenantTemplate returns the version of tenant's template ref names: the
// newest (whatever its state) or the pinned one.
func (m *Manager) TenantTemplate(ctx context.Context, tenant, ref string) (api.Template, error) {
	name, version, err := templateRef(ref)
	if err != nil {
		return api.Template{}, err
	}
	var tv store.TemplateVersion
	if version == 0 {
		// The newest, whatever its state.
		var all []store.TemplateVersion
		if all, err = m.deps.Store.TemplateVersions(ctx, tenant, name); err == nil {
			err = store.ErrNotFound
			if len(all) > 0 {
				tv, err = all[0], nil
			}
		}
	} else {
		tv, err = m.deps.Store.TemplateVersion(ctx, tenant, name, version)
	}
	if tv, err = m.orPublished(ctx, tenant, ref, name, version, tv, err); err != nil {
		return api.Template{}, err
	}
	return m.templateView(ctx, tv), nil
}

// TemplateVersions lists the versions of tenant's template name, newest
// first.
func (m *Manager) TemplateVersions(ctx context.Context, tenant, name string) ([]api.Template, error) {
	if _, _, err := templateRef(name); err != nil || strings.Contains(name, "@") {
		return nil, api.Errorf(api.CodeBadRequest, "template name %q: want NAME", name)
	}
	tvs, err := m.deps.Store.TemplateVersions(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if len(tvs) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "template %q not found", name)
	}
	out := make([]api.Template, 0, len(tvs))
	for _, tv := range tvs {
		out = append(out, m.templateView(ctx, tv))
	}
	return out, nil
}

func (m *Manager) templateView(ctx context.Context, tv store.TemplateVersion) api.Template {
	t := api.Template{
		Name: tv.Name, Version: tv.Version, Ref: fmt.Sprintf("%s@%d", tv.Name, tv.Version),
		State: tv.State, Error: tv.Error, Source: tv.Source, Digest: tv.Digest, Snapshot: tv.Snapshot,
		BuiltAt: tv.BuiltAt, Shared: tv.Published,
	}
	created := tv.CreatedAt
	t.CreatedAt = &created
	if cfg, err := templateConfig(tv); err == nil && !emptyConfig(cfg) {
		t.Config = &cfg
	}
	if tv.Snapshot != "" {
		if sn, err := m.deps.Store.GetSnapshot(ctx, tv.Snapshot); err == nil {
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
func (m *Manager) DeleteTemplate(ctx context.Context, tenant, ref string) error {
	name, version, err := templateRef(ref)
	if err != nil {
		return err
	}
	var tvs []store.TemplateVersion
	if version != 0 {
		tv, err := m.deps.Store.TemplateVersion(ctx, tenant, name, version)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			tvs = append(tvs, tv)
		}
	} else if tvs, err = m.deps.Store.TemplateVersions(ctx, tenant, name); err != nil {
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
		id, err := m.deps.Store.TemplateInUse(ctx, tenant, r)
		if err != nil {
			return err
		}
		if id != "" {
			return api.Errorf(api.CodeConflict, "template %s is in use by sandbox %s", r, id)
		}
	}
	for _, tv := range tvs {
		if err := m.deps.Store.DeleteTemplateVersion(ctx, tenant, tv.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if tv.Snapshot == "" || tv.Source == "snapshot "+tv.Snapshot {
			continue // none, or the tenant's own, promoted: it stays theirs
		}
		if use, err := m.deps.Store.TemplateSnapshotUse(ctx, tv.Snapshot); err != nil || use != "" {
			continue // another version, or a cached step, keeps it
		}
		if err := m.deps.Snapshots.Delete(ctx, tenant, tv.Snapshot); err != nil && !api.IsCode(err, api.CodeNotFound) {
			m.log.Warn("delete template version's snapshot", "template", tv.Name, "version", tv.Version, "snapshot", tv.Snapshot, "err", err)
		}
	}
	return nil
}

// newVersion records a building version of tenant's template name (a
// valid name no built-in template has), made by this node from source.
func (m *Manager) newVersion(ctx context.Context, tenant, name, source string) (store.TemplateVersion, error) {
	tv := store.TemplateVersion{ID: ident.New("tv-"), Tenant: tenant, Name: name, Source: source, Node: m.deps.NodeID}
	if err := m.deps.Store.InsertTemplateVersion(ctx, &tv); err != nil {
		return store.TemplateVersion{}, err
	}
	return tv, nil
}

// agentConfig is the file a version's disk carries for the agent.
func agentConfig(c api.TemplateConfig) ([]byte, error) {
	b, err := json.Marshal(agent.TemplateConfig{Env: c.Env, Workdir: c.Workdir, User: c.User, Start: c.Start})
	if err != nil {
		return nil, err
	}
	if _, err := agent.ParseTemplateConfig(b); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "config: %v", err)
	}
	return b, nil
}
