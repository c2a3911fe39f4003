package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"warren/api"
	"warren/internal/template"
)

// Info describes the node.
func (m *Manager) Info(ctx context.Context, tenant string, admin bool) api.NodeInfo {
	info := api.NodeInfo{
		Version:       m.deps.Version,
		Kernel:        kernelName(),
		CloneMode:     m.deps.Pool.Mode().String(),
		CgroupVersion: m.deps.CgroupVersion,
	}
	if admin {
		info.BlobStore = m.deps.Snapshots.BlobStore()
	}
	for _, rt := range m.deps.Runtimes {
		ri := api.RuntimeInfo{Name: rt.Name(), Isolation: rt.Isolation(), Available: true, Accel: accelOf(rt)}
		if err := rt.Available(); err != nil {
			ri.Available, ri.Reason = false, err.Error()
		}
		info.Runtimes = append(info.Runtimes, ri)
	}
	m.mu.Lock()
	for _, l := range m.live {
		if admin || l.tenant == tenant {
			info.Sandboxes++
		}
	}
	m.mu.Unlock()
	return info
}

// Templates lists the node's templates.
func (m *Manager) Templates(ctx context.Context) ([]api.Template, error) {
	infos, err := m.deps.Templates.List()
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]api.Template, 0, len(infos))
	for _, t := range infos {
		out = append(out, templateView(t))
	}
	return out, nil
}

// BuildTemplate builds (or rebuilds) a template, writing progress lines.
func (m *Manager) BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
	if err := template.ValidName(name); err != nil {
		return api.Template{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	info, err := m.deps.Templates.Build(ctx, name, progress)
	if errors.Is(err, template.ErrUnknownRecipe) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "no recipe for template %q (known: %s)", name, strings.Join(template.Recipes(), ", "))
	}
	if err != nil {
		return api.Template{}, api.Errorf(api.CodeInternal, "build template %s: %v", name, err)
	}
	if _, err := m.deps.Snapshots.EnsureBase(ctx, info.Name, info.Path, info.BuiltAt); err != nil {
		m.log.Warn("template base layer", "template", info.Name, "err", err)
	}
	return templateView(info), nil
}

func templateView(t template.Info) api.Template {
	return api.Template{Name: t.Name, SizeBytes: t.SizeBytes, UsedBytes: t.UsedBytes, BuiltAt: t.BuiltAt}
}
