//go:build linux

package fusefile

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// BenchmarkFUSE compares loop devices over the FUSE file with loop devices
// over a raw image file, in the same run, with O_DIRECT I/O on the loop
// devices at queue depth 1: sequential 1 MiB writes and reads, random 4 KiB
// writes and reads. Run it as root, alone on the machine:
//
//	go test -run '^$' -bench '^BenchmarkFUSE$' -benchtime 1x ./internal/blockdev/fusefile/
//
// The cases are loop devices over: the raw image (raw: direct I/O off, so
// that, like the FUSE cases' blockdev.File, it goes through the image's page
// cache; raw-dio: on, as the container runtime attaches disks today), and
// the FUSE file with the loop device's direct I/O off (fuse) and on
// (fuse-dio). Each sub-benchmark reports MB/s and mean latency (µs per
// request) for each case, and each FUSE case's MB/s over raw's.
func BenchmarkFUSE(b *testing.B) {
	requireLoop(b)
	rawImg, _ := newImage(b, benchDevice)
	_, file := newImage(b, benchDevice)
	f := mount(b, file)

	var cases []benchCase
	for _, c := range []struct {
		name     string
		path     string
		directIO bool
	}{
		{"raw", rawImg, false},
		{"raw-dio", rawImg, true},
		{"fuse", f.Path(), false},
		{"fuse-dio", f.Path(), true},
	} {
		loop, dio := attachLoop(b, c.path, c.directIO)
		if dio != c.directIO {
			b.Logf("%s: loop direct I/O is %v, asked for %v", c.name, dio, c.directIO)
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
			for i, c := range cases[2:] {
				b.ReportMetric(mbps[i+2]/mbps[0], c.name+"/raw")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
