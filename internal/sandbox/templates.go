package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/backoff"
	"warren/internal/store"
	"warren/internal/template"
)

// A create from a tenant's template (docs/TEMPLATES.md) is a restore of
// the version's snapshot, whose disk carries the version's config for the
// agent: it starts the same on any node. Building, listing and deleting
// templates is package tenanttpl's, a client of the manager.

// TemplateVersion returns the version of tenant's template ref
// (NAME@VERSION, or NAME for the newest ready one) that a create from ref
// starts from: tenant's own, else the one the admin published under the
// name. CodeNotFound when there is neither, CodeConflict when the pinned
// version is not ready.
func (m *Manager) TemplateVersion(ctx context.Context, tenant, ref string) (store.TemplateVersion, error) {
	name, version, err := template.ParseRef(ref)
	if err != nil {
		return store.TemplateVersion{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	tv, err := m.deps.Store.SeenTemplate(ctx, tenant, name, version, false)
	if errors.Is(err, store.ErrNotFound) {
		return store.TemplateVersion{}, api.Errorf(api.CodeNotFound, "template %q not found", ref)
	}
	if err != nil {
		return store.TemplateVersion{}, err
	}
	if tv.State != store.TemplateReady {
		return store.TemplateVersion{}, api.Errorf(api.CodeConflict, "template %s@%d is %s%s", tv.Name, tv.Version, tv.State, suffix(": ", tv.Error))
	}
	return tv, nil
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// createFromTemplate is Create for one of the tenant's templates: a
// restore of its version's snapshot, then, when the template starts a
// service, a wait until its readiness check succeeds.
func (m *Manager) createFromTemplate(ctx context.Context, tenant string, req api.CreateSandboxRequest, tv store.TemplateVersion) (api.Sandbox, error) {
	cfg, err := tv.TemplateConfig()
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

// RestoreVersion starts one sandbox of tenant from snapshot, the disk of
// a template version of owner's ("": tenant's own): a template build's
// sandbox, which may start from a version the admin published.
func (m *Manager) RestoreVersion(ctx context.Context, tenant, owner, snapshot string, spec api.SandboxSpec) (api.Sandbox, error) {
	out, err := m.restore(ctx, tenant, snapshot, api.RestoreRequest{Count: 1, SandboxSpec: spec}, heldMachine{}, fromVersion{owner: owner})
	if err != nil {
		return api.Sandbox{}, err
	}
	return out[0], nil
}

// waitReady runs the template's readiness check in the sandbox until it
// exits 0, or its timeout passes (then the error has its last output).
func (m *Manager) waitReady(ctx context.Context, tenant, id string, cfg api.TemplateConfig) error {
	timeout := time.Duration(cfg.ReadyTimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, api.MaxReadyTimeout))
	defer cancel()
	conn, err := m.Agent(ctx, tenant, id)
	if err != nil {
		return err
	}
	ready := &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cfg.Ready}}
	last := "" // what the last check that ran said
	err = backoff.Poll(ctx, backoff.Backoff{Base: 20 * time.Millisecond, Max: time.Second}, func() (bool, error) {
		err := conn.RunLines(ctx, ready, nil)
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
