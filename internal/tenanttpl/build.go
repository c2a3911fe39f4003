package tenanttpl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/buildspec"
	"warren/internal/guest"
	"warren/internal/store"
	"warren/internal/template"
)

// Template builds (docs/TEMPLATES.md): each makes one version of a
// tenant's template, from a snapshot, an OCI image or a build spec, and
// ends it ready or failed. A build runs the steps that change the disk in
// a sandbox of the tenant's, under the same isolation and bounds as any,
// and keeps each step's result as a snapshot.

// buildMetadata marks a build's sandboxes.
const buildMetadata = "warren.template_build"

// How long a build may run once it has its slot: a spec's
// limits.timeout_seconds, or the default; an import or a promotion takes
// the default. Waiting for a slot is not counted.
const (
	defaultBuildTimeout = 30 * time.Minute
	maxBuildTimeout     = buildspec.MaxTimeout
)

// Progress gets a build's events as they happen.
type Progress = func(api.TemplateBuildEvent)

// CreateTemplate makes a new version of tenant's template req.Name from
// the one source req names. It returns the version ready, or its failure;
// with req.Background it returns the version building at once, and the
// build goes on under the manager, reporting nothing.
func (tt *Templates) CreateTemplate(ctx context.Context, tenant string, req api.CreateTemplateRequest, progress Progress) (api.Template, error) {
	if progress == nil || req.Background {
		progress = func(api.TemplateBuildEvent) {}
	}
	if err := tt.checkName(req.Name); err != nil {
		return api.Template{}, err
	}
	build, source, timeout, err := tt.planBuild(ctx, tenant, req)
	if err != nil {
		return api.Template{}, err
	}
	slot, err := tt.buildSlot(tenant)
	if err != nil {
		return api.Template{}, err
	}
	return tt.makeVersion(ctx, tenant, req.Name, source, build, timeout, req.Background, slot, progress)
}

// checkName refuses what cannot name a tenant's template.
func (tt *Templates) checkName(name string) error {
	if err := template.ValidName(name); err != nil {
		return api.Errorf(api.CodeBadRequest, "name: %v", err)
	}
	if tt.builtIn(name) {
		return api.Errorf(api.CodeConflict, "template %q is built in: pick another name", name)
	}
	return nil
}

// buildSlot puts a build in line for a place on the node (builders), once
// its disk is above the reserve, and returns its ticket.
func (tt *Templates) buildSlot(tenant string) (*buildTicket, error) {
	if err := tt.deps.Sandboxes.CheckDiskFree("template builds are"); err != nil {
		return nil, err
	}
	return tt.builders.enqueue(tenant)
}

// makeVersion records a version of tenant's template name and, once slot
// has a place, runs build to make it within timeout, in the background
// when asked (reporting nothing then), and gives the place up when done.
func (tt *Templates) makeVersion(ctx context.Context, tenant, name, source string, build buildFunc, timeout time.Duration, background bool, slot *buildTicket, progress Progress) (api.Template, error) {
	tv, err := tt.newVersion(ctx, tenant, name, source)
	if err != nil {
		slot.cancel()
		return api.Template{}, err
	}
	run := func(ctx context.Context) (api.Template, error) {
		defer slot.cancel()
		if !slot.started() {
			progress(api.TemplateBuildEvent{Step: "queue", Progress: "waiting for a build slot on the node"})
		}
		_, err := slot.wait(ctx)
		if err == nil {
			err = runBounded(ctx, timeout, func(ctx context.Context) error { return build(ctx, &tv, progress) })
		}
		if ferr := tt.deps.Store.FinishTemplateVersion(context.WithoutCancel(ctx), &tv, err); ferr != nil {
			return api.Template{}, errors.Join(err, ferr)
		}
		if err != nil {
			tt.log.Warn("template build failed", "template", tv.Name, "version", tv.Version, "tenant", tenant, "err", err)
			return tt.templateView(ctx, tv), api.Errorf(api.CodeBuildFailed, "template %s@%d: %v", tv.Name, tv.Version, err)
		}
		tt.log.Info("template built", "template", tv.Name, "version", tv.Version, "tenant", tenant, "source", tv.Source,
			"snapshot", tv.Snapshot, "took", time.Since(tv.CreatedAt).Round(time.Millisecond))
		return tt.templateView(ctx, tv), nil
	}
	if background {
		tt.builds.Add(1)
		go func() {
			defer tt.builds.Done()
			run(tt.base)
		}()
		return tt.templateView(ctx, tv), nil
	}
	return run(ctx)
}

