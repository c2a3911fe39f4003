package blockdev

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warren/internal/blob"
	"warren/internal/blob/file"
	"warren/internal/chunkstore"
	"warren/internal/layer"
	"warren/internal/wait"
)

// tierOf is a chunk store in a temporary directory, counting what is
// fetched from it.
func tierOf(t testing.TB) (chunkstore.Store, *blob.Counted) {
	t.Helper()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &blob.Counted{Store: fs}
	return chunkstore.Store{B: c}, c
}

// putBase stores img as a root layer id in t, cut into chunks of up to
// chunk bytes from every offset that holds data (all-zero runs are left
// out, as holes would be).
func putBase(t *testing.T, tier chunkstore.Store, id string, img []byte, chunk int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "base.img")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	var ranges []layer.Range
	for off := int64(0); off < int64(len(img)); off += chunk {
		n := min(chunk, int64(len(img))-off)
		if !bytes.Equal(img[off:off+n], make([]byte, n)) {
			ranges = append(ranges, layer.Range{Off: off, Len: n})
		}
	}
	extents, _, err := layer.Write(context.Background(), path, ranges, "", tier, 2)
	if err != nil {
		t.Fatal(err)
	}
	m := layer.Manifest{Version: layer.VersionPlain, ID: id, DiskSize: int64(len(img)), Extents: extents}
	if err := tier.PutManifest(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// randomImage is a disk of n bytes, random but for some runs of zeros.
func randomImage(r *rand.Rand, n int) []byte {
	img := make([]byte, n)
	for i := 0; i < n; i += BlockSize {
		if r.IntN(4) != 0 {
			for j := i; j < i+BlockSize; j += 8 {
				v := r.Uint64()
				for k := range 8 {
					img[j+k] = byte(v >> (8 * k))
				}
			}
		}
	}
	return img
}

// noLoops is the options of a volume whose background work runs only
// when a test asks.
var noLoops = Options{WritebackEvery: -1}

func readAll(t *testing.T, d Device) []byte {
	t.Helper()
	got := make([]byte, d.Size())
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

// readScattered reads the whole device in pieces of random sizes, in random
// order, so that faults and read-ahead meet cells in every state.
func readScattered(t *testing.T, r *rand.Rand, d Device) []byte {
	t.Helper()
	got := make([]byte, d.Size())
	var offs []int64
	for off := int64(0); off < d.Size(); {
		offs = append(offs, off)
		off += min(r.Int64N(3*CellSize)+1, d.Size()-off)
	}
	offs = append(offs, d.Size())
	for _, i := range r.Perm(len(offs) - 1) {
		if _, err := d.ReadAt(got[offs[i]:offs[i+1]], offs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d (block %d): got %#x, want %#x", what, i, i/BlockSize, got[i], want[i])
		}
	}
	t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
}

func TestVolumeReadsItsBaseLazily(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	object, counted := tierOf(t)
	img := randomImage(r, 8<<20)
	putBase(t, object, "tb-base", img, 1<<20)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "lazy", Base: "tb-base"}, Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	if v.Size() != int64(len(img)) {
		t.Fatalf("size %d, want the base's %d", v.Size(), len(img))
	}
	_, before := counted.Bytes()
	got := make([]byte, BlockSize)
	if _, err := v.ReadAt(got, 3<<20+5*BlockSize); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "one block", got, img[3<<20+5*BlockSize:3<<20+6*BlockSize])
	_, after := counted.Bytes()
	// One chunk of at most 1 MiB, compressed: never the whole disk.
	if fetched := after - before; fetched == 0 || fetched > 1<<20+1024 {
		t.Fatalf("reading one block fetched %d bytes, want one chunk's", fetched)
	}
	// Its chunk was read ahead: the next cell costs nothing.
	if _, err := v.ReadAt(got, 3<<20+CellSize); err != nil {
		t.Fatal(err)
	}
	if _, again := counted.Bytes(); again != after {
		t.Fatalf("a cell of a fetched chunk fetched %d more bytes", again-after)
	}
	mustEqual(t, "whole disk", readAll(t, v), img)
}

// model applies the same writes to a Device and to a byte slice.
type model struct {
	t    *testing.T
	d    Device
	want []byte
}

func (m *model) write(off int64, p []byte) {
	m.t.Helper()
	if _, err := m.d.WriteAt(p, off); err != nil {
		m.t.Fatal(err)
	}
	copy(m.want[off:], p)
}

