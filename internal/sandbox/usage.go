package sandbox

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"warren/api"
	controlpb "warren/internal/agent/pb/control"
)

// Metrics returns a running sandbox's resource use, which its agent
// measures from inside (the agent's Control.Metrics); CodeNotFound for an
// unknown sandbox, CodeConflict for one not running or paused.
func (m *Manager) Metrics(ctx context.Context, tenant, id string) (api.SandboxMetrics, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return api.SandboxMetrics{}, err
	}
	resp, err := l.conn.Control.Metrics(ctx, connect.NewRequest(&controlpb.MetricsRequest{}))
	if err != nil {
		return api.SandboxMetrics{}, fmt.Errorf("metrics of sandbox %s: %w", id, err)
	}
	r := resp.Msg
	return api.SandboxMetrics{
		At:               time.Now().UTC(),
		CPUUsedPct:       r.GetCpuUsedPct(),
		CPUCount:         r.GetCpuCount(),
		MemoryUsedBytes:  r.GetMemUsedBytes(),
		MemoryTotalBytes: r.GetMemTotalBytes(),
		MemoryCacheBytes: r.GetMemCacheBytes(),
		DiskUsedBytes:    r.GetDiskUsedBytes(),
		DiskTotalBytes:   r.GetDiskTotalBytes(),
		Pids:             r.GetPids(),
	}, nil
}
