//go:build linux

package snapshot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/disk/disktest"
	"warren/internal/listing"
)

// TestLookupRefuses: malformed IDs, base layer IDs, snapshots that do not
// exist, another tenant's, and (on another node) a pending one are all
// api not_found, with the same message, so an answer tells a tenant
// nothing about the others.
func TestLookupRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := &faultStore{Store: openFileBlobs(t, dir)}
	n1 := newNode(t, "n1", fs, testConfig())
	x, xDisk := n1.newDisk(t, n1.template(t))
	s0, _ := n1.take(t, tenant, x, xDisk, "")
	n1.durable(t, s0.ID)
	base := s0.Parent

	g := newGate(t, "chunks/")
	fs.setOnPut(g.hook)
	disktest.WriteAt(t, xDisk, 44*MiB, randBytes(1, 64*KiB))
	pending, _ := n1.take(t, tenant, x, xDisk, "")
	g.await(t)

	n2 := newNode(t, "n2", openFileBlobs(t, dir), testConfig())
	missing := "sn-" + strings.Repeat("a", 20)
	for _, n := range []*node{n1, n2} {
		for _, tc := range []struct{ tenant, id string }{
			{tenant, ""},
			{tenant, "sn-"},
			{tenant, "sn-../x"},
			{tenant, "sn-../../manifests/" + s0.ID[3:]},
			{tenant, base},
			{"", base},
			{tenant, "tb-" + s0.ID[3:]},
			{tenant, strings.ToUpper(s0.ID)},
			{tenant, s0.ID + "a"},
			{tenant, s0.ID[:len(s0.ID)-1]},
			{tenant, " " + s0.ID},
			{tenant, missing},
			{otherTenant, s0.ID},
			{"", s0.ID},
		} {
			_, err := n.eng.Lookup(ctx, tc.tenant, tc.id)
			if !isNotFound(err) {
				t.Errorf("%s: Lookup(%q, %q) = %v, want not_found", n.name, tc.tenant, tc.id, err)
				continue
			}
			if want := fmt.Sprintf("snapshot %s not found", tc.id); !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Lookup(%q, %q) says %q, want %q like any missing snapshot", n.name, tc.tenant, tc.id, err, want)
			}
		}
		if sn, err := n.eng.Lookup(ctx, tenant, s0.ID); err != nil || sn.ID != s0.ID || sn.Tenant != tenant {
			t.Errorf("%s: Lookup(%s, S0) = %+v, %v", n.name, tenant, sn, err)
		}
	}
	if _, err := n1.eng.Lookup(ctx, tenant, pending.ID); err != nil {
		t.Errorf("node 1: Lookup of its own pending snapshot: %v", err)
	}
	if _, err := n2.eng.Lookup(ctx, tenant, pending.ID); !isNotFound(err) {
		t.Errorf("node 2: Lookup of node 1's pending snapshot = %v, want not_found (only durable ones travel)", err)
	}
	if err := n2.eng.Delete(ctx, otherTenant, s0.ID); !isNotFound(err) {
		t.Errorf("node 2: Delete by %s = %v, want not_found", otherTenant, err)
	}
	if _, err := n1.eng.Lookup(ctx, tenant, s0.ID); err != nil {
		t.Errorf("S0 after another tenant's Delete: %v", err)
	}
}

