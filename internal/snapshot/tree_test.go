//go:build linux

package snapshot_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/blob/s3"
	"warren/internal/blob/s3test"
	"warren/internal/disk/disktest"
	"warren/internal/listing"
)

// tree is a search tree of snapshots taken on one node:
//
//	tb-… ── S0 ─┬─ A1 ── A2   small writes, then one more
//	            ├─ B1         template data zeroed (written and punched)
//	            ├─ C1         grown to 320 MiB, data past the old end
//	            ├─ D1         no change
//	            ├─ E1         A1's 64 KiB block again (deduplicated)
//	            └─ G1         shrunk to 192 MiB
type tree struct {
	s0, a1, a2, b1, c1, d1, e1, g1 string
	base                           string            // S0's parent, the template base layer
	hash                           map[string]string // each disk as it was taken
	changed                        map[string]int64  // the data each layer must hold, exactly
	sandbox                        map[string]string // the sandbox each was taken of
}

func (tr tree) ids() []string {
	return []string{tr.s0, tr.a1, tr.a2, tr.b1, tr.c1, tr.d1, tr.e1, tr.g1}
}

// buildTree takes the tree's snapshots on n, restoring the branches from S0
// while it is still pending, and waits until all are durable.
func buildTree(t *testing.T, n *node) tree {
	t.Helper()
	ctx := context.Background()
	tr := tree{hash: map[string]string{}, changed: map[string]int64{}, sandbox: map[string]string{}}
	record := func(id, hash, sandbox string, changed int64) {
		tr.hash[id], tr.changed[id], tr.sandbox[id] = hash, changed, sandbox
	}

	x, xDisk := n.newDisk(t, n.template(t))
	disktest.WriteAt(t, xDisk, 8*MiB, randBytes(1, 4*KiB))
	disktest.WriteAt(t, xDisk, 120*MiB, randBytes(2, 4*KiB))
	s0, h := n.take(t, tenant, x, xDisk, "")
	tr.s0, tr.base = s0.ID, s0.Parent
	record(s0.ID, h, x, 8*KiB)
	// The branches are restored before S0 is durable: a pending snapshot
	// restores on the node that took it.
	if sn, err := n.eng.Lookup(ctx, tenant, s0.ID); err != nil || sn.ID != s0.ID {
		t.Fatalf("Lookup of pending S0 = %+v, %v", sn, err)
	}
	a, aDisk := n.restore(t, tenant, s0.ID)
	b, bDisk := n.restore(t, tenant, s0.ID)
	c, cDisk := n.restore(t, tenant, s0.ID)
	d, dDisk := n.restore(t, tenant, s0.ID)
	g, gDisk := n.restore(t, tenant, s0.ID)
	// The sandbox of S0 goes on writing; its snapshot must not change.
	disktest.WriteAt(t, xDisk, 8*MiB, randBytes(3, 64*KiB))

	block := randBytes(10, 64*KiB)
	disktest.WriteAt(t, aDisk, 1*MiB+8*KiB, randBytes(11, 4*KiB)) // a hole in the template
	disktest.WriteAt(t, aDisk, 40*MiB+4*KiB, randBytes(12, 4*KiB))
	disktest.WriteAt(t, aDisk, 150*MiB, randBytes(13, 4*KiB))
	disktest.WriteAt(t, aDisk, 60*MiB, block)

	disktest.WriteAt(t, bDisk, 16*MiB, make([]byte, 64*KiB)) // the template's run, as written zeros
	punchHole(t, bDisk, 100*MiB, 256*KiB)                    // and as a hole
	disktest.WriteAt(t, bDisk, 5*MiB, randBytes(14, 4*KiB))

	resize(t, cDisk, 320*MiB)
	disktest.WriteAt(t, cDisk, 300*MiB, randBytes(15, 1*MiB))
	disktest.WriteAt(t, cDisk, 320*MiB-512*KiB, randBytes(16, 512*KiB))

	resize(t, gDisk, 192*MiB) // drops the template's last two runs
	disktest.WriteAt(t, gDisk, 192*MiB-4*KiB, randBytes(18, 4*KiB))

	a1, h := n.take(t, tenant, a, aDisk, s0.ID)
	record(a1.ID, h, a, 3*4*KiB+64*KiB)
	b1, h := n.take(t, tenant, b, bDisk, s0.ID)
	record(b1.ID, h, b, 4*KiB)
	c1, h := n.take(t, tenant, c, cDisk, s0.ID)
	record(c1.ID, h, c, 1*MiB+512*KiB)
	d1, h := n.take(t, tenant, d, dDisk, s0.ID)
	record(d1.ID, h, d, 0)
	g1, h := n.take(t, tenant, g, gDisk, s0.ID)
	record(g1.ID, h, g, 4*KiB)
	tr.a1, tr.b1, tr.c1, tr.d1, tr.g1 = a1.ID, b1.ID, c1.ID, d1.ID, g1.ID

	// E writes A's block once A1 has stored it.
	n.durable(t, a1.ID)
	e, eDisk := n.restore(t, tenant, s0.ID)
	disktest.WriteAt(t, eDisk, 60*MiB, block)
	e1, h := n.take(t, tenant, e, eDisk, s0.ID)
	record(e1.ID, h, e, 64*KiB)
	tr.e1 = e1.ID

	disktest.WriteAt(t, aDisk, 2*MiB, randBytes(17, 4*KiB))
	a2, h := n.take(t, tenant, a, aDisk, s0.ID)
	record(a2.ID, h, a, 4*KiB)
	tr.a2 = a2.ID

	for _, id := range tr.ids() {
		n.durable(t, id)
	}
	return tr
}

