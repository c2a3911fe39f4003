package blockdev

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warren/internal/blob"
	"warren/internal/chunkstore"
	"warren/internal/wait"
)

// storedChunks is the bytes of every chunk object in t.
func storedChunks(t testing.TB, tier chunkstore.Store) int64 {
	t.Helper()
	infos, err := tier.B.List(context.Background(), "chunks/")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, info := range infos {
		if strings.HasPrefix(info.Key, "chunks/") {
			n += info.Size
		}
	}
	return n
}

// TestRewritesAreReclaimed is the regression test of issue 35, row 4: the
// chunks of layers a compaction superseded stayed in the tiers until an
// admin collected them, so every rewrite of a file grew the blob store by
// the file's size.
func TestRewritesAreReclaimed(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(35, 4))
	object, _ := tierOf(t)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "rewritten", Size: 8 << 20},
		Tiers{Object: object}, Options{WritebackEvery: -1, CompactEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	file := make([]byte, 2<<20)
	for range 20 {
		fill(r, file)
		if _, err := v.WriteAt(file, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	used := v.Status().Used
	if used < int64(len(file)) {
		t.Fatalf("the disk uses %d bytes stored, want at least the file's %d", used, len(file))
	}
	// The reclaimer runs in the background: wait for it, then check.
	wait.For(t, 10*time.Second, "the superseded chunks to be reclaimed", func() bool {
		return storedChunks(t, object) <= 2*used
	})
	mustEqual(t, "the file", readAll(t, v)[1<<20:3<<20], file)
}

// An idle volume compacts: 20 rewrites could leave its layers holding up
// to three times what its disk uses (a busy volume compacts once they hold
// as much garbage as disk), and nothing more was ever written to compact
// them (issue 35, row 4, seen end to end: 96 MiB of chunks for 32 MiB
// used). A flush with nothing to write compacts once they hold half.
func TestIdleVolumeCompacts(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(35, 10))
	object, _ := tierOf(t)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "idle", Size: 8 << 20},
		Tiers{Object: object}, Options{WritebackEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	file := make([]byte, 2<<20)
	for range 2 { // the second flush supersedes the first: 2x, no compaction
		fill(r, file)
		if _, err := v.WriteAt(file, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Flush(); err != nil { // idle
		t.Fatal(err)
	}
	used := v.Status().Used
	wait.For(t, 10*time.Second, "an idle volume's superseded chunks to be reclaimed", func() bool {
		return 2*storedChunks(t, object) <= 3*used
	})
	mustEqual(t, "the file", readAll(t, v)[1<<20:3<<20], file)
}

// namedChunksExist checks that every chunk any manifest in tier names is
// there.
func namedChunksExist(t *testing.T, tier chunkstore.Store) {
	t.Helper()
	ctx := context.Background()
	ids, err := tier.Manifests(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		m, err := tier.Manifest(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Chunks() {
			if _, err := tier.B.Stat(ctx, chunkstore.ChunkKey(c)); err != nil {
				t.Errorf("manifest %s names chunk %s: %v", id, c, err)
			}
		}
	}
}

// baseTiers are tiers of their own (object storage, and a cluster tier
// when withCluster) holding a base layer "tb-base" of a 2 MiB image drawn
// from r, which it returns.
func baseTiers(t *testing.T, r *rand.Rand, withCluster bool) (Tiers, []byte) {
	t.Helper()
	object, _ := tierOf(t)
	img := randomImage(r, 2<<20)
	putBase(t, object, "tb-base", img, 256<<10)
	tiers := Tiers{Object: object}
	if withCluster {
		cluster, _ := tierOf(t)
		tiers.Cluster = &cluster
	}
	return tiers, img
}

// Reclaiming never deletes a chunk that a layer, a snapshot or a flush
// still names: cells written back to bytes they held before (a flush that
// finds their chunk pending), snapshots taken between compactions, and
// another node recovering the volume all see every chunk they need.
func TestReclaimKeepsWhatIsNamed(t *testing.T) {
	for _, withCluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "object", true: "cluster"}[withCluster], func(t *testing.T) {
			ctx := context.Background()
			r := rand.New(rand.NewPCG(35, 5))
			tiers, img := baseTiers(t, r, withCluster)
			object := tiers.Object
			v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "kept", Base: "tb-base"}, tiers,
				Options{WritebackEvery: -1, CompactEvery: 3, ReclaimBatch: 7})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close(ctx)
			m := &model{t: t, d: v, want: append([]byte(nil), img...)}
			old := append([]byte(nil), m.want[:4*CellSize]...)
			snaps := map[string][]byte{}
			for round := range 12 {
				m.scribble(r, 30)
				if round%4 == 1 {
					// Back to bytes whose chunks earlier layers named.
					m.write(0, old)
				}
				if err := v.Flush(); err != nil {
					t.Fatal(err)
				}
				if round%5 == 2 {
					id := fmt.Sprintf("snap-%d", round)
					if _, err := v.Snapshot(ctx, id, nil); err != nil {
						t.Fatal(err)
					}
					snaps[id] = append([]byte(nil), m.want...)
				}
				if round%3 == 0 {
					other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "kept", tiers, noLoops)
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					mustEqual(t, "recovered", readScattered(t, r, other), m.want)
					other.Abandon()
				}
			}
			if err := v.Close(ctx); err != nil {
				t.Fatal(err)
			}
			v, err = Open(ctx, v.dir, tiers, Options{WritebackEvery: -1, CompactEvery: 3})
			if err != nil {
				t.Fatal(err)
			}
			wait.For(t, 10*time.Second, "the pending chunks to be reclaimed", func() bool {
				v.mu.Lock()
				defer v.mu.Unlock()
				return len(v.pending) == 0
			})
			for _, tier := range tiers.order() {
				namedChunksExist(t, tier)
			}
			mustEqual(t, "reopened", readScattered(t, r, v), m.want)
			for id, want := range snaps {
				child, err := Create(ctx, filepath.Join(t.TempDir(), id), Config{ID: "child-" + id, Base: id}, Tiers{Object: object}, noLoops)
				if err != nil {
					t.Fatal(err)
				}
				mustEqual(t, id, readScattered(t, r, child), want)
				child.Abandon()
			}
		})
	}
}

