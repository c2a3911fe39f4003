//go:build linux

package fusefile

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fileblob "warren/internal/blob/file"
	"warren/internal/blockdev"
	"warren/internal/chunkstore"
)

const (
	benchDevice  = 256 << 20 // bytes in each device
	benchSeq     = 64 << 20  // bytes each sequential pass moves, in 1 MiB requests
	benchRandOps = 2048      // 4 KiB requests in each random pass
)

// benchCase is one loop device the benchmark drives.
type benchCase struct {
	name string
	dev  *os.File // the loop device, opened O_DIRECT
}

// BenchmarkFUSE compares loop devices over FUSE files with a loop device
// over a raw image file, in the same run, with O_DIRECT I/O on the loop
// devices at queue depth 1: sequential 1 MiB writes and reads, random 4 KiB
// writes and reads. Run it as root, alone on the machine:
//
//	go test -run '^$' -bench '^BenchmarkFUSE$' -benchtime 3x ./internal/blockdev/fusefile/
//
// Every loop device has direct I/O on, as the container runtime attaches
// disks. The cases: the raw image (raw: a snapshot-mode sandbox's disk,
// the baseline), the FUSE file of a blockdev.File over an image like it
// (fuse-file: the front end's own cost), and the FUSE file of an always-on
// volume whose cells are all in its cache (fuse-volume: what an always-on
// sandbox gets once its disk is cached; its writes stay dirty, unflushed).
// Each sub-benchmark reports MB/s and mean latency (µs per request) for
// each case, and each FUSE case's MB/s over raw's.
func BenchmarkFUSE(b *testing.B) {
	requireLoop(b)
	rawImg, _ := newImage(b, benchDevice)
	_, file := newImage(b, benchDevice)
	vol := cachedVolume(b, benchDevice)

	var cases []benchCase
	for _, c := range []struct {
		name string
		path string
	}{
		{"raw", rawImg},
		{"fuse-file", mount(b, file).Path()},
		{"fuse-volume", mount(b, vol).Path()},
	} {
		loop, dio := attachLoop(b, c.path, true)
		if !dio {
			b.Fatalf("%s: the loop device has no direct I/O", c.name)
		}
		dev, err := os.OpenFile(loop.Path(), os.O_RDWR|unix.O_DIRECT, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		cases = append(cases, benchCase{c.name, dev})
	}

	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned, as O_DIRECT needs
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(buf)
	copy(buf, randomBytes(len(buf), 3))

	for _, p := range []struct {
		name  string
		write bool
		size  int
		ops   int
		seq   bool
	}{
		{"seq-write-1M", true, 1 << 20, benchSeq >> 20, true},
		{"seq-read-1M", false, 1 << 20, benchSeq >> 20, true},
		{"rand-write-4K", true, 4096, benchRandOps, false},
		{"rand-read-4K", false, 4096, benchRandOps, false},
	} {
		b.Run(p.name, func(b *testing.B) {
			elapsed := make([]time.Duration, len(cases))
			for range b.N {
				for i, c := range cases {
					rng := rand.New(rand.NewPCG(1, 2)) // the same offsets for every case
					start := time.Now()
					for op := range p.ops {
						off := int64(op) * int64(p.size)
						if !p.seq {
							off = rng.Int64N(benchDevice/int64(p.size)) * int64(p.size)
						}
						var err error
						if p.write {
							_, err = c.dev.WriteAt(buf[:p.size], off)
						} else {
							_, err = c.dev.ReadAt(buf[:p.size], off)
						}
						if err != nil {
							b.Fatalf("%s at %d: %v", c.name, off, err)
						}
					}
					elapsed[i] += time.Since(start)
				}
			}
			bytes := float64(b.N * p.ops * p.size)
			mbps := make([]float64, len(cases))
			for i, c := range cases {
				mbps[i] = bytes / 1e6 / elapsed[i].Seconds()
				b.ReportMetric(mbps[i], c.name+"-MB/s")
				b.ReportMetric(float64(elapsed[i].Microseconds())/float64(b.N*p.ops), c.name+"-µs/op")
			}
			for i, c := range cases[1:] {
				b.ReportMetric(mbps[i+1]/mbps[0], c.name+"/raw")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cachedVolume is an always-on volume of size bytes over an empty disk,
// its tiers in temporary directories, every cell read once so that all are
// in its cache. It writes nothing back on its own.
func cachedVolume(b *testing.B, size int64) *blockdev.Volume {
	b.Helper()
	store, err := fileblob.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	vol, err := blockdev.Create(ctx, filepath.Join(b.TempDir(), "vol"), blockdev.Config{ID: "bench", Size: size},
		blockdev.Tiers{Object: chunkstore.Store{B: store}}, blockdev.Options{WritebackEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(vol.Abandon)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := vol.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	return vol
}
