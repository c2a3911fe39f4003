//go:build linux

package container

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/runtime"
)

// TestContainerMetrics: the agent reads the sandbox's own cgroup, which the
// init mounted read-only at /sys/fs/cgroup.
func TestContainerMetrics(t *testing.T) {
	f := newFixture(t, 907)
	_, conn := f.start(t)
	resp, err := conn.Control.Metrics(context.Background(), connect.NewRequest(&controlpb.MetricsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Msg
	limit := uint64(f.spec.Limits.MemoryBytes)
	maxTotal := limit
	if f.cg.Version() == 1 { // the group holds the agent's reserve too
		maxTotal += runtime.AgentMemoryMB << 20
	}
	if m.GetMemTotalBytes() < limit || m.GetMemTotalBytes() > maxTotal || m.GetMemUsedBytes() == 0 || m.GetMemUsedBytes() > m.GetMemTotalBytes() {
		t.Errorf("memory %d of %d, want a total in [%d, %d]", m.GetMemUsedBytes(), m.GetMemTotalBytes(), limit, maxTotal)
	}
	if m.GetCpuCount() != 1 || m.GetPids() == 0 || m.GetDiskTotalBytes() == 0 {
		t.Errorf("metrics %v, want 1 CPU, some pids and a disk", m)
	}
	if cg := run(t, conn, "cat", "/proc/self/mountinfo"); !strings.Contains(cg, " /sys/fs/cgroup") {
		t.Errorf("no cgroupfs in the sandbox's mounts:\n%s", cg)
	}
	if out := run(t, conn, "sh", "-c", "echo 1 > /sys/fs/cgroup/pids/pids.max 2>&1 || echo refused; echo 1 > /sys/fs/cgroup/pids.max 2>&1 || echo refused"); strings.Count(out, "refused") != 2 {
		t.Errorf("the sandbox could write its cgroup: %q", out)
	}
}