// failingDeletes is a blob store whose deletes of chunks fail while fail
// is set.
type failingDeletes struct {
	blob.Store
	fail atomic.Bool
}

func (f *failingDeletes) Delete(ctx context.Context, key string) error {
	if f.fail.Load() && strings.HasPrefix(key, "chunks/") {
		return errors.New("delete refused")
	}
	return f.Store.Delete(ctx, key)
}

// A flush that could take a volume past its durable bound is refused with
// ENOSPC, and the status says why, until reclaiming makes room.
func TestFlushRefusedPastDurableBound(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(35, 6))
	inner, _ := tierOf(t)
	store := &failingDeletes{Store: inner.B}
	store.fail.Store(true)
	object := chunkstore.Store{B: store}
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "bounded", Size: 1 << 20}, Tiers{Object: object},
		Options{WritebackEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	disk := make([]byte, v.Size())
	var refused error
	for range 10 {
		fill(r, disk)
		if _, err := v.WriteAt(disk, 0); err != nil {
			t.Fatal(err)
		}
		if refused = v.Flush(); refused != nil {
			break
		}
	}
	if !errors.Is(refused, ErrFull) || !errors.Is(refused, syscall.ENOSPC) {
		t.Fatalf("flushes past the bound: %v, want ErrFull (ENOSPC)", refused)
	}
	st := v.Status()
	if st.Refused == "" || st.Durable > st.Limit || st.Limit != 3*v.Size() {
		t.Errorf("status %+v: want the refusal, within the bound of 3 times the disk", st)
	}
	if got := storedChunks(t, object); got > st.Limit {
		t.Errorf("the blob store holds %d bytes of chunks, past the bound %d", got, st.Limit)
	}
	store.fail.Store(false)
	wait.For(t, 20*time.Second, "a flush once the chunks are reclaimed", func() bool { return v.Flush() == nil })
	if st := v.Status(); st.Refused != "" {
		t.Errorf("status after a flush went through: %+v", st)
	}
	mustEqual(t, "the disk", readAll(t, v), disk)
}

