//go:build linux

package layer

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"warren/internal/disk"
	"warren/internal/disk/disktest"
)

const MiB = 1 << 20

func TestFiemapLayout(t *testing.T) {
	if got := unsafe.Sizeof(fiemapHeader{}); got != 32 {
		t.Errorf("sizeof(struct fiemap) = %d, want 32", got)
	}
	if got := unsafe.Sizeof(fiemapExtent{}); got != 56 {
		t.Errorf("sizeof(struct fiemap_extent) = %d, want 56", got)
	}
}

// env is a directory for images and how to clone in it: by reflink, or by
// a sparse copy that shares nothing (as on a file system without reflink).
type env struct {
	name    string
	dir     string
	reflink bool
	pool    *disk.Pool
}

func (e env) clone(t *testing.T, src, name string) string {
	t.Helper()
	dst := filepath.Join(e.dir, name)
	if e.pool != nil {
		if err := e.pool.Clone(context.Background(), src, dst); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	copySparse(t, src, dst)
	return dst
}

// copyEnv needs no root: images in a temp dir, cloned by copying.
func copyEnv(t *testing.T) env { return env{name: "copy", dir: t.TempDir()} }

// reflinkEnv is a disk pool with reflink: the temp dir's own, or an XFS
// loop image that disk.Open mounts (as root) and the test's cleanup
// unmounts.
func reflinkEnv(t *testing.T) env {
	t.Helper()
	pool := disktest.ReflinkPool(t, 4<<30)
	return env{name: "reflink", dir: pool.Dir(), reflink: true, pool: pool}
}

// bothEnvs runs f with reflink clones (root only) and with full copies.
func bothEnvs(t *testing.T, f func(t *testing.T, e env)) {
	t.Run("reflink", func(t *testing.T) { f(t, reflinkEnv(t)) })
	t.Run("copy", func(t *testing.T) { f(t, copyEnv(t)) })
}

// memChunks is an in-memory Chunks.
type memChunks struct {
	mu sync.Mutex
	m  map[string][]byte // guarded by mu
}

var _ Chunks = (*memChunks)(nil)

var errNoChunk = errors.New("no such chunk")

func newMemChunks() *memChunks { return &memChunks{m: make(map[string][]byte)} }

func (c *memChunks) Put(ctx context.Context, hash string, compressed []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[hash]; ok {
		return false, nil
	}
	c.m[hash] = bytes.Clone(compressed)
	return true, nil
}

func (c *memChunks) Get(ctx context.Context, hash string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[hash]
	if !ok {
		return nil, errNoChunk
	}
	return bytes.Clone(b), nil
}

func (c *memChunks) set(hash string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[hash] = b
}

// image builds a sparse image of size bytes at dir/name with random data in
// runs, each {offset, length}.
func image(t *testing.T, dir, name string, size int64, seed byte, runs ...[2]int64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{seed})
	for _, r := range runs {
		if _, err := f.Seek(r[0], io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(f, rng, r[1]); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func punch(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func randBytes(rng *rand.ChaCha8, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// copySparse copies src's non-zero blocks to a new file dst of its size:
// the same content, sharing no extent.
func copySparse(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(len(b))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(b); off += BlockSize {
		blk := b[off:min(off+BlockSize, len(b))]
		if bytes.Equal(blk, zeroBlock[:len(blk)]) {
			continue
		}
		if _, err := f.WriteAt(blk, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
}

// naiveChanged is the reference diff: read both files whole, compare every
// block.
func naiveChanged(t *testing.T, parent, child string) []Range {
	t.Helper()
	c, err := os.ReadFile(child)
	if err != nil {
		t.Fatal(err)
	}
	var p []byte
	if parent != "" {
		if p, err = os.ReadFile(parent); err != nil {
			t.Fatal(err)
		}
	}
	cmp := comparer{}
	for off := 0; off < len(c); off += BlockSize {
		pb := make([]byte, BlockSize)
		copy(pb, p[min(off, len(p)):min(off+BlockSize, len(p))])
		cb := c[off : off+BlockSize]
		if !bytes.Equal(cb, pb) {
			cmp.add(int64(off), bytes.Equal(cb, zeroBlock[:]))
		}
	}
	return cmp.ranges
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// diffChecked runs Changed, checks it against naiveChanged and the stats'
// invariants, and returns its result.
func diffChecked(t *testing.T, parent, child string) ([]Range, DiffStats) {
	t.Helper()
	start := time.Now()
	got, stats, err := Changed(context.Background(), parent, child)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Changed: %d ranges in %v; %+v", len(got), time.Since(start), stats)
	if want := naiveChanged(t, parent, child); !reflect.DeepEqual(got, want) {
		t.Fatalf("Changed = %v\nreference diff = %v", got, want)
	}
	checkStats(t, got, stats)
	return got, stats
}

func checkStats(t *testing.T, ranges []Range, s DiffStats) {
	t.Helper()
	if s.Shared+s.Holes+s.Compared != s.Size {
		t.Errorf("stats %+v: shared + holes + compared != size", s)
	}
	var n int64
	for _, r := range ranges {
		n += r.Len
	}
	if s.Changed != n || s.Read > 2*s.Compared {
		t.Errorf("stats %+v: want changed %d and read <= 2 * compared", s, n)
	}
}

// layerOf makes the layer id in namespace ns: the diff of child against
// parent (path and layer ID, both empty for an empty disk) written to
// chunks, its manifest through Marshal and ParseManifest.
func layerOf(t *testing.T, ns, id, parentID, parent, child string, chunks Chunks) (Manifest, DiffStats, WriteStats) {
	t.Helper()
	ctx := context.Background()
	ranges, ds, err := Changed(ctx, parent, child)
	if err != nil {
		t.Fatal(err)
	}
	extents, ws, err := Write(ctx, child, ranges, ns, chunks, 4)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Version: Version(ns), ID: id, Namespace: ns, Parent: parentID, DiskSize: fileSize(t, child), Extents: extents, Labels: map[string]string{"test": t.Name()}}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m, err = ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	return m, ds, ws
}

func TestChangedEmptyParent(t *testing.T) {
	dir := t.TempDir()
	img := image(t, dir, "a.img", 64*MiB, 1, [2]int64{MiB, MiB}, [2]int64{32 * MiB, 3 * MiB})
	disktest.WriteAt(t, img, 10*MiB, make([]byte, MiB)) // data blocks of zeros: no change from an empty disk
	ranges, stats := diffChecked(t, "", img)
	want := []Range{{Off: MiB, Len: MiB}, {Off: 32 * MiB, Len: 3 * MiB}}
	if !reflect.DeepEqual(ranges, want) {
		t.Errorf("ranges = %v, want %v", ranges, want)
	}
	if stats.Read != 5*MiB || stats.Holes != 59*MiB || stats.Shared != 0 {
		t.Errorf("stats = %+v, want 5 MiB read (data only), 59 MiB of holes", stats)
	}
}

func TestChangedRefusesUnalignedSize(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "odd.img")
	if err := os.WriteFile(img, []byte("odd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Changed(context.Background(), "", img); err == nil || !strings.Contains(err.Error(), "not a multiple of 4096") {
		t.Errorf("Changed of a 3-byte image = %v, want a size error", err)
	}
}

func TestChanged(t *testing.T) {
	bothEnvs(t, func(t *testing.T, e env) {
		// A 64 MiB sparse image with 16 MiB of data in four runs.
		parent := image(t, e.dir, "parent.img", 64*MiB, 2,
			[2]int64{0, 4 * MiB}, [2]int64{8 * MiB, 4 * MiB}, [2]int64{20 * MiB, 4 * MiB}, [2]int64{40 * MiB, 4*MiB + 8192})
		rng := rand.NewChaCha8([32]byte{3})
		for _, tc := range []struct {
			name   string
			change func(t *testing.T, child string)
			want   []Range
		}{
			{"unchanged", func(t *testing.T, child string) {}, nil},
			{"one byte", func(t *testing.T, child string) {
				b := disktest.ReadAt(t, child, 9*MiB+5000, 1)
				disktest.WriteAt(t, child, 9*MiB+5000, []byte{b[0] ^ 1})
			}, []Range{{Off: 9*MiB + 4096, Len: 4096}}},
			{"same bytes", func(t *testing.T, child string) {
				disktest.WriteAt(t, child, 8*MiB, disktest.ReadAt(t, child, 8*MiB, MiB))
			}, nil},
			{"zeroed block", func(t *testing.T, child string) {
				disktest.WriteAt(t, child, 20*MiB, make([]byte, BlockSize))
			}, []Range{{Off: 20 * MiB, Len: 4096, Zero: true}}},
			{"punched hole", func(t *testing.T, child string) {
				punch(t, child, 40*MiB, MiB)
			}, []Range{{Off: 40 * MiB, Len: MiB, Zero: true}}},
			{"hole filled", func(t *testing.T, child string) {
				disktest.WriteAt(t, child, 30*MiB+100, []byte("hello"))
				disktest.WriteAt(t, child, 31*MiB, make([]byte, MiB)) // zeros over a hole: no change
			}, []Range{{Off: 30 * MiB, Len: 4096}}},
			{"grown", func(t *testing.T, child string) {
				truncate(t, child, 96*MiB)
				disktest.WriteAt(t, child, 80*MiB, []byte("x"))
				disktest.WriteAt(t, child, 90*MiB, make([]byte, MiB))
			}, []Range{{Off: 80 * MiB, Len: 4096}}},
			{"merged", func(t *testing.T, child string) {
				for _, off := range []int64{MiB + 1, MiB + 4097, MiB + 8193} {
					disktest.WriteAt(t, child, off, []byte{^disktest.ReadAt(t, child, off, 1)[0]})
				}
				disktest.WriteAt(t, child, MiB+3*4096, make([]byte, 2*4096))
				disktest.WriteAt(t, child, MiB+5*4096, []byte{^disktest.ReadAt(t, child, MiB+5*4096, 1)[0]})
			}, []Range{{Off: MiB, Len: 3 * 4096}, {Off: MiB + 3*4096, Len: 2 * 4096, Zero: true}, {Off: MiB + 5*4096, Len: 4096}}},
			{"scattered", func(t *testing.T, child string) {
				for range 300 {
					off := rng.Uint64() % (63 * MiB)
					disktest.WriteAt(t, child, int64(off), randBytes(rng, 1+int(rng.Uint64()%20000)))
				}
			}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				child := e.clone(t, parent, strings.ReplaceAll(tc.name, " ", "-")+".img")
				tc.change(t, child)
				ranges, stats := diffChecked(t, parent, child)
				// diffChecked compared every case with the reference diff;
				// scattered changes are too many to spell out.
				if tc.name != "scattered" && (len(ranges) != 0 || len(tc.want) != 0) && !reflect.DeepEqual(ranges, tc.want) {
					t.Errorf("ranges = %v, want %v", ranges, tc.want)
				}
				if !e.reflink {
					if stats.Shared != 0 {
						t.Errorf("copies share %d bytes", stats.Shared)
					}
					return
				}
				// Clones read only around what changed.
				if tc.name == "unchanged" && stats.Read != 0 {
					t.Errorf("unchanged clone: read %d bytes", stats.Read)
				}
				if tc.name == "one byte" && stats.Read > 2*MiB {
					t.Errorf("one changed byte: read %d bytes", stats.Read)
				}
			})
		}
	})
}

// TestChangedLargeSparse: a 16 GiB clone with a few changes costs a few
// blocks' reads, not the disk's.
func TestChangedLargeSparse(t *testing.T) {
	e := reflinkEnv(t)
	const size = 16 << 30
	var runs [][2]int64
	for i := range int64(8) {
		runs = append(runs, [2]int64{i * 2 << 30, 8 * MiB})
	}
	parent := image(t, e.dir, "parent.img", size, 4, runs...)
	child := e.clone(t, parent, "child.img")
	offsets := []int64{12345, 2<<30 + 7*MiB, 6<<30 + 100, 9 << 30, 14<<30 + 3*MiB + 4096} // 9 GiB is a hole
	for _, off := range offsets {
		disktest.WriteAt(t, child, off, []byte{0xaa})
	}
	start := time.Now()
	ranges, stats, err := Changed(context.Background(), parent, child)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("diff of a 16 GiB clone with %d changed bytes: %v, %+v", len(offsets), elapsed, stats)
	checkStats(t, ranges, stats)
	if len(ranges) != len(offsets) {
		t.Errorf("ranges = %v, want %d single blocks", ranges, len(offsets))
	}
	for i, r := range ranges {
		if i < len(offsets) && (r.Len != BlockSize || r.Off != alignDown(offsets[i])) {
			t.Errorf("range %d = %+v, want the block at %d", i, r, alignDown(offsets[i]))
		}
	}
	if stats.Read > 16*MiB {
		t.Errorf("read %d bytes for %d changed bytes, want at most 16 MiB", stats.Read, len(offsets))
	}
}

func TestRoundTrip(t *testing.T) {
	bothEnvs(t, func(t *testing.T, e env) {
		ctx := context.Background()
		parent := image(t, e.dir, "parent.img", 64*MiB, 5, [2]int64{0, 10 * MiB}, [2]int64{30 * MiB, 9*MiB + 4096})
		child := e.clone(t, parent, "child.img")
		rng := rand.NewChaCha8([32]byte{6})
		disktest.WriteAt(t, child, 2*MiB+17, randBytes(rng, 9*MiB)) // over MaxChunk: several chunks
		disktest.WriteAt(t, child, 50*MiB, randBytes(rng, 3*4096))
		disktest.WriteAt(t, child, 31*MiB, make([]byte, 5*MiB)) // zeros over data: zero extents over MaxChunk
		punch(t, child, 38*MiB, MiB)
		truncate(t, child, 80*MiB)
		disktest.WriteAt(t, child, 79*MiB, bytes.Repeat([]byte("compressible "), 1000))

		chunks := newMemChunks()
		m, ds, ws := layerOf(t, "tenant-a", "child", "parent", parent, child, chunks)
		t.Logf("diff %+v; write %+v", ds, ws)
		if ws.Chunks == 0 || ws.Zero != 6*MiB || ws.NewChunks != len(chunks.m) || ws.Compressed < ws.Stored {
			t.Errorf("write stats %+v: want chunks, 6 MiB zeros, %d new chunks", ws, len(chunks.m))
		}

		target := e.clone(t, parent, "target.img")
		if err := Apply(ctx, target, m, chunks, 4); err != nil {
			t.Fatal(err)
		}
		if got, want := fileHash(t, target), fileHash(t, child); got != want {
			t.Fatalf("applied image hashes to %s, child to %s", got, want)
		}
		if fileSize(t, target) != 80*MiB {
			t.Errorf("applied image size %d, want %d", fileSize(t, target), 80*MiB)
		}

		// A second layer with nothing new stores nothing.
		_, _, ws2 := layerOf(t, "tenant-a", "child-again", "parent", parent, child, chunks)
		if ws2.Stored != 0 || ws2.NewChunks != 0 || ws2.Chunks != ws.Chunks {
			t.Errorf("same diff again: %+v, want nothing stored", ws2)
		}
	})
}

// TestLineage rebuilds a disk from an empty file by applying three layers
// from the root down: a plainly named root and two namespaced layers, as a
// tenant's snapshots over a template base are.
func TestLineage(t *testing.T) {
	bothEnvs(t, func(t *testing.T, e env) {
		ctx := context.Background()
		rng := rand.NewChaCha8([32]byte{7})
		disk0 := image(t, e.dir, "0.img", 32*MiB, 8, [2]int64{0, 2 * MiB}, [2]int64{16 * MiB, 6 * MiB})
		disk1 := e.clone(t, disk0, "1.img")
		disktest.WriteAt(t, disk1, 5*MiB, randBytes(rng, MiB))
		disktest.WriteAt(t, disk1, 17*MiB, make([]byte, MiB))
		disk2 := e.clone(t, disk1, "2.img")
		truncate(t, disk2, 40*MiB)
		disktest.WriteAt(t, disk2, 5*MiB+4096, []byte("third"))
		punch(t, disk2, 16*MiB, 4096)
		disktest.WriteAt(t, disk2, 39*MiB, randBytes(rng, 4096))

		chunks := newMemChunks()
		l0, _, _ := layerOf(t, "", "l0", "", "", disk0, chunks) // a template base
		l1, _, _ := layerOf(t, "tenant-a", "l1", "l0", disk0, disk1, chunks)
		l2, _, _ := layerOf(t, "tenant-a", "l2", "l1", disk1, disk2, chunks)

		target := filepath.Join(e.dir, "rebuilt.img")
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for i, step := range []struct {
			m    Manifest
			want string
		}{{l0, disk0}, {l1, disk1}, {l2, disk2}} {
			if err := Apply(ctx, target, step.m, chunks, 3); err != nil {
				t.Fatal(err)
			}
			if got, want := fileHash(t, target), fileHash(t, step.want); got != want {
				t.Fatalf("after layer %d: image hashes to %s, want %s", i, got, want)
			}
		}
	})
}

func TestApplyCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	img := image(t, dir, "a.img", 8*MiB, 9, [2]int64{0, 8 * MiB})
	chunks := newMemChunks()
	m, _, _ := layerOf(t, "tenant-a", "a", "", "", img, chunks)
	if len(m.Extents) != 2 {
		t.Fatalf("extents = %+v, want two 4 MiB chunks", m.Extents)
	}
	hash := m.Extents[1].Chunk
	good, _ := chunks.Get(ctx, hash)
	other := randBytes(rand.NewChaCha8([32]byte{10}), MaxChunk)
	for _, tc := range []struct {
		name    string
		stored  []byte
		corrupt bool
	}{
		{"flipped byte", func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 1; return b }(), true},
		{"other content", encoder().EncodeAll(other, nil), true},
		{"too long", encoder().EncodeAll(append(bytes.Clone(other), 1), nil), true},
		{"too short", encoder().EncodeAll(other[:MaxChunk-4096], nil), true},
		{"two frames", encoder().EncodeAll(other[:4096], encoder().EncodeAll(other, nil)), true},
		{"not zstd", []byte("hello"), true},
		{"empty", []byte{}, true},
		{"oversized", make([]byte, MaxStored+1), true},
		{"missing", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stored == nil {
				chunks.mu.Lock()
				delete(chunks.m, hash)
				chunks.mu.Unlock()
			} else {
				chunks.set(hash, tc.stored)
			}
			target := filepath.Join(dir, "target.img")
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			err := Apply(ctx, target, m, chunks, 2)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), hash) {
				t.Fatalf("Apply = %v, want an error naming chunk %s", err, hash)
			}
			if errors.Is(err, ErrCorrupt) != tc.corrupt || (!tc.corrupt && !errors.Is(err, errNoChunk)) {
				t.Errorf("Apply = %v; want ErrCorrupt %v", err, tc.corrupt)
			}
		})
	}
	chunks.set(hash, good)
	if err := Apply(ctx, filepath.Join(dir, "missing-dir", "x.img"), m, chunks, 2); err == nil {
		t.Error("Apply to a missing image succeeded")
	}
	m.Version = 3
	if err := Apply(ctx, img, m, chunks, 2); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("Apply of an invalid manifest = %v, want a version error", err)
	}
}

