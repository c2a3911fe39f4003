//go:build linux

package snapshot_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/disk/disktest"
	"warren/internal/listing"
	"warren/internal/snapshot"
)

// workspaceImage makes a sandbox's workspace disk: a sparse 64 MiB image
// of its own, not a clone of the template.
func (n *node) workspaceImage(t *testing.T, sandboxID string) string {
	t.Helper()
	path := filepath.Join(n.pool.Dir(), "sandboxes", sandboxID+"-ws.img")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 * MiB); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func workspace(tenant, sandboxID, image, origin string) snapshot.Source {
	return snapshot.Source{
		Tenant: tenant, SandboxID: sandboxID, Scope: api.ScopeWorkspace, Image: image, Origin: origin, Template: "tpl",
	}
}

// TestWorkspaceScope: a sandbox's workspace disk has a lineage of its own
// beside its root disk's: its first layer is over an empty disk (no
// template base), each later one over the previous workspace snapshot; it
// restores on another node, forks there, and is collected on its own.
func TestWorkspaceScope(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n1 := newNode(t, "n1", openFileBlobs(t, dir), testConfig())
	x, root := n1.newDisk(t, n1.template(t))
	ws := n1.workspaceImage(t, x)
	disktest.WriteAt(t, ws, 1*MiB, randBytes(1, 128*KiB))
	disktest.WriteAt(t, ws, 40*MiB, randBytes(2, 64*KiB))

	s0, hs0 := n1.take(t, tenant, x, root, "")
	w0, hw0 := n1.takeSource(t, workspace(tenant, x, ws, ""))
	disktest.WriteAt(t, root, 3*MiB, randBytes(3, 4*KiB))
	s1, hs1 := n1.take(t, tenant, x, root, "")
	disktest.WriteAt(t, ws, 2*MiB, randBytes(4, 4*KiB))
	w1, hw1 := n1.takeSource(t, workspace(tenant, x, ws, ""))
	for _, id := range []string{s0.ID, w0.ID, s1.ID, w1.ID} {
		n1.durable(t, id)
	}
	for _, tc := range []struct {
		id, scope, parent string
		lineage           []string
		changed           int64
	}{
		{s0.ID, api.ScopeRoot, "", []string{}, 0},
		{w0.ID, api.ScopeWorkspace, "", []string{}, 192 * KiB},
		{s1.ID, api.ScopeRoot, s0.ID, []string{s0.ID}, 4 * KiB},
		{w1.ID, api.ScopeWorkspace, w0.ID, []string{w0.ID}, 4 * KiB},
	} {
		sn, err := n1.eng.Lookup(ctx, tenant, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		v, lineage := n1.eng.View(sn), n1.lineage(t, tenant, tc.id)
		if v.Scope != tc.scope || v.Parent != tc.parent || !slices.Equal(lineage, tc.lineage) || v.ChangedBytes != tc.changed {
			t.Errorf("View(%s) = scope %s, parent %q, lineage %v, changed %d; want %s, %q, %v, %d",
				tc.id, v.Scope, v.Parent, lineage, v.ChangedBytes, tc.scope, tc.parent, tc.lineage, tc.changed)
		}
	}
	if m := readManifest(t, n1.blobs, w0.ID); m.Parent != "" || m.DiskSize != 64*MiB {
		t.Errorf("W0's layer: parent %q, disk %d; want over an empty disk, 64 MiB", m.Parent, m.DiskSize)
	}
	n1.checkRecords(t, s0.Parent, s0.ID, s1.ID, w0.ID, w1.ID)

	t.Log("node 2 restores the workspace and forks it")
	n2 := newNode(t, "n2", openFileBlobs(t, dir), testConfig())
	n2.checkRestores(t, tenant, map[string]string{w0.ID: hw0, w1.ID: hw1})
	if sn, err := n2.eng.Lookup(ctx, tenant, w1.ID); err != nil || sn.Scope != api.ScopeWorkspace {
		t.Errorf("node 2: Lookup(W1) scope = %q (%v), want workspace", sn.Scope, err)
	}
	y, yws := n2.restore(t, tenant, w1.ID)
	disktest.WriteAt(t, yws, 5*MiB, randBytes(5, 4*KiB))
	f1, hf1 := n2.takeSource(t, workspace(tenant, y, yws, w1.ID))
	if sn := n2.durable(t, f1.ID); sn.Parent != w1.ID || sn.Scope != api.ScopeWorkspace || sn.ChangedBytes != 4*KiB {
		t.Errorf("fork of W1: parent %s, scope %s, changed %d; want W1, workspace, 4096", sn.Parent, sn.Scope, sn.ChangedBytes)
	}
	n1.checkRestores(t, tenant, map[string]string{f1.ID: hf1})

	t.Log("the workspace lineage is collected on its own")
	wsChunks := append(append(chunksOf(t, n1, w0.ID), chunksOf(t, n1, w1.ID)...), chunksOf(t, n1, f1.ID)...)
	for _, id := range []string{w0.ID, w1.ID, f1.ID} {
		if err := n1.eng.Delete(ctx, tenant, id); err != nil {
			t.Fatal(err)
		}
	}
	res, err := n1.eng.GC(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.ManifestsDeleted != 3 || res.ChunksDeleted != len(wsChunks) {
		t.Errorf("GC after deleting the workspace snapshots = %+v, want 3 manifests and %d chunks", res, len(wsChunks))
	}
	checkBlobInvariants(t, n1.blobs)
	newNode(t, "n3", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, map[string]string{s0.ID: hs0, s1.ID: hs1})

	t.Log("a root disk's first snapshot needs its template")
	z, zroot := n1.newDisk(t, n1.template(t))
	src := n1.source(tenant, z, zroot, "")
	src.TemplateImage = ""
	if sn, err := n1.eng.Take(ctx, src, noQuiesce); err == nil || !strings.Contains(err.Error(), "template") {
		t.Errorf("Take of a root disk without its template = %+v, %v; want an error naming the template", sn, err)
	}
	if list, err := n1.eng.List(ctx, tenant, z, nil, listing.Page{}); err != nil || len(list) != 0 {
		t.Errorf("snapshots of %s after the refused Take: %v (%v), want none", z, list, err)
	}
}