// buildFunc makes the version: it sets tv's Snapshot, Digest and Config.
type buildFunc func(ctx context.Context, tv *store.TemplateVersion, progress Progress) error

// runBounded runs build within timeout; a build that runs out of it
// fails with an error that says so first.
func runBounded(ctx context.Context, timeout time.Duration, build func(context.Context) error) error {
	over := fmt.Errorf("the build ran out of its time, %v (a spec's limits.timeout_seconds: by default %v, at most %v)",
		timeout, defaultBuildTimeout, maxBuildTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, over)
	defer cancel()
	err := build(ctx)
	if err != nil && context.Cause(ctx) == over {
		return fmt.Errorf("%w: %v", over, err)
	}
	return err
}

// planBuild checks req and returns the build it asks for, its source and
// how long it may take.
func (tt *Templates) planBuild(ctx context.Context, tenant string, req api.CreateTemplateRequest) (buildFunc, string, time.Duration, error) {
	n := 0
	for _, set := range []bool{req.FromSnapshot != "", req.FromImage != nil, req.Spec != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, "", 0, api.Errorf(api.CodeBadRequest, "a template is made from exactly one of from_snapshot, from_image and spec")
	}
	if len(req.Context) > api.MaxTemplateContext {
		return nil, "", 0, api.Errorf(api.CodeTooLarge, "the build context is %d bytes, more than %d", len(req.Context), api.MaxTemplateContext)
	}
	if req.Spec == "" && (len(req.Context) > 0 || req.SpecFormat != "") {
		return nil, "", 0, api.Errorf(api.CodeBadRequest, "context and spec_format are for a spec build")
	}
	if req.Spec != "" && req.Config != nil {
		return nil, "", 0, api.Errorf(api.CodeBadRequest, "a spec sets the template's config itself: config is for a snapshot or an image")
	}
	cfg := api.TemplateConfig{}
	if req.Config != nil {
		cfg = *req.Config
		if _, err := agentConfig(cfg); err != nil {
			return nil, "", 0, err
		}
		if cfg.ReadyTimeoutSeconds < 0 || time.Duration(cfg.ReadyTimeoutSeconds)*time.Second > api.MaxReadyTimeout {
			return nil, "", 0, api.Errorf(api.CodeBadRequest, "config.ready_timeout_seconds must be between 0 and %d", int64(api.MaxReadyTimeout/time.Second))
		}
	}
	switch {
	case req.FromSnapshot != "":
		sn, err := tt.deps.Snapshots.Lookup(ctx, tenant, req.FromSnapshot)
		if err != nil {
			return nil, "", 0, err
		}
		if sn.State == api.SnapshotFailed {
			return nil, "", 0, api.Errorf(api.CodeConflict, "snapshot %s failed: %s", sn.ID, sn.Error)
		}
		if sn.Scope != api.ScopeRoot {
			return nil, "", 0, api.Errorf(api.CodeBadRequest, "snapshot %s is of a workspace disk: a template is a root disk", sn.ID)
		}
		return func(ctx context.Context, tv *store.TemplateVersion, progress Progress) error {
			return tt.fromSnapshot(ctx, tv, sn.ID, cfg, progress)
		}, "snapshot " + sn.ID, defaultBuildTimeout, nil
	case req.FromImage != nil:
		build, source, err := tt.planImage(req.FromImage, cfg)
		return build, source, defaultBuildTimeout, err
	default:
		return tt.planSpec(ctx, tenant, req)
	}
}