// TestWriteAmplification: a layer stores about what changed, not what the
// file system copied on write.
func TestWriteAmplification(t *testing.T) {
	bothEnvs(t, func(t *testing.T, e env) {
		parent := image(t, e.dir, "parent.img", 128*MiB, 11, [2]int64{0, 128 * MiB})
		chunks := newMemChunks()
		// 8 MiB of random data in 128 writes of 64 KiB, in distinct slots.
		rng := rand.NewChaCha8([32]byte{12})
		child := e.clone(t, parent, "scattered.img")
		slots := rand.New(rng).Perm(128 * MiB / (64 << 10))[:128]
		for _, s := range slots {
			disktest.WriteAt(t, child, int64(s)*(64<<10), randBytes(rng, 64<<10))
		}
		_, ds, ws := layerOf(t, "tenant-a", "scattered", "parent", parent, child, chunks)
		t.Logf("8 MiB scattered: diff %+v; write %+v", ds, ws)
		if ws.Changed != 8*MiB || ws.Stored > 8*MiB*105/100 {
			t.Errorf("8 MiB changed: layer holds %d bytes, stores %d; want 8 MiB, at most 5%% more stored", ws.Changed, ws.Stored)
		}

		child = e.clone(t, parent, "one-byte.img")
		disktest.WriteAt(t, child, 77*MiB+3, []byte{^disktest.ReadAt(t, child, 77*MiB+3, 1)[0]})
		_, ds, ws = layerOf(t, "tenant-a", "one-byte", "parent", parent, child, chunks)
		t.Logf("1 byte: diff %+v; write %+v", ds, ws)
		if ws.Changed != BlockSize || ws.Stored > 16<<10 {
			t.Errorf("1 byte changed: layer holds %d bytes, stores %d; want one block, at most 16 KiB", ws.Changed, ws.Stored)
		}
	})
}

