//go:build linux

package snapshot_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"warren/internal/disk/disktest"
	"warren/internal/layer"
)

// TestDedupeWithinTenant is the regression test of the hardening issue,
// item 6: deduplication told one tenant what another stored. Tenant B
// snapshotted 16 MiB of secret bytes; tenant A snapshotted the same bytes
// and its snapshot stored 4 KiB where a random control of the same size
// stored 16 MiB, because chunks were named by their content alone and A's
// upload found B's chunks. Now each tenant's chunks have names of their own:
// A's copy costs what the control costs, and only A's own second copy is
// deduplicated.
func TestDedupeWithinTenant(t *testing.T) {
	n := newNode(t, "n1", openFileBlobs(t, t.TempDir()), testConfig())
	tpl := n.template(t)
	const off, size = 120 * MiB, 16 * MiB // clear of the template's runs
	secret, control := randBytes(61, size), randBytes(62, size)

	snap := func(tenant string, data []byte) (id string, stored int64, hash string) {
		t.Helper()
		x, disk := n.newDisk(t, tpl)
		disktest.WriteAt(t, disk, off, data)
		sn, h := n.take(t, tenant, x, disk, "")
		return sn.ID, n.durable(t, sn.ID).StoredBytes, h
	}
	theirs, theirStored, hTheirs := snap(otherTenant, secret)
	mine, myStored, hMine := snap(tenant, secret)
	ctl, ctlStored, hCtl := snap(tenant, control)
	again, againStored, hAgain := snap(tenant, secret)

	if theirStored < size || myStored != ctlStored {
		t.Errorf("stored_bytes: tenant B's secret %d, tenant A's copy of it %d, A's random control %d; "+
			"want A's copy to cost what the control costs (at least %d)", theirStored, myStored, ctlStored, size)
	}
	if againStored != 0 {
		t.Errorf("stored_bytes of tenant A's second copy of its own bytes = %d, want 0 (deduplicated)", againStored)
	}
	theirChunks, myChunks := chunksOf(t, n, theirs), chunksOf(t, n, mine)
	if len(myChunks) != size/(4*MiB) {
		t.Fatalf("tenant A's layer lists %d chunks, want %d", len(myChunks), size/(4*MiB))
	}
	for _, c := range myChunks {
		if slices.Contains(theirChunks, c) {
			t.Errorf("chunk %s is shared by tenant A's and tenant B's snapshots", c)
		}
	}
	if got := chunksOf(t, n, again); !slices.Equal(got, myChunks) {
		t.Errorf("tenant A's second copy lists chunks %v, want its first copy's %v", got, myChunks)
	}
	n.checkRecords(t, theirs, mine, ctl, again)
	n.checkRestores(t, otherTenant, map[string]string{theirs: hTheirs})
	n.checkRestores(t, tenant, map[string]string{mine: hMine, ctl: hCtl, again: hAgain})

	// A snapshot of no tenant would be named plainly, beside the template
	// base layers, where every tenant's uploads find its chunks.
	x, disk := n.newDisk(t, tpl)
	if sn, err := n.eng.Take(context.Background(), n.source("", x, disk, ""), noQuiesce); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("Take without a tenant = %+v, %v; want an error naming the tenant", sn, err)
	}
}

// TestVersion1Snapshots: snapshots stored before chunks had namespaces
// (format version 1: plain sha256 names, shared by every tenant) still
// restore, on any node; a snapshot taken over one is stored in the new
// format, and the collector keeps the old chunks while a version 1
// manifest lists them.
func TestVersion1Snapshots(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n1 := newNode(t, "n1", openFileBlobs(t, dir), testConfig())
	x, disk := n1.newDisk(t, n1.template(t))
	disktest.WriteAt(t, disk, 3*MiB, randBytes(71, 5*MiB))
	s0, _ := n1.take(t, tenant, x, disk, "")
	disktest.WriteAt(t, disk, 150*MiB, randBytes(72, 64*KiB))
	s1, h1 := n1.take(t, tenant, x, disk, "")
	n1.durable(t, s0.ID)
	n1.durable(t, s1.ID)
	for _, id := range []string{s0.ID, s1.ID} {
		toVersion1(t, n1, id)
	}
	n1.eng.Close() // it remembers the manifests as it wrote them

	n2 := newNode(t, "n2", openFileBlobs(t, dir), testConfig())
	n2.checkRestores(t, tenant, map[string]string{s1.ID: h1})
	y, ydisk := n2.restore(t, tenant, s1.ID)
	disktest.WriteAt(t, ydisk, 7*MiB, randBytes(73, 128*KiB))
	s2, h2 := n2.take(t, tenant, y, ydisk, s1.ID)
	if sn := n2.durable(t, s2.ID); sn.Parent != s1.ID {
		t.Errorf("snapshot over a version 1 one: parent %s, want %s", sn.Parent, s1.ID)
	}
	if m := readManifest(t, n2.blobs, s2.ID); m.Version != layer.VersionNamespaced || m.Namespace != tenant {
		t.Errorf("snapshot over a version 1 one: version %d, namespace %q; want %d, %q",
			m.Version, m.Namespace, layer.VersionNamespaced, tenant)
	}
	newNode(t, "n3", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, map[string]string{s1.ID: h1, s2.ID: h2})

	s2Chunks := chunksOf(t, n2, s2.ID)
	if err := n2.eng.Delete(ctx, tenant, s2.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := n2.eng.GC(ctx, 0); err != nil || res.ChunksDeleted != len(s2Chunks) {
		t.Errorf("GC after deleting the new snapshot = %+v, %v; want its %d chunks deleted", res, err, len(s2Chunks))
	}
	checkBlobInvariants(t, n2.blobs)
	newNode(t, "n4", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, map[string]string{s1.ID: h1})
}

// toVersion1 rewrites the snapshot's layer as format version 1 stored it:
// each chunk under the plain sha256 of its bytes, the manifest without a
// namespace; the namespaced chunks are deleted.
func toVersion1(t *testing.T, n *node, id string) {
	t.Helper()
	ctx := context.Background()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	m := readManifest(t, n.blobs, id)
	if m.Namespace != tenant {
		t.Fatalf("layer %s: namespace %q, want %q", id, m.Namespace, tenant)
	}
	old := m.Chunks()
	for i, x := range m.Extents {
		if x.Zero {
			continue
		}
		compressed, err := n.blobs.Get(ctx, "chunks/"+x.Chunk)
		if err != nil {
			t.Fatal(err)
		}
		data, err := dec.DecodeAll(compressed, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.Extents[i].Chunk = layer.ChunkName("", data)
		if err := n.blobs.Put(ctx, "chunks/"+m.Extents[i].Chunk, compressed); err != nil {
			t.Fatal(err)
		}
	}
	m.Version, m.Namespace = layer.VersionPlain, ""
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.blobs.Put(ctx, manifestKey(id), b); err != nil {
		t.Fatal(err)
	}
	for _, c := range old {
		if err := n.blobs.Delete(ctx, "chunks/"+c); err != nil {
			t.Fatal(err)
		}
	}
}