func (m *model) zero(off, n int64, trim bool) {
	m.t.Helper()
	op := m.d.WriteZeroes
	if trim {
		op = m.d.Trim
	}
	if err := op(off, n); err != nil {
		m.t.Fatal(err)
	}
	clear(m.want[off : off+n])
}

// scribble makes n random writes, zeroings and trims, of every alignment.
func (m *model) scribble(r *rand.Rand, n int) {
	size := int64(len(m.want))
	for range n {
		switch r.IntN(6) {
		case 0: // whole cells
			c := r.Int64N(size / CellSize)
			k := min(r.Int64N(4)+1, size/CellSize-c)
			p := make([]byte, k*CellSize)
			fill(r, p)
			m.write(c*CellSize, p)
		case 1:
			off := r.Int64N(size/BlockSize) * BlockSize
			n := min(r.Int64N(40)*BlockSize+BlockSize, size-off)
			m.zero(off, n, r.IntN(2) == 0)
		default: // any bytes anywhere, across cells
			off := r.Int64N(size - 1)
			p := make([]byte, min(r.Int64N(3*CellSize)+1, size-off))
			fill(r, p)
			m.write(off, p)
		}
	}
}

func fill(r *rand.Rand, p []byte) {
	for i := range p {
		p[i] = byte(r.Uint32())
	}
}

func TestVolumeFlushedWritesSurvive(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	object, _ := tierOf(t)
	img := randomImage(r, 4<<20)
	putBase(t, object, "tb-base", img, 512<<10)
	tiers := Tiers{Object: object}
	// Grown past the base: the rest reads as zeros.
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "vol-1", Base: "tb-base", Size: 5 << 20}, tiers, Options{WritebackEvery: -1, CompactEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{t: t, d: v, want: append(append([]byte(nil), img...), make([]byte, 1<<20)...)}
	for round := range 8 {
		m.scribble(r, 20)
		mustEqual(t, "before flush", readAll(t, v), m.want)
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		// Another node, sharing only the tiers, sees every flushed write.
		other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "vol-1", tiers, noLoops)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		mustEqual(t, "recovered", readScattered(t, r, other), m.want)
		other.Abandon()
	}
	// Full layers (every third) superseded the older ones.
	ids, err := object.Manifests(ctx, "v-vol-1-")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) > 3 {
		t.Errorf("layers kept after compaction: %v", ids)
	}
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, v.dir, tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	if st := again.Status(); st.Present != int(again.cells) {
		t.Errorf("after a clean close %d cells present, want all %d", st.Present, again.cells)
	}
	mustEqual(t, "reopened", readAll(t, again), m.want)
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestVolumeCrashKeepsFlushedAndDirty(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	object, _ := tierOf(t)
	tiers := Tiers{Object: object}
	dir := filepath.Join(t.TempDir(), "v")
	v, err := Create(ctx, dir, Config{ID: "crashy", Size: 2 << 20}, tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{t: t, d: v, want: make([]byte, 2<<20)}
	m.scribble(r, 30)
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := append([]byte(nil), m.want...)
	// Unflushed writes: the process dies with them in its cache.
	m.scribble(r, 10)
	v.Abandon() // as a killed process would

	again, err := Open(ctx, dir, tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	// The unflushed writes may be there or not; reading the disk twice,
	// and after a flush and a recovery elsewhere, must agree, and every
	// flushed write that was not overwritten since must be there.
	first := readScattered(t, r, again)
	for i := range first {
		if first[i] != flushed[i] && first[i] != m.want[i] {
			t.Fatalf("byte %d is %#x: neither the flushed %#x nor the written %#x", i, first[i], flushed[i], m.want[i])
		}
	}
	if err := again.Flush(); err != nil {
		t.Fatal(err)
	}
	other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "crashy", tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "recovered after the crash", readScattered(t, r, other), first)
	other.Abandon() // as a killed process would
	again.Close(ctx)
}

func TestVolumeClusterTier(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	cluster, _ := tierOf(t)
	object, _ := tierOf(t)
	tiers := Tiers{Cluster: &cluster, Object: object}
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "tiered", Size: 1 << 20}, tiers, Options{WritebackEvery: -1, CompactEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{t: t, d: v, want: make([]byte, 1<<20)}
	for range 5 {
		m.scribble(r, 10)
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		// The flush returned once the cluster tier held the layer.
		if newest, err := newestLayer(ctx, cluster, "tiered"); err != nil || layerID("tiered", newest) != v.Layer() {
			t.Fatalf("cluster tier's newest layer %d (%v), volume's %s", newest, err, v.Layer())
		}
	}
	if err := v.waitReplicated(ctx, func() bool { return v.replicated >= v.seq }); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); !st.RecoveryPoint.IsZero() || st.Replicated != st.Layer {
		t.Fatalf("status once replicated: %+v", st)
	}
	// Object storage alone is enough once it caught up.
	other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "tiered", Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "from object storage", readScattered(t, r, other), m.want)
	other.Abandon() // as a killed process would
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestVolumeConcurrentIO(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 10))
	object, _ := tierOf(t)
	img := randomImage(r, 4<<20)
	putBase(t, object, "tb-base", img, 256<<10)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "busy", Base: "tb-base"}, Tiers{Object: object}, Options{WritebackEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Each worker owns a quarter of the disk and checks it against its own
	// model while the others, and the write-back, run.
	var wg sync.WaitGroup
	quarter := int64(len(img)) / 4
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			base := int64(w) * quarter
			want := append([]byte(nil), img[base:base+quarter]...)
			for range 200 {
				off := r.Int64N(quarter - 1)
				p := make([]byte, min(r.Int64N(2*CellSize)+1, quarter-off))
				if r.IntN(2) == 0 {
					fill(r, p)
					if _, err := v.WriteAt(p, base+off); err != nil {
						errs <- err
						return
					}
					copy(want[off:], p)
				} else {
					if _, err := v.ReadAt(p, base+off); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(p, want[off:off+int64(len(p))]) {
						errs <- errors.New("a read did not see the worker's own writes")
						return
					}
				}
			}
			copy(img[base:], want)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "busy", Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "recovered", readScattered(t, r, other), img)
	other.Abandon() // as a killed process would
}

