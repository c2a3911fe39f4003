package sandbox

import (
	"cmp"
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"time"

	"warren/api"
	"warren/internal/store"
)

// validate checks a create request against the node's bounds and fills in
// defaults; every refusal is a bad_request saying what is allowed.
func (m *Manager) validate(ctx context.Context, tenant string, req api.CreateSandboxRequest, src source) (store.Sandbox, error) {
	c := m.cfg
	bad := func(format string, args ...any) (store.Sandbox, error) {
		return store.Sandbox{}, api.Errorf(api.CodeBadRequest, format, args...)
	}
	if err := m.placedHere(req.SandboxSpec); err != nil {
		return store.Sandbox{}, err
	}
	maxCPUs := float64(goruntime.NumCPU())
	cpus := req.CPUs
	if cpus == 0 {
		cpus = min(c.DefaultCPUs, maxCPUs)
	}
	if cpus < 0.01 || cpus > maxCPUs {
		return bad("cpus must be between 0.01 and %g (this node's cores), got %g", maxCPUs, req.CPUs)
	}
	mem := req.MemoryMB
	if mem == 0 {
		mem = c.DefaultMemoryMB
	}
	if mem < 64 || mem > c.MaxMemoryMB {
		return bad("memory_mb must be between 64 and %d, got %d", c.MaxMemoryMB, req.MemoryMB)
	}
	pids := req.Pids
	if pids == 0 {
		pids = c.DefaultPids
	}
	if pids < 16 || pids > c.MaxPids {
		return bad("pids must be between 16 and %d, got %d", c.MaxPids, req.Pids)
	}
	srcMB := (src.size + 1<<20 - 1) >> 20
	diskMB := req.DiskMB
	if diskMB == 0 {
		diskMB = srcMB
	}
	if diskMB < srcMB || diskMB > c.MaxDiskMB {
		return bad("disk_mb must be between %d (the disk it starts from) and %d, got %d", srcMB, c.MaxDiskMB, req.DiskMB)
	}
	if req.WorkspaceMB != 0 && (req.WorkspaceMB < minWorkspaceMB || req.WorkspaceMB > c.MaxDiskMB) {
		return bad("workspace_mb must be 0 (none) or between %d and %d, got %d", minWorkspaceMB, c.MaxDiskMB, req.WorkspaceMB)
	}
	// Compared in seconds: a huge value would overflow a Duration.
	maxSeconds := int64(c.MaxTTL / time.Second)
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxSeconds {
		return bad("timeout_seconds must be between 1 and %d, got %d", maxSeconds, req.TimeoutSeconds)
	}
	ttl := time.Duration(req.TimeoutSeconds) * time.Second
	if req.TimeoutSeconds == 0 {
		ttl = c.DefaultTTL
	}
	every := req.CheckpointEverySeconds
	if every != 0 && (every < int64(minCheckpointEvery/time.Second) || every > maxSeconds) {
		return bad("checkpoint_every_seconds must be 0 (no checkpoints) or between %d and %d, got %d",
			int64(minCheckpointEvery/time.Second), maxSeconds, every)
	}
	if every != 0 && req.WorkspaceMB != 0 {
		return bad("checkpoint_every_seconds cannot be set for a sandbox with a workspace disk: a checkpoint saves the root disk only")
	}
	persistence := cmp.Or(req.Persistence, api.PersistenceSnapshot)
	switch {
	case persistence != api.PersistenceSnapshot && persistence != api.PersistenceAlways:
		return bad("persistence must be %q or %q, got %q", api.PersistenceSnapshot, api.PersistenceAlways, req.Persistence)
	case persistence == api.PersistenceAlways && m.deps.Blocks == nil:
		return bad("persistence %q: this node has no block server", api.PersistenceAlways)
	case persistence == api.PersistenceAlways && every != 0:
		return bad("checkpoint_every_seconds cannot be set for an always-on disk: every write it flushes is kept already")
	}
	lc, err := m.validLifecycle(req.Lifecycle)
	if err != nil {
		return store.Sandbox{}, err
	}
	if lc.OnTimeout == api.OnTimeoutPause && persistence == api.PersistenceAlways {
		return bad("on_timeout %q cannot be set for a sandbox with an always-on disk, which cannot pause", api.OnTimeoutPause)
	}
	if err := validEnv(req.Env); err != nil {
		return store.Sandbox{}, err
	}
	if err := validMetadata(req.Metadata); err != nil {
		return store.Sandbox{}, err
	}
	netPol, err := m.validNetwork(req.Network)
	if err != nil {
		return store.Sandbox{}, err
	}
	if err := m.checkRules(ctx, tenant, netPol); err != nil {
		return store.Sandbox{}, err
	}
	now := time.Now()
	return store.Sandbox{
		Tenant: tenant, Template: src.template, State: api.StateStarting,
		CPUs: cpus, MemoryMB: mem, Pids: pids, DiskMB: diskMB, WorkspaceMB: req.WorkspaceMB,
		Env: req.Env, Metadata: req.Metadata, Network: netPol,
		CreatedAt: now, ExpiresAt: now.Add(ttl), CheckpointEvery: time.Duration(every) * time.Second,
		Persistence: persistence, Lifecycle: lc, Timeout: ttl,
	}, nil
}