// TestDeleteSeenEverywhere: deleting a snapshot refuses restores of it
// from then on on every node sharing the blob store (docs/API.md), also on
// one that restored it before (and so has a record and a cache image of
// it) and on one that looked it up before (and so knows its manifest), and
// also once the collector has removed the snapshot's layer and marker.
func TestDeleteSeenEverywhere(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n1 := newNode(t, "n1", openFileBlobs(t, dir), testConfig())
	x, xDisk := n1.newDisk(t, n1.template(t))
	s0, _ := n1.take(t, tenant, x, xDisk, "")
	y, yDisk := n1.restore(t, tenant, s0.ID)
	disktest.WriteAt(t, yDisk, 12*MiB, randBytes(1, 64*KiB))
	a1, _ := n1.take(t, tenant, y, yDisk, s0.ID)
	n1.durable(t, s0.ID)
	n1.durable(t, a1.ID)

	n2 := newNode(t, "n2", openFileBlobs(t, dir), testConfig()) // restores A1
	n2.materialize(t, tenant, a1.ID)
	n3 := newNode(t, "n3", openFileBlobs(t, dir), testConfig()) // looks S0 up
	if _, err := n3.eng.Lookup(ctx, tenant, s0.ID); err != nil {
		t.Fatal(err)
	}

	var bugs []string
	refused := func(stage string, n *node, id string) {
		t.Helper()
		if _, err := n.eng.Lookup(ctx, tenant, id); !isNotFound(err) {
			bugs = append(bugs, fmt.Sprintf("%s: %s's Lookup(%s) = %v, want not_found", stage, n.name, id, err))
		}
	}
	if err := n1.eng.Delete(ctx, tenant, a1.ID); err != nil {
		t.Fatal(err)
	}
	if err := n1.eng.Delete(ctx, tenant, s0.ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{n1, n3} {
		if _, err := n.eng.Lookup(ctx, tenant, a1.ID); !isNotFound(err) {
			t.Errorf("after Delete: %s's Lookup(A1) = %v, want not_found", n.name, err)
		}
		if _, err := n.eng.Lookup(ctx, tenant, s0.ID); !isNotFound(err) {
			t.Errorf("after Delete: %s's Lookup(S0) = %v, want not_found", n.name, err)
		}
	}
	refused("after Delete", n2, a1.ID)

	for range 2 { // the second collects the deleted/ markers
		if _, err := n1.eng.GC(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if left := keys(t, n1.blobs, ""); len(left) != 0 {
		t.Errorf("after deleting everything and GC: %v left", left)
	}
	refused("after GC", n2, a1.ID)
	refused("after GC", n3, s0.ID)
	if _, err := n2.eng.GC(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	refused("after node 2's own GC", n2, a1.ID)
	if sn, err := n2.eng.Lookup(ctx, tenant, a1.ID); err == nil {
		if _, err := n2.eng.Materialize(ctx, sn); err == nil {
			bugs = append(bugs, "node 2 still materializes deleted and collected A1 (its cache image), so restores of it go on")
		}
	}
	if sn, err := n3.eng.Lookup(ctx, tenant, s0.ID); err == nil {
		if _, err := n3.eng.Materialize(ctx, sn); err != nil {
			bugs = append(bugs, fmt.Sprintf("node 3 shows collected S0 as %s, but Materialize fails: %v", sn.State, err))
		}
	}
	if len(bugs) > 0 {
		t.Fatalf("restore.go Lookup(): a deleted snapshot is still found on other nodes: %s. "+
			"A node's own record (made by Materialize) is returned without checking deleted/<id>, and a manifest "+
			"remembered in Engine.manifests is trusted after GC removed it and its marker",
			strings.Join(bugs, "; "))
	}
}

// TestNamedSnapshots: a name given to Take is the snapshot's, shown by
// View, and Lookup finds it by that name for its tenant only; a second
// Take under the name is api conflict naming the first and records
// nothing; Delete by name frees the name.
func TestNamedSnapshots(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "n1", openFileBlobs(t, t.TempDir()), testConfig())
	x, xDisk := n.newDisk(t, n.template(t))
	src := n.source(tenant, x, xDisk, "")
	src.Name = "nightly"
	s0, _ := n.takeSource(t, src)
	if v := n.eng.View(s0); v.Name != "nightly" || v.ID != s0.ID {
		t.Errorf("View of the named snapshot: %+v, want %s named nightly", v, s0.ID)
	}
	if sn, err := n.eng.Lookup(ctx, tenant, "nightly"); err != nil || sn.ID != s0.ID {
		t.Errorf("Lookup(%s, nightly) = %+v, %v; want %s", tenant, sn, err, s0.ID)
	}
	for _, tc := range []struct{ tenant, ref string }{{otherTenant, "nightly"}, {"", "nightly"}, {tenant, "Nightly"}, {tenant, "weekly"}} {
		if _, err := n.eng.Lookup(ctx, tc.tenant, tc.ref); !isNotFound(err) || !strings.Contains(err.Error(), "snapshot "+tc.ref+" not found") {
			t.Errorf("Lookup(%q, %q) = %v, want not_found", tc.tenant, tc.ref, err)
		}
	}

	if _, err := n.eng.Take(ctx, src, noQuiesce); !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), s0.ID) {
		t.Errorf("a second Take named nightly: %v, want conflict naming %s", err, s0.ID)
	}
	if list, err := n.eng.List(ctx, tenant, "", nil, listing.Page{Limit: 10}); err != nil || len(list) != 1 {
		t.Errorf("snapshots after the refused Take: %+v, %v; want only %s", list, err, s0.ID)
	}
	other := n.source(otherTenant, x, xDisk, "")
	other.Name = "nightly"
	s1, _ := n.takeSource(t, other)
	n.durable(t, s0.ID)
	n.durable(t, s1.ID)

	if err := n.eng.Delete(ctx, tenant, "nightly"); err != nil {
		t.Fatalf("Delete by name: %v", err)
	}
	for _, ref := range []string{"nightly", s0.ID} {
		if _, err := n.eng.Lookup(ctx, tenant, ref); !isNotFound(err) {
			t.Errorf("Lookup(%s) after the delete: %v, want not_found", ref, err)
		}
	}
	if sn, err := n.eng.Lookup(ctx, otherTenant, "nightly"); err != nil || sn.ID != s1.ID {
		t.Errorf("%s's nightly after %s's delete: %+v, %v; want %s", otherTenant, tenant, sn, err, s1.ID)
	}
	s2, _ := n.takeSource(t, src)
	if sn, err := n.eng.Lookup(ctx, tenant, "nightly"); err != nil || sn.ID != s2.ID {
		t.Errorf("nightly taken again: %+v, %v; want %s", sn, err, s2.ID)
	}
	n.durable(t, s2.ID)
}