// TestTreeSearch takes a tree of snapshots on one node and checks each
// against the disk it was taken of, its lineage and its sizes; a second
// node sharing the blob store then rebuilds every one of them from the
// blob store alone, and a snapshot taken there restores back on the first.
// It runs on the file blob store and on S3 (versitygw).
func TestTreeSearch(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		treeScenario(t, func(t *testing.T) blob.Store { return openFileBlobs(t, dir) })
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		treeScenario(t, func(t *testing.T) blob.Store {
			b, err := s3.Open(context.Background(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
}

func treeScenario(t *testing.T, openBlobs func(*testing.T) blob.Store) {
	ctx := context.Background()
	n1 := newNode(t, "n1", openBlobs(t), testConfig())
	tr := buildTree(t, n1)

	// Lineage, as the API shows it: the base layer stays hidden.
	wantParent := map[string]string{
		tr.s0: "", tr.a1: tr.s0, tr.a2: tr.a1, tr.b1: tr.s0, tr.c1: tr.s0, tr.d1: tr.s0, tr.e1: tr.s0, tr.g1: tr.s0,
	}
	wantLineage := map[string][]string{
		tr.s0: {}, tr.a1: {tr.s0}, tr.a2: {tr.s0, tr.a1}, tr.b1: {tr.s0}, tr.c1: {tr.s0}, tr.d1: {tr.s0}, tr.e1: {tr.s0}, tr.g1: {tr.s0},
	}
	checkViews := func(t *testing.T, n *node, stage string) {
		t.Helper()
		for _, id := range tr.ids() {
			sn, err := n.eng.Lookup(ctx, tenant, id)
			if err != nil {
				t.Fatalf("%s: %s: Lookup(%s): %v", n.name, stage, id, err)
			}
			v, lineage := n.eng.View(sn), n.lineage(t, tenant, id)
			if v.ID != id || v.State != api.SnapshotDurable || v.Parent != wantParent[id] ||
				!slices.Equal(lineage, wantLineage[id]) || v.SandboxID != tr.sandbox[id] || v.Template != "tpl" {
				t.Errorf("%s: %s: View(%s) = id %s, state %s, parent %q, lineage %v, sandbox %s, template %s; want durable, parent %q, lineage %v, sandbox %s, template tpl",
					n.name, stage, id, v.ID, v.State, v.Parent, lineage, v.SandboxID, v.Template,
					wantParent[id], wantLineage[id], tr.sandbox[id])
			}
			if v.ChangedBytes != tr.changed[id] {
				t.Errorf("%s: %s: %s changed_bytes = %d, want %d", n.name, stage, id, v.ChangedBytes, tr.changed[id])
			}
			wantDisk := map[string]int64{tr.c1: 320 * MiB, tr.g1: 192 * MiB}[id]
			if wantDisk == 0 {
				wantDisk = templateSize
			}
			if v.DiskBytes != wantDisk {
				t.Errorf("%s: %s: %s disk_bytes = %d, want %d", n.name, stage, id, v.DiskBytes, wantDisk)
			}
		}
	}

	t.Log("node 1: lineage, sizes and restores")
	checkViews(t, n1, "where taken")
	if parent := readManifest(t, n1.blobs, tr.s0).Parent; parent != tr.base || len(tr.base) < 4 || tr.base[:3] != "tb-" {
		t.Errorf("S0's layer is stored against %q, want the template base %q (tb-…)", parent, tr.base)
	}
	for _, id := range tr.ids() {
		sn, err := n1.st.GetSnapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case id == tr.d1 || id == tr.e1:
			// Nothing new to store: D1 changed nothing, E1's block is A1's.
			if sn.StoredBytes != 0 {
				t.Errorf("%s stored_bytes = %d, want 0 (chunks deduplicated)", id, sn.StoredBytes)
			}
		case sn.StoredBytes <= 0 || sn.StoredBytes > sn.ChangedBytes+4*KiB:
			// Random data does not compress: about what changed.
			t.Errorf("%s stored_bytes = %d for %d bytes of random data", id, sn.StoredBytes, sn.ChangedBytes)
		}
		if sn.DurableAt.IsZero() || sn.DurableAt.Before(sn.CreatedAt) {
			t.Errorf("%s durable at %v, created at %v", id, sn.DurableAt, sn.CreatedAt)
		}
	}
	// B1's layer zeroes both of the template runs B cleared.
	zeros := map[int64]int64{}
	for _, x := range readManifest(t, n1.blobs, tr.b1).Extents {
		if x.Zero {
			zeros[x.Offset] += x.Length
		}
	}
	if zeros[16*MiB] != 64*KiB || zeros[100*MiB] != 256*KiB {
		t.Errorf("B1's zero extents = %v, want 64 KiB at 16 MiB and 256 KiB at 100 MiB", zeros)
	}
	n1.checkRestores(t, tenant, tr.hash)
	n1.checkRecords(t, append(tr.ids(), tr.base)...)
	if list, err := n1.eng.List(ctx, tenant, "", nil, listing.Page{}); err != nil || len(list) != len(tr.ids()) {
		t.Errorf("List(%s) = %d snapshots (%v), want %d", tenant, len(list), err, len(tr.ids()))
	}
	if list, err := n1.eng.List(ctx, otherTenant, "", nil, listing.Page{}); err != nil || len(list) != 0 {
		t.Errorf("List(%s) = %d snapshots (%v), want none", otherTenant, len(list), err)
	}
	if list, err := n1.eng.List(ctx, tenant, tr.sandbox[tr.a1], nil, listing.Page{}); err != nil || len(list) != 2 ||
		list[0].ID != tr.a1 || list[1].ID != tr.a2 {
		t.Errorf("List of A's sandbox = %v (%v), want A1, A2", list, err)
	}

	t.Log("node 2: the same blob store, an empty cache")
	n2 := newNode(t, "n2", openBlobs(t), testConfig())
	checkViews(t, n2, "from the blob store")
	for _, id := range tr.ids() {
		if _, err := n2.eng.Lookup(ctx, otherTenant, id); !isNotFound(err) {
			t.Errorf("node 2: Lookup(%s, %s) = %v, want not_found", otherTenant, id, err)
		}
	}
	n2.checkRestores(t, tenant, tr.hash)
	for _, id := range tr.ids() {
		if _, err := n2.st.GetSnapshot(ctx, id); err != nil {
			t.Errorf("node 2 has no record of %s after restoring it: %v", id, err)
		}
		if _, err := n2.eng.Lookup(ctx, otherTenant, id); !isNotFound(err) {
			t.Errorf("node 2, after restoring: Lookup(%s, %s) = %v, want not_found", otherTenant, id, err)
		}
	}
	checkViews(t, n2, "after restoring")

	t.Log("node 2 snapshots a disk restored there; node 1 restores it")
	sb, disk := n2.restore(t, tenant, tr.a2)
	disktest.WriteAt(t, disk, 3*MiB, randBytes(20, 4*KiB))
	f1, h := n2.take(t, tenant, sb, disk, tr.a2)
	sn := n2.durable(t, f1.ID)
	if v, l := n2.eng.View(sn), n2.lineage(t, tenant, f1.ID); v.Parent != tr.a2 || !slices.Equal(l, []string{tr.s0, tr.a1, tr.a2}) ||
		v.ChangedBytes != 4*KiB {
		t.Errorf("node 2's snapshot: parent %q, lineage %v, changed %d; want parent A2, lineage [S0 A1 A2], 4096 changed",
			v.Parent, l, v.ChangedBytes)
	}
	n2.checkRecords(t, f1.ID)
	n1.checkRestores(t, tenant, map[string]string{f1.ID: h})
	if _, err := n1.eng.Lookup(ctx, otherTenant, f1.ID); !isNotFound(err) {
		t.Errorf("node 1: Lookup(%s, %s) = %v, want not_found", otherTenant, f1.ID, err)
	}

	t.Log("node 3: a third node restores node 2's snapshot whole")
	n3 := newNode(t, "n3", openBlobs(t), testConfig())
	n3.checkRestores(t, tenant, map[string]string{f1.ID: h})

	t.Log("node 1 deletes every snapshot; its collector empties the store")
	for _, id := range append(tr.ids(), f1.ID) {
		if err := n1.eng.Delete(ctx, tenant, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	for range 2 { // the second removes the deleted/ markers
		if _, err := n1.eng.GC(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if left := keys(t, n1.blobs, ""); len(left) != 0 {
		t.Errorf("after deleting every snapshot and collecting, the store holds %v", left)
	}
}

// TestMaterializeOnce: restores of one snapshot at the same time on a
// node without it build its disk once, fetching each chunk once, and all
// of them get it. It runs a few rounds, one snapshot each, as the race it
// looks for does not show every time.
func TestMaterializeOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n1 := newNode(t, "n1", openFileBlobs(t, dir), testConfig())
	sb, disk := n1.newDisk(t, n1.template(t))
	const rounds, callers = 5, 16
	var ids []string
	hashes := map[string]string{}
	for i := range rounds {
		disktest.WriteAt(t, disk, int64(7+i)*MiB, randBytes(uint64(i), 64*KiB))
		sn, h := n1.take(t, tenant, sb, disk, "")
		n1.durable(t, sn.ID)
		ids, hashes[sn.ID] = append(ids, sn.ID), h
	}

	// One restore at a time.
	one := &faultStore{Store: openFileBlobs(t, dir)}
	n2 := newNode(t, "n2", one, testConfig())
	var singles []int64
	for _, id := range ids {
		before := one.chunkGets.Load()
		n2.checkRestores(t, tenant, map[string]string{id: hashes[id]})
		singles = append(singles, one.chunkGets.Load()-before)
	}

	many := &faultStore{Store: openFileBlobs(t, dir)}
	n3 := newNode(t, "n3", many, testConfig())
	var failed []string
	for r, id := range ids {
		sn, err := n3.eng.Lookup(ctx, tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		before := many.chunkGets.Load()
		paths := make([]string, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() { paths[i], errs[i] = n3.eng.Materialize(ctx, sn) })
		}
		wg.Wait()
		want := filepath.Join(n3.cacheDir(), id+".img")
		for i := range callers {
			if errs[i] != nil {
				failed = append(failed, fmt.Sprintf("round %d, Materialize %d: %v", r, i, errs[i]))
			} else if paths[i] != want {
				t.Errorf("round %d: Materialize %d = %s, want %s", r, i, paths[i], want)
			}
		}
		if got := contentHash(t, want); got != hashes[id] {
			t.Errorf("round %d: materialized %s = %s, want %s", r, id, got, hashes[id])
		}
		if got := many.chunkGets.Load() - before; got != singles[r] {
			t.Errorf("round %d: %d concurrent restores fetched %d chunks, one restore fetches %d", r, callers, got, singles[r])
		}
		if rec, err := n3.st.GetSnapshot(ctx, id); err != nil || rec.State != api.SnapshotDurable {
			t.Errorf("round %d: node 3's record of %s after the restores: %s (%v)", r, id, rec.State, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("restore.go Materialize(): %d of %d concurrent restores of snapshots new to the node failed: "+
			"each caller sees no record (GetSnapshot) and inserts one; the later ones hit the UNIQUE id: %s",
			len(failed), rounds*callers, strings.Join(failed, "; "))
	}
}