// validLifecycle checks a sandbox's lifecycle and fills in the paused TTL.
func (m *Manager) validLifecycle(lc api.Lifecycle) (api.Lifecycle, error) {
	bad := func(format string, args ...any) (api.Lifecycle, error) {
		return api.Lifecycle{}, api.Errorf(api.CodeBadRequest, format, args...)
	}
	if lc.OnTimeout != "" && lc.OnTimeout != api.OnTimeoutDelete && lc.OnTimeout != api.OnTimeoutPause {
		return bad("on_timeout must be %q or %q, got %q", api.OnTimeoutDelete, api.OnTimeoutPause, lc.OnTimeout)
	}
	lc.OnTimeout = cmp.Or(lc.OnTimeout, api.OnTimeoutDelete)
	maxIdle := int64(m.cfg.MaxTTL / time.Second)
	if lc.IdleTimeoutSeconds < 0 || lc.IdleTimeoutSeconds > maxIdle {
		return bad("idle_timeout_seconds must be 0 (never idle) or between 1 and %d, got %d", maxIdle, lc.IdleTimeoutSeconds)
	}
	maxPaused := int64(m.cfg.MaxPausedTTL / time.Second)
	if lc.PausedTTLSeconds < 0 || lc.PausedTTLSeconds > maxPaused {
		return bad("paused_ttl_seconds must be between 1 and %d (0: the default, %d), got %d",
			maxPaused, int64(m.cfg.DefaultPausedTTL/time.Second), lc.PausedTTLSeconds)
	}
	if lc.PausedTTLSeconds == 0 {
		lc.PausedTTLSeconds = int64(m.cfg.DefaultPausedTTL / time.Second)
	}
	return lc, nil
}

func validEnv(env map[string]string) error {
	if len(env) > 256 {
		return api.Errorf(api.CodeBadRequest, "env has %d variables; at most 256", len(env))
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return api.Errorf(api.CodeBadRequest, "env variable %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
		if len(k)+len(v) > 32<<10 {
			return api.Errorf(api.CodeBadRequest, "env variable %q is longer than 32 KiB", k)
		}
	}
	return nil
}

func validMetadata(md map[string]string) error {
	if len(md) > 64 {
		return api.Errorf(api.CodeBadRequest, "metadata has %d entries; at most 64", len(md))
	}
	for k, v := range md {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return api.Errorf(api.CodeBadRequest, "metadata %q: keys must be 1-128 bytes, values at most 1024", k)
		}
	}
	return nil
}

// placedHere checks that the request's region and node labels are this
// node's: a fleet placed it here by them, and a single machine has none.
func (m *Manager) placedHere(spec api.SandboxSpec) error {
	if spec.Region != "" && spec.Region != m.deps.Region {
		if m.deps.Region == "" {
			return api.Errorf(api.CodeUnavailable, "no node in region %q: this warren is not in a region", spec.Region)
		}
		return api.Errorf(api.CodeUnavailable, "no node in region %q: this node is in %q", spec.Region, m.deps.Region)
	}
	for k, v := range spec.NodeLabels {
		if have, ok := m.deps.Labels[k]; !ok || have != v {
			return api.Errorf(api.CodeUnavailable, "no node with label %s=%s", k, v)
		}
	}
	return nil
}

// quotaRefusal is the answer to a record the tenant's quota in the fleet
// had no room for (429, naming the quota and its value), or nil for any
// other error.
func quotaRefusal(err error) error {
	var qe *store.QuotaError
	if !errors.As(err, &qe) {
		return nil
	}
	return api.Errorf(api.CodeTooMany, "tenant quota: at most %g %s in the fleet (%g now)", qe.Limit, qe.Quota, qe.Held)
}