func TestVolumeRefusals(t *testing.T) {
	ctx := context.Background()
	object, _ := tierOf(t)
	tiers := Tiers{Object: object}
	dir := filepath.Join(t.TempDir(), "v")
	v, err := Create(ctx, dir, Config{ID: "one", Size: 1 << 20}, tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, filepath.Join(t.TempDir(), "v2"), Config{ID: "one", Size: 1 << 20}, tiers, noLoops); !errors.Is(err, ErrConflict) {
		t.Errorf("a second volume of the same ID: %v, want ErrConflict", err)
	}
	// An ID that extends another's is another volume.
	longer, err := Create(ctx, filepath.Join(t.TempDir(), "v3"), Config{ID: "one-000000000000", Size: 1 << 20}, tiers, noLoops)
	if err != nil {
		t.Fatalf("a volume whose ID extends another's: %v", err)
	}
	longer.Abandon()
	if _, err := Create(ctx, filepath.Join(t.TempDir(), "v4"), Config{ID: "o", Size: 1 << 20}, tiers, noLoops); err != nil {
		t.Errorf("a volume whose ID another's extends: %v", err)
	}
	failed := filepath.Join(t.TempDir(), "failed")
	if _, err := Create(ctx, failed, Config{ID: "bad-base", Base: "missing", Size: 1 << 20}, tiers, noLoops); err == nil {
		t.Error("a volume over a missing base was made")
	} else if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("a failed create left its directory: %v", err)
	}
	for _, cfg := range []Config{{ID: "Bad_ID", Size: 1 << 20}, {ID: "x", Size: 1000}, {ID: "y"}, {ID: "z", Base: "missing"}} {
		if _, err := Create(ctx, filepath.Join(t.TempDir(), "bad"), cfg, tiers, noLoops); err == nil {
			t.Errorf("Create(%+v) succeeded", cfg)
		}
	}
	if _, err := v.ReadAt(make([]byte, 2), 1<<20-1); !errors.Is(err, ErrRange) {
		t.Errorf("read past the end: %v", err)
	}
	if err := v.Trim(100, BlockSize); err == nil {
		t.Error("an unaligned trim succeeded")
	}
	if _, err := v.WriteAt([]byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	v.Abandon() // as a killed process would
	// Another node recovered the volume and flushed: this node's copy is
	// stale, and opening it again would fork the disk.
	other, err := Recover(ctx, filepath.Join(t.TempDir(), "other"), "one", tiers, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteAt([]byte("y"), 6); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dir, tiers, noLoops); !errors.Is(err, ErrConflict) {
		t.Errorf("opening a stale volume: %v, want ErrConflict", err)
	}
}

