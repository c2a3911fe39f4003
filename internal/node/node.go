// Package node is what a node says about itself: its kernel, runtimes and
// clone mode, how many sandboxes it runs, and its templates, which it lists
// and builds. The sandbox manager runs sandboxes; this package describes
// the machine they run on.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/listing"
	"warren/internal/runtime"
	"warren/internal/template"
)

// Deps are what a Node describes.
type Deps struct {
	Log      *slog.Logger
	Version  string
	Runtimes []runtime.Runtime
	// CloneMode is how the disk pool clones a template ("reflink", "copy").
	CloneMode     string
	CgroupVersion int
	Templates     *template.Catalog
	// Bases records a built template's disk as the base layer snapshots
	// of it build on, and names the blob store (shown to an admin).
	Bases Bases
	// Sandboxes counts the sandboxes running on the node.
	Sandboxes Counter
	// Images lists its memory images (shown to an admin); nil for none.
	Images Imager
}

// Imager lists the node's memory images.
type Imager interface {
	Images() []api.MemoryImage
}

// Bases is the snapshot engine's part in templates.
type Bases interface {
	EnsureBase(ctx context.Context, template, path string, builtAt time.Time) (string, error)
	BlobStore() string
}

// Counter counts running sandboxes: tenant's, or every tenant's for
// listing.AnyTenant.
type Counter interface {
	Running(tenant string) int
}

// Node describes the node and serves its templates.
type Node struct{ deps Deps }

// New returns the node described by deps.
func New(deps Deps) *Node {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Node{deps: deps}
}

// Info describes the node as tenant may see it: its own sandboxes' count;
// everyone's, where snapshots are stored and its memory images, for an
// admin.
func (n *Node) Info(ctx context.Context, tenant string, admin bool) api.NodeInfo {
	info := api.NodeInfo{
		Version:       n.deps.Version,
		Kernel:        kernelName(),
		CloneMode:     n.deps.CloneMode,
		CgroupVersion: n.deps.CgroupVersion,
	}
	if admin {
		info.BlobStore = n.deps.Bases.BlobStore()
		tenant = listing.AnyTenant
		if n.deps.Images != nil {
			info.MemoryImages = n.deps.Images.Images()
		}
	}
	for _, rt := range n.deps.Runtimes {
		ri := api.RuntimeInfo{Name: rt.Name(), Isolation: rt.Isolation(), Available: true, Accel: runtime.Accel(rt)}
		if err := rt.Available(); err != nil {
			ri.Available, ri.Reason = false, err.Error()
		}
		info.Runtimes = append(info.Runtimes, ri)
	}
	info.Sandboxes = n.deps.Sandboxes.Running(tenant)
	return info
}

// Templates lists the node's templates.
func (n *Node) Templates(ctx context.Context) ([]api.Template, error) {
	infos, err := n.deps.Templates.List()
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]api.Template, 0, len(infos))
	for _, t := range infos {
		out = append(out, templateView(t))
	}
	return out, nil
}

// BuildTemplate builds (or rebuilds) the template name, writing progress
// lines, and records its disk as a base layer.
func (n *Node) BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
	if err := template.ValidName(name); err != nil {
		return api.Template{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	info, err := n.deps.Templates.Build(ctx, name, progress)
	if errors.Is(err, template.ErrUnknownRecipe) {
		return api.Template{}, api.Errorf(api.CodeNotFound, "no recipe for template %q (known: %s)", name, strings.Join(template.Recipes(), ", "))
	}
	if err != nil {
		return api.Template{}, api.Errorf(api.CodeInternal, "build template %s: %v", name, err)
	}
	if _, err := n.deps.Bases.EnsureBase(ctx, info.Name, info.Path, info.BuiltAt); err != nil {
		n.deps.Log.Warn("template base layer", "template", info.Name, "err", err)
	}
	return templateView(info), nil
}

func templateView(t template.Info) api.Template {
	return api.Template{Name: t.Name, SizeBytes: t.SizeBytes, UsedBytes: t.UsedBytes, BuiltAt: t.BuiltAt}
}

// kernelName is the host kernel's name and release, e.g. "Linux 6.18.44".
func kernelName() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
}

// CPU is the host CPU's model and flags, from /proc/cpuinfo's first
// processor: a memory snapshot resumes only on a CPU with its flags.
func CPU() (model string, flags []string) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "", nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			if line == "" && model != "" {
				break // the end of the first processor
			}
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			model = strings.TrimSpace(v)
		case "flags":
			flags = strings.Fields(v)
		}
	}
	return model, flags
}