// fromSnapshot makes the version's disk the durable snapshot id, or, when
// cfg is set, a snapshot of it with cfg written in.
func (tt *Templates) fromSnapshot(ctx context.Context, tv *store.TemplateVersion, id string, cfg api.TemplateConfig, progress Progress) error {
	step := "snapshot"
	progress(api.TemplateBuildEvent{Step: step, Progress: "waiting for snapshot " + id + " to be durable"})
	sn, err := tt.deps.Snapshots.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	if sn.State != api.SnapshotDurable {
		return fmt.Errorf("snapshot %s is %s: %s", id, sn.State, sn.Error)
	}
	tv.Snapshot, tv.Digest = id, "snapshot:"+id
	if emptyConfig(cfg) {
		return setConfig(tv, cfg)
	}
	sb, err := tt.buildSandbox(ctx, tv, buildFrom{snapshot: id}, api.SandboxSpec{Network: &api.NetworkPolicy{None: true}}, 0)
	if err != nil {
		return err
	}
	defer tt.deps.Sandboxes.Delete(context.WithoutCancel(ctx), tv.Tenant, sb)
	snap, err := tt.finishDisk(ctx, tv, sb, cfg, progress)
	if err != nil {
		return err
	}
	tv.Snapshot = snap
	return setConfig(tv, cfg)
}

func setConfig(tv *store.TemplateVersion, cfg api.TemplateConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	tv.Config = string(b)
	return nil
}

// buildSandbox starts a sandbox of the version's tenant for a build, from
// a built-in template (with a disk of diskMB, 0 for the template's) or a
// snapshot (whose disk keeps its size), and returns its ID.
func (tt *Templates) buildSandbox(ctx context.Context, tv *store.TemplateVersion, from buildFrom, spec api.SandboxSpec, diskMB int64) (string, error) {
	spec.Metadata = map[string]string{buildMetadata: fmt.Sprintf("%s@%d", tv.Name, tv.Version)}
	if spec.TimeoutSeconds == 0 {
		spec.TimeoutSeconds = int64(maxBuildTimeout / time.Second)
	}
	if from.builtIn != "" {
		sb, err := tt.deps.Sandboxes.Create(ctx, tv.Tenant, api.CreateSandboxRequest{Template: from.builtIn, DiskMB: diskMB, SandboxSpec: spec})
		if err != nil {
			return "", fmt.Errorf("start the build's sandbox: %w", err)
		}
		return sb.ID, nil
	}
	sb, err := tt.deps.Sandboxes.RestoreVersion(ctx, tv.Tenant, from.owner, from.snapshot, spec)
	if err != nil {
		return "", fmt.Errorf("start the build's sandbox: %w", err)
	}
	return sb.ID, nil
}

// finishDisk writes cfg into sandbox id's disk for the agent, and returns
// a durable snapshot of the disk.
func (tt *Templates) finishDisk(ctx context.Context, tv *store.TemplateVersion, id string, cfg api.TemplateConfig, progress Progress) (string, error) {
	b, err := agentConfig(cfg)
	if err != nil {
		return "", err
	}
	progress(api.TemplateBuildEvent{Step: "config", Progress: "writing " + guest.TemplateFile})
	conn, err := tt.deps.Sandboxes.Agent(ctx, tv.Tenant, id)
	if err != nil {
		return "", err
	}
	if err := conn.RunLines(ctx, &processpb.ProcessConfig{Cmd: "mkdir", Args: []string{"-p", "/etc/warren"}}, nil); err != nil {
		return "", fmt.Errorf("config: %w", err)
	}
	if _, err := conn.WriteFile(ctx, guest.TemplateFile, 0o644, "root", bytes.NewReader(b)); err != nil {
		return "", fmt.Errorf("config: write %s: %w", guest.TemplateFile, err)
	}
	return tt.durableSnapshot(ctx, tv.Tenant, id, "config", progress)
}

