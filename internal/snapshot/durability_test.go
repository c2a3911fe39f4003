//go:build linux

package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"warren/api"
	"warren/internal/disk/disktest"
	"warren/internal/ident"
	"warren/internal/store"
)

// TestRestartResumesUploads closes the engine while uploads are held in
// the blob store, first the template base's with the first snapshot
// waiting on it, then a later snapshot's at its first chunk: they stay
// pending, and a new engine on the same store and pool makes them durable,
// byte-identical on a fresh node.
func TestRestartResumesUploads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := &faultStore{Store: openFileBlobs(t, dir)}
	n := newNode(t, "n1", fs, testConfig())
	sb, disk := n.newDisk(t, n.template(t))
	disktest.WriteAt(t, disk, 9*MiB, randBytes(1, 64*KiB))

	pending := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			sn, err := n.st.GetSnapshot(ctx, id)
			if err != nil || sn.State != api.SnapshotPending {
				t.Errorf("after Close, %s is %q (%v), want pending", id, sn.State, err)
			}
			if exists(t, fs, manifestKey(id)) {
				t.Errorf("after Close, pending %s has a manifest", id)
			}
		}
	}

	t.Log("the base's upload held at its intent")
	g := newGate(t, "intents/")
	fs.setOnPut(g.hook)
	s0, h0 := n.take(t, tenant, sb, disk, "")
	if key := g.await(t); key != intentKey(s0.Parent) {
		t.Fatalf("first Put held: %s, want the base's intent %s", key, intentKey(s0.Parent))
	}
	n.eng.Close()
	fs.setOnPut(nil)
	pending(s0.Parent, s0.ID)
	n.restart(t)
	n.durable(t, s0.ID)
	n.durable(t, s0.Parent)

	t.Log("a snapshot's upload held at its first chunk")
	g = newGate(t, "chunks/")
	fs.setOnPut(g.hook)
	disktest.WriteAt(t, disk, 30*MiB, randBytes(2, 64*KiB))
	s1, h1 := n.take(t, tenant, sb, disk, "")
	g.await(t)
	if !exists(t, fs, intentKey(s1.ID)) {
		t.Errorf("an upload in progress left no intent %s", intentKey(s1.ID))
	}
	n.eng.Close()
	fs.setOnPut(nil)
	pending(s1.ID)
	n.restart(t)
	sn := n.durable(t, s1.ID)
	if sn.Parent != s0.ID || sn.ChangedBytes != 64*KiB {
		t.Errorf("resumed %s: parent %s, changed %d; want parent %s, 65536 changed", s1.ID, sn.Parent, sn.ChangedBytes, s0.ID)
	}
	if left := keys(t, fs, "intents/"); len(left) != 0 {
		t.Errorf("intents left after every upload finished: %v", left)
	}
	n.checkRecords(t, s0.Parent, s0.ID, s1.ID)
	want := map[string]string{s0.ID: h0, s1.ID: h1}
	n.checkRestores(t, tenant, want)
	newNode(t, "n2", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, want)
}

