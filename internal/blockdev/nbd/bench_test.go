package nbd

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// BenchmarkNBD measures the NBD front end: qemu-img bench through the
// server, against the same qemu-img bench on the raw file the server
// serves (a blockdev.File, so the tiers are not measured). Each case
// reports the runs' throughput (MB/s) and time per request (µs/req, with
// depth requests in flight), and the ratios of the throughputs. Two raw
// runs: -t writeback, through the page cache as the server's own reads and
// writes of the file go (raw), and -t none, O_DIRECT, as a vm sandbox's
// QEMU opens its disk image today (raw-direct). The image is filled
// first, so reads do not read holes. Run it alone on the machine:
//
//	go test -run '^$' -bench BenchmarkNBD -benchtime 3x ./internal/blockdev/nbd/
//
// qemu-img bench only walks the image in steps: the "rand" cases step by
// an odd number of 4 KiB blocks modulo the image size, which visits every
// block once in scattered order.
func BenchmarkNBD(b *testing.B) {
	requireQEMU(b)
	const size = 256 << 20
	dev, path := newFile(b, size)
	data := pattern(1<<20, 3)
	for off := int64(0); off < size; off += 1 << 20 {
		if _, err := dev.WriteAt(data, off); err != nil {
			b.Fatal(err)
		}
	}
	url := nbdURL(serve(b, dev, Options{}).sock, "")

	cases := []struct {
		name         string
		write        bool
		bufSize      int
		step         int
		depth, count int
	}{
		{"seq-1M-write", true, 1 << 20, 1 << 20, 8, size >> 20},
		{"seq-1M-read", false, 1 << 20, 1 << 20, 8, size >> 20},
		{"rand-4K-write", true, 4096, 4096 * 25013, 16, size / 4096 / 4},
		{"rand-4K-read", false, 4096, 4096 * 25013, 16, size / 4096 / 4},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			args := []string{"bench", "-f", "raw", "-t", "writeback",
				"-c", strconv.Itoa(c.count), "-d", strconv.Itoa(c.depth),
				"-s", strconv.Itoa(c.bufSize), "-S", strconv.Itoa(c.step)}
			if c.write {
				args = append(args, "-w")
			}
			// raw-direct: the image as a vm sandbox's QEMU opens it,
			// cache=none (O_DIRECT).
			direct := slices.Clone(args)
			direct[slices.Index(direct, "writeback")] = "none"
			var nbdSecs, rawSecs, directSecs float64
			for range b.N {
				nbdSecs += qemuBench(b, append(args, url))
				rawSecs += qemuBench(b, append(args, path))
				directSecs += qemuBench(b, append(direct, path))
			}
			reqs := float64(b.N * c.count)
			mb := reqs * float64(c.bufSize) / 1e6
			b.ReportMetric(mb/nbdSecs, "nbd-MB/s")
			b.ReportMetric(mb/rawSecs, "raw-MB/s")
			b.ReportMetric(mb/directSecs, "raw-direct-MB/s")
			b.ReportMetric(nbdSecs/reqs*1e6, "nbd-µs/req")
			b.ReportMetric(rawSecs/reqs*1e6, "raw-µs/req")
			b.ReportMetric(directSecs/reqs*1e6, "raw-direct-µs/req")
			b.ReportMetric(rawSecs/nbdSecs, "nbd/raw")
			b.ReportMetric(directSecs/nbdSecs, "nbd/raw-direct")
		})
	}
}

var benchTime = regexp.MustCompile(`Run completed in ([0-9.]+) seconds`)

// qemuBench runs qemu-img with args and returns the run time it reports.
func qemuBench(b *testing.B, args []string) float64 {
	b.Helper()
	out, ok := runQEMU(b, "qemu-img", args...)
	m := benchTime.FindStringSubmatch(out)
	if !ok || m == nil {
		b.Fatalf("qemu-img %q: no run time in %q", args, out)
	}
	secs, err := strconv.ParseFloat(m[1], 64)
	if err != nil || secs <= 0 {
		b.Fatalf("qemu-img bench: run time %q: %v", m[1], err)
	}
	return secs
}