// TestNamespaces: the same bytes written in two namespaces get unrelated
// chunk names (so neither writer finds the other's chunk: each stores its
// own), and a layer verifies its chunks only in its own namespace.
func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	img := image(t, dir, "a.img", 8*MiB, 13, [2]int64{0, 8 * MiB})
	chunks := newMemChunks()
	plain, _, wsPlain := layerOf(t, "", "plain", "", "", img, chunks)
	a, _, wsA := layerOf(t, "tenant-a", "a", "", "", img, chunks)
	b, _, wsB := layerOf(t, "tenant-b", "b", "", "", img, chunks)
	seen := map[string]string{}
	for _, m := range []Manifest{plain, a, b} {
		for _, c := range m.Chunks() {
			if other, ok := seen[c]; ok {
				t.Errorf("chunk %s is in layer %s and layer %s", c, other, m.ID)
			}
			seen[c] = m.ID
		}
	}
	for _, ws := range []WriteStats{wsPlain, wsA, wsB} {
		if ws.NewChunks != 2 || ws.Stored != ws.Compressed {
			t.Errorf("write stats %+v: want both chunks newly stored in each namespace", ws)
		}
	}
	if plain.Version != VersionPlain || a.Version != VersionNamespaced {
		t.Errorf("versions: plain %d, namespaced %d; want %d and %d", plain.Version, a.Version, VersionPlain, VersionNamespaced)
	}
	data := disktest.ReadAt(t, img, 0, MaxChunk)
	sum := sha256.Sum256(data)
	if got, want := plain.Extents[0].Chunk, hex.EncodeToString(sum[:]); got != want {
		t.Errorf("plain chunk name %s, want the sha256 of its bytes, %s", got, want)
	}
	mac := hmac.New(sha256.New, []byte("tenant-a"))
	mac.Write(data)
	if got, want := a.Extents[0].Chunk, hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("namespaced chunk name %s, want HMAC-SHA256 keyed by the namespace, %s", got, want)
	}
	for _, m := range []Manifest{plain, a, b} {
		target := filepath.Join(dir, m.ID+".img")
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Apply(ctx, target, m, chunks, 2); err != nil {
			t.Fatal(err)
		}
		if got, want := fileHash(t, target), fileHash(t, img); got != want {
			t.Errorf("layer %s applies to %s, want %s", m.ID, got, want)
		}
	}
	// A's chunk names do not verify in B's namespace, nor plainly.
	for _, ns := range []string{"tenant-b", ""} {
		m := a
		m.Namespace, m.Version = ns, Version(ns)
		target := filepath.Join(dir, "wrong.img")
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Apply(ctx, target, m, chunks, 2); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Apply of tenant-a's layer in namespace %q = %v, want ErrCorrupt", ns, err)
		}
	}
}

