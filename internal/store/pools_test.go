package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPools: a pool is set, replaced and deleted whole; each node's report
// of its shares replaces that node's last one only, and a deleted pool
// takes its reports with it.
func TestPools(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		now := time.Unix(1700000000, 0)
		p := Pool{Template: "default", Runtime: "container", Min: 2, Max: 4, CPUs: 0.5, MemoryMB: 128, Pids: 64, DiskMB: 4096}
		if err := s.SetPool(ctx, p, now); err != nil {
			t.Fatal(err)
		}
		p.Min, p.Max = 3, 3
		if err := s.SetPool(ctx, p, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.SetPool(ctx, Pool{Template: "default", Runtime: "vm", Min: 1, Max: 1, CPUs: 1, MemoryMB: 512, Pids: 1024, DiskMB: 4096}, now); err != nil {
			t.Fatal(err)
		}
		pools, err := s.ListPools(ctx)
		if err != nil || len(pools) != 2 {
			t.Fatalf("ListPools = %+v, %v; want 2", pools, err)
		}
		want := p
		want.UpdatedAt = now.Add(time.Second)
		if !pools[0].UpdatedAt.Equal(want.UpdatedAt) || pools[0].Min != 3 || pools[0].Runtime != "container" || pools[0].MemoryMB != 128 {
			t.Errorf("replaced pool = %+v, want %+v", pools[0], want)
		}

		report := func(node string, shares ...PoolShare) {
			t.Helper()
			if err := s.ReportPools(ctx, node, shares, now); err != nil {
				t.Fatal(err)
			}
		}
		report("n1", PoolShare{Template: "default", Runtime: "container", Target: 2, Ready: 1, Hits: 5, Misses: 1},
			PoolShare{Template: "default", Runtime: "vm", Target: 1, Error: "no vm runtime"})
		report("n2", PoolShare{Template: "default", Runtime: "container", Target: 1, Ready: 1})
		report("n1", PoolShare{Template: "default", Runtime: "container", Target: 2, Ready: 2, Hits: 6, Misses: 1})
		shares, err := s.PoolShares(ctx)
		if err != nil || len(shares) != 2 {
			t.Fatalf("PoolShares = %+v, %v; want n1's and n2's container shares", shares, err)
		}
		if sh := shares[0]; sh.Node != "n1" || sh.Ready != 2 || sh.Hits != 6 || !sh.ReportedAt.Equal(now) {
			t.Errorf("n1's share = %+v", sh)
		}

		if err := s.DeletePool(ctx, "default", "container"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeletePool(ctx, "default", "container"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second delete = %v, want ErrNotFound", err)
		}
		if shares, _ := s.PoolShares(ctx); len(shares) != 0 {
			t.Errorf("shares after delete = %+v, want none", shares)
		}
		if pools, _ := s.ListPools(ctx); len(pools) != 1 || pools[0].Runtime != "vm" {
			t.Errorf("pools after delete = %+v, want the vm pool", pools)
		}
	})
}
