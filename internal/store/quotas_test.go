package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"warren/api"
)

// TestQuotas: a tenant's quota refuses the sandbox or snapshot past it,
// naming the bound, and counts only what is live; other tenants are not
// bounded by it.
func TestQuotas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		if err := s.SetQuota(ctx, Quota{Tenant: "acme", Sandboxes: 2, CPUs: 4, Snapshots: 1}); err != nil {
			t.Fatal(err)
		}
		if q, err := s.GetQuota(ctx, "acme"); err != nil || q.Sandboxes != 2 || q.CPUs != 4 {
			t.Fatalf("GetQuota = %+v, %v", q, err)
		}
		insert := func(id, tenant string, cpus float64) error {
			sb := newSandbox(id, tenant)
			sb.CPUs = cpus
			return s.InsertSandbox(ctx, sb)
		}
		var qe *QuotaError
		if err := insert("sb-1", "acme", 3); err != nil {
			t.Fatal(err)
		}
		if err := insert("sb-2", "acme", 2); !errors.As(err, &qe) || qe.Quota != "vCPUs" || qe.Limit != 4 || qe.Held != 3 {
			t.Errorf("past the vCPUs: %v, want the vCPUs quota", err)
		}
		if err := insert("sb-2", "acme", 1); err != nil {
			t.Fatal(err)
		}
		if err := insert("sb-3", "acme", 0.1); !errors.As(err, &qe) || qe.Quota != "sandboxes" {
			t.Errorf("a third sandbox: %v, want the sandboxes quota", err)
		}
		if err := insert("sb-other", "other", 8); err != nil {
			t.Errorf("another tenant: %v", err)
		}
		if _, err := s.Transition(ctx, "sb-1", Transition{From: Live, To: api.StateStopped}); err != nil {
			t.Fatal(err)
		}
		if err := insert("sb-3", "acme", 1); err != nil {
			t.Errorf("after one stopped: %v", err)
		}
		snap := func(id string) error {
			return s.InsertSnapshot(ctx, &Snapshot{ID: id, Tenant: "acme", SandboxID: "sb-2", State: api.SnapshotPending})
		}
		if err := snap("sn-1"); err != nil {
			t.Fatal(err)
		}
		if err := snap("sn-2"); !errors.As(err, &qe) || qe.Quota != "snapshots" {
			t.Errorf("a second snapshot: %v, want the snapshots quota", err)
		}
	})
}

// TestQuotaRace: many servers starting a tenant's sandboxes at once on
// PostgreSQL never take it past its quota.
func TestQuotaRace(t *testing.T) {
	s, _ := openTest(t, backends[1])
	ctx := context.Background()
	if err := s.SetQuota(ctx, Quota{Tenant: "acme", Sandboxes: 3}); err != nil {
		t.Fatal(err)
	}
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			err := s.InsertSandbox(ctx, newSandbox(fmt.Sprintf("sb-%d", i), "acme"))
			var qe *QuotaError
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.As(err, &qe):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 3 {
		t.Errorf("%d sandboxes inserted under a quota of 3", ok.Load())
	}
}