// TestOpenCleansUp: at Open, a pending snapshot whose cache image is gone
// is failed with a reason, and cache files no record owns (the temporary
// clones of an interrupted daemon, orphans) are removed, while the pending
// uploads that can go on do.
func TestOpenCleansUp(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Store: openFileBlobs(t, t.TempDir())}
	n := newNode(t, "n1", fs, testConfig())
	sb, disk := n.newDisk(t, n.template(t))
	g := newGate(t, "intents/")
	fs.setOnPut(g.hook)
	s0, _ := n.take(t, tenant, sb, disk, "")
	g.await(t)
	n.eng.Close()
	fs.setOnPut(nil)

	if err := os.Remove(filepath.Join(n.cacheDir(), s0.ID+".img")); err != nil {
		t.Fatal(err)
	}
	strays := []string{
		ident.New(s0.ID + ".tmp-"), // a clone cut short
		ident.New(s0.Parent + ".tmp-"),
		ident.New("sn-") + ".img", // no record owns it
		"junk",
	}
	for _, name := range strays {
		if err := os.WriteFile(filepath.Join(n.cacheDir(), name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.restart(t)

	// Open itself fails it, rather than an upload that cannot read it.
	sn, err := n.st.GetSnapshot(ctx, s0.ID)
	if err != nil || sn.State != api.SnapshotFailed || sn.Error == "" {
		t.Errorf("pending %s without its image, once Open returns: state %s, error %q (%v); want failed with a reason",
			s0.ID, sn.State, sn.Error, err)
	}
	if sn := n.wait(t, s0.ID); sn.State != api.SnapshotFailed {
		t.Errorf("Wait(%s) = %s, want failed", s0.ID, sn.State)
	}
	if got, err := n.eng.Lookup(ctx, tenant, s0.ID); err != nil || got.State != api.SnapshotFailed {
		t.Errorf("Lookup(%s) = %s (%v), want it failed", s0.ID, got.State, err)
	}
	if _, err := n.eng.Materialize(ctx, sn); err == nil {
		t.Errorf("Materialize of failed %s without its image succeeded", s0.ID)
	}
	n.durable(t, s0.Parent)
	entries, err := os.ReadDir(n.cacheDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{s0.Parent + ".img"}; !slices.Equal(names, want) {
		t.Errorf("cache after Open = %v, want %v", names, want)
	}

	// The sandbox's next snapshot skips the failed one.
	s1, h1 := n.take(t, tenant, sb, disk, "")
	if s1.Parent != s0.Parent {
		t.Errorf("next snapshot's parent = %s, want the base %s (the failed one skipped)", s1.Parent, s0.Parent)
	}
	n.durable(t, s1.ID)
	n.checkRecords(t, s0.ID, s1.ID, s0.Parent)
	n.checkRestores(t, tenant, map[string]string{s1.ID: h1})
}

// TestUploadFailures: a blob store that refuses every Put fails the
// snapshot (and the base under it) after Config.Attempts, with the reason
// and no manifest; the next snapshot tries the base again. A store that
// fails a few Puts at any step, or loses one, still gets every snapshot
// durable and whole.
func TestUploadFailures(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := &faultStore{Store: openFileBlobs(t, dir)}
	cfg := testConfig()
	cfg.Attempts = 3
	n := newNode(t, "n1", fs, cfg)
	sb, disk := n.newDisk(t, n.template(t))

	fs.setOnPut(failPuts("", -1))
	s0, _ := n.take(t, tenant, sb, disk, "")
	for _, id := range []string{s0.Parent, s0.ID} {
		sn := n.wait(t, id)
		if sn.State != api.SnapshotFailed || !strings.Contains(sn.Error, "3 attempts") ||
			!strings.Contains(sn.Error, errInjected.Error()) {
			t.Errorf("%s: state %s, error %q; want failed after 3 attempts with the blob store's error", id, sn.State, sn.Error)
		}
	}
	if got := keys(t, fs, ""); len(got) != 0 {
		t.Errorf("blob store after failed uploads: %v, want nothing", got)
	}
	if sn, err := n.eng.Lookup(ctx, tenant, s0.ID); err != nil || sn.State != api.SnapshotFailed || sn.Error == "" {
		t.Errorf("Lookup(%s) = %s %q (%v), want failed with the reason", s0.ID, sn.State, sn.Error, err)
	}
	n.checkRecords(t, s0.Parent, s0.ID)

	fs.setOnPut(nil)
	s1, h1 := n.take(t, tenant, sb, disk, "")
	if s1.Parent != s0.Parent {
		t.Errorf("after a failure the next snapshot's parent = %s, want the base %s again", s1.Parent, s0.Parent)
	}
	n.durable(t, s1.ID)
	n.durable(t, s1.Parent)
	want := map[string]string{s1.ID: h1}

	for i, step := range []struct {
		name string
		hook func(context.Context, string) error
	}{
		{"intent Puts fail twice", failPuts("intents/", cfg.Attempts-1)},
		{"chunk Puts fail twice", failPuts("chunks/", cfg.Attempts-1)},
		{"manifest Puts fail twice", failPuts("manifests/", cfg.Attempts-1)},
		// The chunk is verified before the manifest is written.
		{"a chunk Put is lost", losePuts("chunks/", 1)},
	} {
		fs.setOnPut(step.hook)
		disktest.WriteAt(t, disk, int64(50+i)*MiB, randBytes(uint64(10+i), 64*KiB))
		sn, h := n.take(t, tenant, sb, disk, "")
		if got := n.durable(t, sn.ID); got.ChangedBytes != 64*KiB {
			t.Errorf("%s (%s): changed %d, want 65536", sn.ID, step.name, got.ChangedBytes)
		}
		want[sn.ID] = h
		n.checkRecords(t, sn.ID)
	}
	fs.setOnPut(nil)
	newNode(t, "n2", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, want)
}

// TestFailedParent: a snapshot whose parent fails is stored against its
// grandparent, and restores byte-identically.
func TestFailedParent(t *testing.T) {
	dir := t.TempDir()
	fs := &faultStore{Store: openFileBlobs(t, dir)}
	n := newNode(t, "n1", fs, testConfig())
	sb, disk := n.newDisk(t, n.template(t))
	s0, _ := n.take(t, tenant, sb, disk, "")
	n.durable(t, s0.ID)

	var mu sync.Mutex
	failing := map[string]bool{}
	g := newGate(t, "intents/")
	fs.setOnPut(func(ctx context.Context, key string) error {
		if err := g.hook(ctx, key); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if failing[key] {
			return errInjected
		}
		return nil
	})
	disktest.WriteAt(t, disk, 70*MiB, randBytes(1, 64*KiB))
	a1, _ := n.take(t, tenant, sb, disk, "")
	g.await(t)
	mu.Lock()
	failing[intentKey(a1.ID)] = true
	mu.Unlock()
	disktest.WriteAt(t, disk, 70*MiB, randBytes(2, 64*KiB))
	disktest.WriteAt(t, disk, 71*MiB, randBytes(3, 4*KiB))
	a2, h2 := n.take(t, tenant, sb, disk, "")
	if a2.Parent != a1.ID {
		t.Fatalf("A2's intended parent = %s, want A1 %s", a2.Parent, a1.ID)
	}
	g.release()

	if sn := n.wait(t, a1.ID); sn.State != api.SnapshotFailed {
		t.Fatalf("A1 = %s, want failed", sn.State)
	}
	sn := n.durable(t, a2.ID)
	if sn.Parent != s0.ID || sn.ChangedBytes != 64*KiB+4*KiB {
		t.Errorf("A2 over failed A1: parent %s, changed %d; want the grandparent %s, 69632 changed", sn.Parent, sn.ChangedBytes, s0.ID)
	}
	if m := readManifest(t, fs, a2.ID); m.Parent != s0.ID {
		t.Errorf("A2's manifest parent = %s, want %s", m.Parent, s0.ID)
	}
	if v, l := n.eng.View(sn), n.lineage(t, tenant, a2.ID); v.Parent != s0.ID || !slices.Equal(l, []string{s0.ID}) {
		t.Errorf("View(A2): parent %s, lineage %v; want %s, [%s]", v.Parent, l, s0.ID, s0.ID)
	}
	n.checkRecords(t, s0.ID, a1.ID, a2.ID)
	fs.setOnPut(nil)
	newNode(t, "n2", openFileBlobs(t, dir), testConfig()).checkRestores(t, tenant, map[string]string{a2.ID: h2})
}

// TestDurabilityInvariant: at every quiet moment, with snapshots durable,
// pending (upload held) and failed side by side, a durable snapshot's
// manifest lists only chunks the store holds, with their sizes, over a
// complete lineage, and a pending or failed one has no manifest.
func TestDurabilityInvariant(t *testing.T) {
	fs := &faultStore{Store: openFileBlobs(t, t.TempDir())}
	n := newNode(t, "n1", fs, testConfig())
	tpl := n.template(t)
	sbA, diskA := n.newDisk(t, tpl)
	s0, _ := n.take(t, tenant, sbA, diskA, "")
	n.durable(t, s0.ID)

	sbF, diskF := n.restore(t, tenant, s0.ID)
	disktest.WriteAt(t, diskF, 80*MiB, randBytes(1, 256*KiB))
	fs.setOnPut(failPuts("chunks/", -1))
	f1, _ := n.take(t, tenant, sbF, diskF, s0.ID)
	if sn := n.wait(t, f1.ID); sn.State != api.SnapshotFailed {
		t.Fatalf("F1 = %s, want failed", sn.State)
	}

	sbP, diskP := n.restore(t, tenant, s0.ID)
	disktest.WriteAt(t, diskP, 90*MiB, randBytes(2, 5*MiB)) // two chunks
	g := newGate(t, "chunks/")
	fs.setOnPut(g.hook)
	p1, _ := n.take(t, tenant, sbP, diskP, s0.ID)
	g.await(t)
	n.checkRecords(t, s0.Parent, s0.ID, f1.ID, p1.ID)

	g.release()
	n.durable(t, p1.ID)
	fs.setOnPut(nil)
	n.checkRecords(t, s0.Parent, s0.ID, f1.ID, p1.ID)

	// A failed upload is no longer in progress: it must not leave an
	// intent behind, which would keep its parent's lineage alive for the
	// collector for ever (GC never removes intents).
	if left := keys(t, fs, "intents/"); len(left) != 0 {
		t.Fatalf("upload.go upload(): a snapshot that failed after its attempts leaves %v in the blob store; "+
			"GC treats every intent as live, for ever, so its parent's layers are never collected", left)
	}
}

// TestStoredBytesAfterRetry: stored_bytes is what the layer added to the
// blob store. When an attempt stores the chunks and then fails (here at the
// manifest), the attempt that succeeds finds them stored and reports 0.
func TestStoredBytesAfterRetry(t *testing.T) {
	fs := &faultStore{Store: openFileBlobs(t, t.TempDir())}
	n := newNode(t, "n1", fs, testConfig())
	sb, disk := n.newDisk(t, n.template(t))
	s0, _ := n.take(t, tenant, sb, disk, "")
	n.durable(t, s0.ID)

	disktest.WriteAt(t, disk, 20*MiB, randBytes(1, 256*KiB))
	fs.setOnPut(failPuts("manifests/", 1))
	s1, _ := n.take(t, tenant, sb, disk, "")
	sn := n.durable(t, s1.ID)
	var want int64
	for _, x := range readManifest(t, fs, s1.ID).Extents {
		want += x.Stored
	}
	if sn.StoredBytes != want {
		t.Fatalf("upload.go uploadOnce(): %s stored %d new bytes of chunks (its first attempt failed at the manifest), "+
			"but stored_bytes = %d: only the last attempt's WriteStats.Stored is recorded", s1.ID, want, sn.StoredBytes)
	}
}

// TestTake covers the moment a snapshot is taken: the disk is cloned
// while frozen (what the sandbox writes after thaw is not in it), thaw is
// called once whatever happens, and a failed freeze, clone or thaw fails
// the snapshot with the reason and leaves nothing in the cache.
func TestTake(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "n1", openFileBlobs(t, t.TempDir()), testConfig())
	sb, disk := n.newDisk(t, n.template(t))

	var thaws int
	var frozenHash string
	freeze := func(context.Context) (func() error, error) {
		disktest.WriteAt(t, disk, 11*MiB, randBytes(1, 4*KiB)) // flushed by the freeze
		return func() error {
			thaws++
			frozenHash = contentHash(t, disk)
			disktest.WriteAt(t, disk, 12*MiB, randBytes(2, 4*KiB)) // after thaw
			return nil
		}, nil
	}
	s0, err := n.eng.Take(ctx, n.source(tenant, sb, disk, ""), freeze)
	if err != nil {
		t.Fatal(err)
	}
	if thaws != 1 {
		t.Errorf("thaw called %d times, want 1", thaws)
	}
	if s0.DiskBytes != templateSize || s0.Ack <= 0 {
		t.Errorf("taken: disk_bytes %d, ack %v; want %d and the time frozen", s0.DiskBytes, s0.Ack, templateSize)
	}
	if got := n.durable(t, s0.ID); got.ChangedBytes != 4*KiB {
		t.Errorf("changed %d, want 4096: the block written while frozen only", got.ChangedBytes)
	}
	n.checkRestores(t, tenant, map[string]string{s0.ID: frozenHash})

	errFreeze, errThaw := errors.New("fsfreeze: device busy"), errors.New("thaw: agent gone")
	for _, tc := range []struct {
		name      string
		image     string
		freezeErr error
		thawErr   error
		wantErr   error
		reason    string // in the record's error
	}{
		{"freeze fails", disk, errFreeze, nil, errFreeze, errFreeze.Error()},
		{"clone fails", filepath.Join(n.pool.Dir(), "sandboxes", "missing.img"), nil, nil, os.ErrNotExist, "missing.img"},
		{"thaw fails", disk, nil, errThaw, errThaw, errThaw.Error()},
	} {
		thaws = 0
		freeze := func(context.Context) (func() error, error) {
			if tc.freezeErr != nil {
				return nil, tc.freezeErr
			}
			return func() error { thaws++; return tc.thawErr }, nil
		}
		sn, err := n.eng.Take(ctx, n.source(tenant, sb, tc.image, ""), freeze)
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: Take error = %v, want %v", tc.name, err, tc.wantErr)
		}
		if wantThaws := map[bool]int{true: 0, false: 1}[tc.freezeErr != nil]; thaws != wantThaws {
			t.Errorf("%s: thaw called %d times, want %d", tc.name, thaws, wantThaws)
		}
		rec, gerr := n.st.GetSnapshot(ctx, sn.ID)
		if gerr != nil || rec.State != api.SnapshotFailed || !strings.Contains(rec.Error, tc.reason) {
			t.Errorf("%s: record %s = %s %q (%v), want failed with the reason", tc.name, sn.ID, rec.State, rec.Error, gerr)
		}
		entries, err := os.ReadDir(n.cacheDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != s0.ID+".img" && e.Name() != s0.Parent+".img" {
				t.Errorf("%s: cache holds %s", tc.name, e.Name())
			}
		}
	}

	// The failures do not count as the sandbox's latest snapshot.
	s1, _ := n.take(t, tenant, sb, disk, "")
	if s1.Parent != s0.ID {
		t.Errorf("next snapshot's parent = %s, want %s", s1.Parent, s0.ID)
	}
	n.durable(t, s1.ID)
}

// TestChangedWhileUploading: a pending snapshot that another writer fails
// or deletes while its upload runs (a control replica, another node's
// delete) is left as that writer made it: the upload stops at once, without
// retrying, overwriting the record or leaving its intent, and a failed
// one's manifest does not stay to say it is durable. Before snapshot moves
// were conditional, the upload wrote the failed record back to durable.
func TestChangedWhileUploading(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Store: openFileBlobs(t, t.TempDir())}
	n := newNode(t, "n1", fs, testConfig())
	sb, disk := n.newDisk(t, n.template(t))
	s0, _ := n.take(t, tenant, sb, disk, "")
	n.durable(t, s0.ID)

	for i, tc := range []struct {
		name   string
		change func(id string) error
	}{
		{"failed", func(id string) error {
			_, err := n.st.FailSnapshot(ctx, id, "", "failed by another writer", 0)
			return err
		}},
		{"deleted", func(id string) error { return n.st.DeleteSnapshot(ctx, id) }},
	} {
		var puts atomic.Int64
		g := newGate(t, "manifests/")
		fs.setOnPut(func(ctx context.Context, key string) error {
			puts.Add(1)
			return g.hook(ctx, key)
		})
		disktest.WriteAt(t, disk, int64(60+i)*MiB, randBytes(uint64(20+i), 64*KiB))
		sn, _ := n.take(t, tenant, sb, disk, "")
		g.await(t)
		if err := tc.change(sn.ID); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		g.release()
		wctx, cancel := context.WithTimeout(ctx, waitLimit)
		rec, err := n.eng.Wait(wctx, sn.ID)
		cancel()
		atEnd := puts.Load()
		fs.setOnPut(nil)

		switch tc.name {
		case "failed":
			if err != nil || rec.State != api.SnapshotFailed || rec.Error != "failed by another writer" {
				t.Errorf("%s: record after the upload = %s %q (%v), want the other writer's", tc.name, rec.State, rec.Error, err)
			}
			n.checkRecords(t, sn.ID) // no manifest
		case "deleted":
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: record after the upload: %+v (%v), want none", tc.name, rec, err)
			}
			if _, err := os.Stat(filepath.Join(n.cacheDir(), sn.ID+".img")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the cache still holds its image (%v)", tc.name, err)
			}
		}
		if exists(t, fs, intentKey(sn.ID)) {
			t.Errorf("%s: the upload left its intent", tc.name)
		}
		// One intent, one chunk and one manifest: no attempt after the first.
		if atEnd != 3 {
			t.Errorf("%s: %d Puts, want 3: the upload went on after it lost its snapshot", tc.name, atEnd)
		}
	}
}