// A write, and a fault, that would take the node's disk below the reserve
// fail with ENOSPC; they go through again once there is room.
func TestVolumeKeepsTheNodesReserve(t *testing.T) {
	ctx := context.Background()
	object, _ := tierOf(t)
	img := randomImage(rand.New(rand.NewPCG(35, 7)), 1<<20)
	putBase(t, object, "tb-base", img, 256<<10)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "reserve", Base: "tb-base"}, Tiers{Object: object},
		Options{WritebackEvery: -1, Reserve: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	var free atomic.Int64
	free.Store(1<<30 - 1)
	v.free = func(string) (int64, error) { return free.Load(), nil }
	if _, err := v.WriteAt(make([]byte, BlockSize), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write below the reserve: %v, want ENOSPC", err)
	}
	if _, err := v.ReadAt(make([]byte, BlockSize), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a fault below the reserve: %v, want ENOSPC", err)
	}
	free.Store(1 << 30)
	if _, err := v.WriteAt(make([]byte, BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	copy(img, make([]byte, BlockSize))
	mustEqual(t, "the disk", readAll(t, v), img)
}

// A volume restored from a snapshot of another reads the snapshot's chunks,
// which are named in the other volume's namespace, through the snapshot's
// manifest alone: its own layers name only chunks of its own namespace. So
// neither the other volume's reclaiming, however much it rewrites, nor
// its deletion (its layers gone from the tiers) takes a chunk the restored
// volume needs; nor do those of a volume restored in turn from a snapshot
// of the restored one.
func TestRestoredVolumeOutlivesItsOrigin(t *testing.T) {
	for _, withCluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "object", true: "cluster"}[withCluster], func(t *testing.T) {
			ctx := context.Background()
			r := rand.New(rand.NewPCG(35, 8))
			tiers, img := baseTiers(t, r, withCluster)
			object := tiers.Object
			opts := Options{WritebackEvery: -1, CompactEvery: 2, ReclaimBatch: 5}
			// origin over the template; restored over a snapshot of it;
			// grandchild over a snapshot of restored.
			origin, err := Create(ctx, filepath.Join(t.TempDir(), "origin"), Config{ID: "origin", Base: "tb-base"}, tiers, opts)
			if err != nil {
				t.Fatal(err)
			}
			mo := &model{t: t, d: origin, want: append([]byte(nil), img...)}
			mo.scribble(r, 40)
			if _, err := origin.Snapshot(ctx, "snap-origin", nil); err != nil {
				t.Fatal(err)
			}
			atOrigin := append([]byte(nil), mo.want...)
			restored, err := Create(ctx, filepath.Join(t.TempDir(), "restored"), Config{ID: "restored", Base: "snap-origin"}, tiers, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer restored.Close(ctx)
			mr := &model{t: t, d: restored, want: append([]byte(nil), atOrigin...)}
			mr.scribble(r, 10) // most cells still read through the snapshot
			if _, err := restored.Snapshot(ctx, "snap-restored", nil); err != nil {
				t.Fatal(err)
			}
			atRestored := append([]byte(nil), mr.want...)
			// The origin rewrites every cell, the restored volume its second
			// half (its first still reads through the snapshot), over and
			// over: compactions prune their layers, and their reclaimers
			// take what only those named.
			for range 6 {
				for _, m := range []*model{mo, mr} {
					from := 0
					if m == mr {
						from = len(m.want) / 2
					}
					p := make([]byte, len(m.want)-from)
					fill(r, p)
					m.write(int64(from), p)
					if err := m.d.(*Volume).Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, v := range []*Volume{origin, restored} {
				wait.For(t, 10*time.Second, "the pending chunks to be reclaimed", func() bool {
					v.mu.Lock()
					defer v.mu.Unlock()
					return len(v.pending) == 0
				})
			}
			// The origin is deleted as a sandbox's volume is (the block
			// server's drop): abandoned, its layers gone from every tier.
			origin.Abandon()
			for _, tier := range tiers.order() {
				if err := DeleteLayers(ctx, tier, "origin"); err != nil {
					t.Fatal(err)
				}
				namedChunksExist(t, tier)
			}
			// What the restored volume never read comes from the snapshot.
			mustEqual(t, "the restored volume", readScattered(t, r, restored), mr.want)
			again, err := Recover(ctx, filepath.Join(t.TempDir(), "again"), "restored", tiers, noLoops)
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "the restored volume, recovered", readScattered(t, r, again), mr.want)
			again.Abandon()
			for id, want := range map[string][]byte{"snap-origin": atOrigin, "snap-restored": atRestored} {
				child, err := Create(ctx, filepath.Join(t.TempDir(), "child-"+id), Config{ID: "child-" + id, Base: id}, Tiers{Object: object}, noLoops)
				if err != nil {
					t.Fatal(err)
				}
				mustEqual(t, "a restore of "+id, readScattered(t, r, child), want)
				child.Abandon()
			}
		})
	}
}

// slowManifests is a blob store whose puts of volumes' layer manifests
// take a while, as object storage's may.
type slowManifests struct{ blob.Store }

func (s slowManifests) Put(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, "manifests/v-") {
		time.Sleep(200 * time.Millisecond)
	}
	return s.Store.Put(ctx, key, data)
}

// With a cluster tier, a new volume's first layer was in the cluster tier
// alone until the replicator copied it: meanwhile no manifest in object
// storage named its base as parent, and the snapshot engine's collector,
// which reads object storage only, could take a deleted snapshot a volume
// had just been restored from. Object storage holds it when Create
// returns.
func TestCreatedVolumeNamesItsBaseInObjectStorage(t *testing.T) {
	ctx := context.Background()
	inner, _ := tierOf(t)
	object := chunkstore.Store{B: slowManifests{inner.B}}
	cluster, _ := tierOf(t)
	putBase(t, object, "snap-1", randomImage(rand.New(rand.NewPCG(35, 9)), 1<<20), 256<<10)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "restored", Base: "snap-1"},
		Tiers{Cluster: &cluster, Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	m, err := object.Manifest(ctx, layerID("restored", 0))
	if err != nil || m.Parent != "snap-1" {
		t.Fatalf("object storage's first layer of the new volume: %+v, %v; want one over snap-1", m, err)
	}
}