func TestVolumeRefusesCorruptChunks(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(12, 13))
	object, _ := tierOf(t)
	img := randomImage(r, 1<<20)
	putBase(t, object, "tb-base", img, 1<<20)
	// Swap the chunk's bytes for another chunk's.
	m, err := object.Manifest(ctx, "tb-base")
	if err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 1<<20)
	fill(r, other)
	path := filepath.Join(t.TempDir(), "other.img")
	os.WriteFile(path, other, 0o600)
	scratch, _ := tierOf(t)
	ext, _, err := layer.Write(ctx, path, []layer.Range{{Off: 0, Len: 1 << 20}}, "", scratch, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := scratch.Get(ctx, ext[0].Chunk)
	if err := object.B.Put(ctx, chunkstore.ChunkKey(m.Extents[0].Chunk), bad); err != nil {
		t.Fatal(err)
	}
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "victim", Base: "tb-base"}, Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Abandon()
	if _, err := v.ReadAt(make([]byte, BlockSize), 0); !errors.Is(err, layer.ErrCorrupt) {
		t.Fatalf("read of a corrupt chunk: %v, want ErrCorrupt", err)
	}
}

func TestVolumeSnapshot(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(14, 15))
	cluster, _ := tierOf(t)
	object, _ := tierOf(t)
	img := randomImage(r, 2<<20)
	putBase(t, object, "tb-base", img, 256<<10)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "snappy", Base: "tb-base"}, Tiers{Cluster: &cluster, Object: object}, Options{WritebackEvery: -1, CompactEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	m := &model{t: t, d: v, want: img}
	m.scribble(r, 40)
	snap, err := v.Snapshot(ctx, "snap-1", map[string]string{"sandbox": "sb-1"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Parent != "tb-base" {
		t.Errorf("the snapshot's parent is %q, want the base", snap.Parent)
	}
	want := append([]byte(nil), m.want...)
	// Later writes and compactions change nothing of it.
	for range 4 {
		m.scribble(r, 10)
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// A disk rebuilt from object storage alone, the snapshot engine's way.
	lineage, err := resolve(ctx, Tiers{Object: object}, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "restored.img")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range lineage {
		if err := layer.Apply(ctx, path, l, object, 2); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "snapshot", got, want)
	// And a volume over it, lazily.
	child, err := Create(ctx, filepath.Join(t.TempDir(), "child"), Config{ID: "child", Base: "snap-1"}, Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "volume over the snapshot", readScattered(t, r, child), want)
	child.Abandon() // as a killed process would
}

// TestVolumeReadsAhead: sequential reads fetch the cells past them in the
// background, in a window that grows; a random read does not.
func TestVolumeReadsAhead(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(16, 17))
	object, _ := tierOf(t)
	img := randomImage(r, 8<<20)
	// One cell a chunk: a chunk's own read-ahead covers nothing more.
	putBase(t, object, "tb-base", img, CellSize)
	v, err := Create(ctx, filepath.Join(t.TempDir(), "v"), Config{ID: "ahead", Base: "tb-base"}, Tiers{Object: object}, noLoops)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Abandon()
	buf := make([]byte, CellSize)
	if _, err := v.ReadAt(buf, 4<<20); err != nil { // a random read: no run yet
		t.Fatal(err)
	}
	if got := v.Status().Present; got != 1 {
		t.Fatalf("%d cells present after one read, want 1", got)
	}
	for i := range int64(8) {
		if _, err := v.ReadAt(buf, i*CellSize); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "a sequential read", buf, img[i*CellSize:(i+1)*CellSize])
	}
	// Each read of the run waited for what the one before fetched ahead,
	// so the window of the last ones reached past the run.
	wait.For(t, 10*time.Second, "the cell past the run to be fetched", func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.present.has(8) && !v.raBusy
	})
	if got := v.Status().Present; got < 1+8+1 || got > 1+8+maxReadAhead {
		t.Errorf("%d cells present after a run of 8, want the run, the random read and a window past the run", got)
	}
	mustEqual(t, "the disk", readAll(t, v), img)
}