// TestVersion1Layer: a layer as format version 1 wrote it (no namespace,
// chunks named by the plain sha256 of their bytes) still applies, so that
// snapshots stored before version 2 stay restorable.
func TestVersion1Layer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := randBytes(rand.NewChaCha8([32]byte{14}), 2*BlockSize)
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:])
	compressed := encoder().EncodeAll(data, nil)
	chunks := newMemChunks()
	chunks.set(name, compressed)
	manifest := fmt.Sprintf(`{"version":1,"id":"sn-old","parent":"","disk_size":65536,"extents":[`+
		`{"offset":8192,"length":8192,"chunk":"%s","stored":%d},{"offset":32768,"length":4096,"zero":true}],`+
		`"labels":{"tenant":"t-old"}}`, name, len(compressed))
	m, err := ParseManifest([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "old.img")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, target, m, chunks, 2); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 16*BlockSize)
	copy(want[8192:], data)
	got, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the version 1 layer applied to other bytes than it holds")
	}
}

// TestFileRanges: a file of any size is written whole, its zeros written
// out stored as zero extents, and applies back to its bytes.
func TestFileRanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory")
	data := append(bytes.Repeat([]byte{7}, MiB), make([]byte, 2*MaxChunk)...)
	data = append(data, bytes.Repeat([]byte{9}, 5000)...) // ends mid-block
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ranges, size, err := FileRanges(path)
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || len(ranges) != 1 || ranges[0].Off != 0 || ranges[0].Len != alignUp(size) {
		t.Fatalf("ranges %v size %d, want one run of the file's %d bytes rounded up to a block", ranges, size, len(data))
	}
	chunks := newMemChunks()
	extents, stats, err := Write(context.Background(), path, ranges, "", chunks, 4)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Zero != MaxChunk || stats.NewChunks != 2 { // the extent from 4 MiB holds only zeros
		t.Errorf("stats %+v: want the zeros written out as zero extents, two chunks stored", stats)
	}
	m := Manifest{Version: VersionPlain, ID: "mem", DiskSize: alignUp(size), Extents: extents}
	out := filepath.Join(dir, "back")
	os.WriteFile(out, nil, 0o600)
	if err := Apply(context.Background(), out, m, chunks, 4); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got[:len(data)], data) || !allZero(got[len(data):]) {
		t.Error("the file applied back differs")
	}
}
