//go:build linux

package sandbox_test

import (
	"context"
	"testing"

	"warren/api"
)

// TestMetrics: the manager asks a running sandbox's agent; another
// tenant's or an unknown sandbox is not found.
func TestMetrics(t *testing.T) {
	h := newHarness(t)
	sb := h.create()
	ctx := context.Background()
	m, err := h.Manager.Metrics(ctx, tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.At.IsZero() || m.CPUCount == 0 || m.MemoryTotalBytes == 0 || m.DiskTotalBytes == 0 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Errorf("metrics %+v", m)
	}
	for _, c := range []struct{ tenant, id string }{{"other", sb.ID}, {tenant, "sb-none"}} {
		if _, err := h.Manager.Metrics(ctx, c.tenant, c.id); !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("metrics of %s as %s: %v, want not_found", c.id, c.tenant, err)
		}
	}
}
