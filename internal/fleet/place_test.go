package fleet

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"warren/api"
	"warren/internal/control"
	"warren/internal/pgtest"
	"warren/internal/scheduler"
	"warren/internal/store"
)

// TestPlaceRestoreByName: a restore of a snapshot by name places by the
// lineage of the caller's snapshot of that name, on the node that holds
// it; another tenant's name is no snapshot of the caller's and places
// with no lineage (the node answers its 404).
func TestPlaceRestoreByName(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.Start(t).Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const held = 8 << 30 // a layer too big to fetch when one node has it
	for _, id := range []string{"n1", "n2", "n3"} {
		r := Report{
			Capacity: scheduler.Resources{MilliCPUs: 64000, MemoryMB: 64 << 10, DiskMB: 100 << 10},
			Runtimes: []scheduler.Runtime{{Name: "container", Isolation: scheduler.IsolationContainer}},
		}
		if id == "n2" {
			r.Layers = []scheduler.Layer{{ID: "sn-nightly", Size: held}}
		}
		report, _ := json.Marshal(r)
		if _, err := st.RegisterNode(ctx, store.Node{ID: id, Addr: id + ":1", Region: "r1", Cluster: "r1-" + id, Report: report}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.InsertSnapshot(ctx, &store.Snapshot{ID: "sn-nightly", Tenant: "acme", Name: "nightly", SandboxID: "sb-1",
		State: api.SnapshotDurable, DiskBytes: held, StoredBytes: held, Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	d, err := NewDirectory(ctx, st, nil, nil, Config{}, DirectoryConfig{DefaultCPUs: 1, DefaultMemoryMB: 256}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []control.Placement{
		{Snapshot: "sn-nightly", Count: 1},
		{Snapshot: "nightly", Tenant: "acme", Count: 1},
	} {
		for range 3 { // each placed sandbox counts on n2 until it reports again
			if node, err := d.Place(ctx, p); err != nil || node != "n2" {
				t.Fatalf("place %+v: %q, %v; want n2, which holds the snapshot", p, node, err)
			}
		}
	}
	lineage, err := d.lineage(ctx, "acme", "nightly")
	if err != nil || len(lineage) != 1 || lineage[0].ID != "sn-nightly" {
		t.Errorf("the lineage of acme's nightly: %+v, %v; want sn-nightly", lineage, err)
	}
	for _, tenant := range []string{"globex", ""} {
		if lineage, err := d.lineage(ctx, tenant, "nightly"); err != nil || len(lineage) != 0 {
			t.Errorf("the lineage of %q's nightly: %+v, %v; want none", tenant, lineage, err)
		}
	}
}