// durableSnapshot snapshots sandbox id and waits until the snapshot is
// durable.
func (tt *Templates) durableSnapshot(ctx context.Context, tenant, id, step string, progress Progress) (string, error) {
	sn, err := tt.deps.Sandboxes.Snapshot(ctx, tenant, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if sn.State != api.SnapshotDurable {
		return "", fmt.Errorf("snapshot %s is %s: %s", sn.ID, sn.State, sn.Error)
	}
	progress(api.TemplateBuildEvent{Step: step, Progress: fmt.Sprintf("snapshot %s: %d bytes changed, %d stored", sn.ID, sn.ChangedBytes, sn.StoredBytes)})
	return sn.ID, nil
}

// Builds on the node: running at once, of one tenant at once, and waiting
// for a place (of one tenant, and in all). Each running build holds a
// sandbox or an unpacked image and its disk.
const (
	maxBuilds                 = 4
	maxBuildsPerTenant        = 2
	maxBuildsWaiting          = 16
	maxBuildsWaitingPerTenant = 4
)

// builders shares the node's build places among tenants. A build waits in
// line for one; a place that frees goes to the waiting build whose tenant
// has the fewest builds running (of those, the one that came first), so
// that a tenant's second build waits behind another tenant's first, and a
// tenant's builds never take more than maxBuildsPerTenant.
type builders struct {
	mu       sync.Mutex // guards the fields below and the tickets' state
	all      int
	byTenant map[string]int // running builds
	queue    []*buildTicket // waiting, in the order they came
}

// A buildTicket is a build's place in line, then its place on the node.
type buildTicket struct {
	b       *builders
	tenant  string
	granted chan struct{} // closed once it has a place
	state   ticketState   // guarded by b.mu
}

type ticketState int

const (
	ticketWaiting ticketState = iota
	ticketRunning
	ticketDone
)

// enqueue puts a build of tenant in line, or says why the line is full
// (429).
func (b *builders) enqueue(tenant string) (*buildTicket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := 0
	for _, t := range b.queue {
		if t.tenant == tenant {
			mine++
		}
	}
	switch {
	case mine >= maxBuildsWaitingPerTenant:
		return nil, api.Errorf(api.CodeTooMany, "%d template builds of yours are waiting for a place on the node, its most: wait for one to start", maxBuildsWaitingPerTenant)
	case len(b.queue) >= maxBuildsWaiting:
		return nil, api.Errorf(api.CodeTooMany, "%d template builds are waiting for a place on the node, its most: try again later", maxBuildsWaiting)
	}
	t := &buildTicket{b: b, tenant: tenant, granted: make(chan struct{})}
	b.queue = append(b.queue, t)
	b.dispatch()
	return t, nil
}

// dispatch gives the free places to the builds in line that come first.
func (b *builders) dispatch() {
	for b.all < maxBuilds {
		best := -1
		for i, t := range b.queue {
			n := b.byTenant[t.tenant]
			if n < maxBuildsPerTenant && (best < 0 || n < b.byTenant[b.queue[best].tenant]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		t := b.queue[best]
		b.queue = slices.Delete(b.queue, best, best+1)
		if b.byTenant == nil {
			b.byTenant = map[string]int{}
		}
		b.all++
		b.byTenant[t.tenant]++
		t.state = ticketRunning
		close(t.granted)
	}
}

// started reports whether the build has its place.
func (t *buildTicket) started() bool {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	return t.state == ticketRunning
}

// wait waits until the build has its place, and returns its release (the
// same as cancel); a ctx done first takes it out of line.
func (t *buildTicket) wait(ctx context.Context) (func(), error) {
	select {
	case <-t.granted:
		return t.cancel, nil
	case <-ctx.Done():
		t.cancel()
		return nil, fmt.Errorf("no build slot freed on the node while the build waited: %w", context.Cause(ctx))
	}
}

// cancel takes the build out of line, or gives its place up; calls after
// the first do nothing.
func (t *buildTicket) cancel() {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch t.state {
	case ticketWaiting:
		b.queue = slices.DeleteFunc(b.queue, func(o *buildTicket) bool { return o == t })
	case ticketRunning:
		b.all--
		if b.byTenant[t.tenant]--; b.byTenant[t.tenant] == 0 {
			delete(b.byTenant, t.tenant)
		}
	}
	t.state = ticketDone
	b.dispatch()
}

// running is how many builds have a place.
func (b *builders) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.all
}
