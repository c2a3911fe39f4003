package nbd

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests attach QEMU's own NBD client (qemu-io and qemu-img, from
// Debian's qemu-utils) to the server over a unix socket. They need no root.

const qemuSize = 64 << 20

func requireQEMU(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"qemu-io", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("QEMU's NBD client is needed: %s not found (Debian package qemu-utils)", tool)
		}
	}
}

func nbdURL(sock, export string) string {
	return "nbd+unix:///" + export + "?socket=" + sock
}

// runQEMU runs a QEMU tool, at most a minute, and returns its output and
// whether it succeeded: exit status 0 and no failure in its output
// (qemu-io's aio commands report pattern mismatches only there).
func runQEMU(t testing.TB, name string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	ok := err == nil && !strings.Contains(string(out), "failed")
	if !ok {
		t.Logf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out), ok
}

// qemuIO runs qemu-io on url with one -c per command; opts come first.
func qemuIO(t testing.TB, url string, opts []string, cmds ...string) bool {
	t.Helper()
	args := append([]string{"-f", "raw"}, opts...)
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	_, ok := runQEMU(t, "qemu-io", append(args, url)...)
	return ok
}

func TestQEMUReadWrite(t *testing.T) {
	requireQEMU(t)
	dev, _ := newFile(t, qemuSize)
	url := nbdURL(serve(t, dev, Options{ExportName: "disk"}).sock, "disk")
	if !qemuIO(t, url, nil,
		"write -P 0xab 0 1M", "read -P 0xab 0 1M",
		"write -P 0xcd 1048577 3000", "read -P 0xcd 1048577 3000", // unaligned
		"write -P 0xef 63M 1M", "read -P 0xef 63M 1M",
		"read -P 0 2M 1M",
	) {
		t.Fatal("qemu-io failed")
	}
	checkBytes(t, dev, 0, bytes.Repeat([]byte{0xab}, 1<<20))
	checkBytes(t, dev, 1<<20, append([]byte{0}, bytes.Repeat([]byte{0xcd}, 3000)...))
	checkBytes(t, dev, 63<<20, bytes.Repeat([]byte{0xef}, 1<<20))

	// The harness sees a failure: the wrong pattern, and the default export
	// name "" for the same disk.
	if qemuIO(t, url, nil, "read -P 0x11 0 1M") {
		t.Fatal("qemu-io read the wrong pattern without failing")
	}
	if !qemuIO(t, strings.Replace(url, "/disk?", "/?", 1), nil, "read -P 0xab 0 1M") {
		t.Fatal("qemu-io failed on the default export")
	}
	if qemuIO(t, strings.Replace(url, "/disk?", "/other?", 1), nil, "read 0 4k") {
		t.Fatal("qemu-io opened an unknown export")
	}
}

// qemu-io's flush and FUA writes (write -f) reach Device.Flush before QEMU
// goes on to its next command. With -t writeback QEMU adds no flushes of
// its own after writes (its default, writethrough, flushes after each).
func TestQEMUFlushAndFUA(t *testing.T) {
	requireQEMU(t)
	var log opLog
	dev, _ := newFile(t, qemuSize)
	url := nbdURL(serve(t, &hooked{Device: dev, hook: log.hook}, Options{}).sock, "")
	if !qemuIO(t, url, []string{"-t", "writeback"},
		"write -P 1 0 64k", "read -P 1 0 64k", "flush",
		"write -f -P 2 64k 64k", "read -P 2 64k 64k",
	) {
		t.Fatal("qemu-io failed")
	}
	want := []string{
		"write 0+65536", "read 0+65536", "flush",
		"write 65536+65536", "flush", "read 65536+65536",
	}
	if got := log.get(); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("device calls %q, want %q then anything", got, want)
	}
}

func TestQEMUDiscardAndZeroes(t *testing.T) {
	requireQEMU(t)
	var log opLog
	dev, _ := newFile(t, qemuSize)
	ones := bytes.Repeat([]byte{0xff}, 1<<20)
	for off := int64(0); off < qemuSize; off += 1 << 20 {
		if _, err := dev.WriteAt(ones, off); err != nil {
			t.Fatal(err)
		}
	}
	url := nbdURL(serve(t, &hooked{Device: dev, hook: log.hook}, Options{}).sock, "")
	if !qemuIO(t, url, []string{"-t", "writeback"},
		"discard 1M 1M",
		"write -z 4M 1M",        // NBD_CMD_FLAG_NO_HOLE
		"write -z -u 8M 1M",     // may unmap
		"write -z -f 10M 64k",   // FUA
		"write -z 12345 100000", // unaligned: QEMU sends it as it is
		"discard 16M 40M",       // more than the 32 MiB maximum block size
		"read -P 0 1M 1M", "read -P 0 4M 1M", "read -P 0 8M 1M", "read -P 0 10M 64k",
		"read -P 0 12345 100000", "read -P 0 16M 40M",
		"read -P 0xff 0 12345", "read -P 0xff 2M 2M", "read -P 0xff 56M 8M",
	) {
		t.Fatal("qemu-io failed")
	}
	want := make([]byte, qemuSize)
	copy(want, bytes.Repeat([]byte{0xff}, qemuSize))
	for _, r := range [][2]int64{{1 << 20, 2 << 20}, {4 << 20, 5 << 20}, {8 << 20, 9 << 20}, {10 << 20, 10<<20 + 64<<10}, {12345, 112345}, {16 << 20, 56 << 20}} {
		clear(want[r[0]:r[1]])
	}
	checkBytes(t, dev, 0, want)
	got := log.get()
	for _, call := range []string{
		"trim 1048576+1048576", "zero 4194304+1048576", "zero 8388608+1048576", "zero 10485760+65536",
		"write 12345+4039", "zero 16384+94208", "write 110592+1753", // the server splits what QEMU sent
		"trim 16777216+41943040",
	} {
		if !slices.Contains(got, call) {
			t.Errorf("no device call %q in %q", call, got)
		}
	}
	if i := slices.Index(got, "zero 10485760+65536"); i < 0 || i+1 == len(got) || got[i+1] != "flush" {
		t.Errorf("FUA write zeroes not followed by a flush: %q", got)
	}
}

// QEMU keeps several requests in flight on its one connection (at most 16);
// the server runs them at once. The device takes a millisecond a call, so
// that they overlap there.
func TestQEMUConcurrent(t *testing.T) {
	requireQEMU(t)
	var (
		mu           sync.Mutex
		inside, most int // guarded by mu
	)
	dev, _ := newFile(t, qemuSize)
	url := nbdURL(serve(t, &hooked{Device: dev, hook: func(op string, off, n int64) error {
		mu.Lock()
		inside++
		most = max(most, inside)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inside--
		mu.Unlock()
		return nil
	}}, Options{}).sock, "")

	var cmds []string
	for i := range 16 {
		cmds = append(cmds, "aio_write -P "+strconv.Itoa(0x20+i)+" "+strconv.Itoa(i*65536)+" 64k")
	}
	cmds = append(cmds, "aio_flush")
	for i := range 16 {
		cmds = append(cmds, "aio_read -P "+strconv.Itoa(0x20+i)+" "+strconv.Itoa(i*65536)+" 64k")
	}
	cmds = append(cmds, "aio_flush")
	if !qemuIO(t, url, []string{"-t", "writeback"}, cmds...) {
		t.Fatal("qemu-io failed")
	}
	for i := range 16 {
		checkBytes(t, dev, int64(i)*65536, bytes.Repeat([]byte{byte(0x20 + i)}, 65536))
	}

	// qemu-img bench: 2000 writes of 4 KiB, 16 in flight, then the reads.
	bench := []string{"bench", "-f", "raw", "-c", "2000", "-d", "16", "-s", "4k", "-o", "8M"}
	if _, ok := runQEMU(t, "qemu-img", append(bench, "-w", "--pattern=90", url)...); !ok {
		t.Fatal("qemu-img bench -w failed")
	}
	if _, ok := runQEMU(t, "qemu-img", append(bench, url)...); !ok {
		t.Fatal("qemu-img bench failed")
	}
	checkBytes(t, dev, 8<<20, bytes.Repeat([]byte{90}, 2000*4096))
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d requests in the device at once, want several", most)
	}
	t.Logf("at most %d requests in the device at once", most)
}

// qemu-img convert and compare copy a whole image through the server in
// both directions, with holes.
func TestQEMUConvertCompare(t *testing.T) {
	requireQEMU(t)
	const size = 32 << 20
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for off := 0; off < size; off += 1 << 20 {
		if off/(1<<20)%3 != 0 { // every third MiB is a hole
			for i := off; i < off+1<<20; i += 8 {
				v := rng.Uint64()
				for j := range 8 {
					data[i+j] = byte(v >> (8 * j))
				}
			}
		}
	}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dev, _ := newFile(t, size)
	old := bytes.Repeat([]byte{0x77}, size) // so that holes must be written
	if _, err := dev.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	url := nbdURL(serve(t, dev, Options{}).sock, "")

	if _, ok := runQEMU(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, url); !ok {
		t.Fatal("qemu-img convert to NBD failed")
	}
	checkBytes(t, dev, 0, data)
	if _, ok := runQEMU(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, url); !ok {
		t.Fatal("qemu-img compare failed")
	}
	out := filepath.Join(dir, "out.img")
	if _, ok := runQEMU(t, "qemu-img", "convert", "-f", "raw", "-O", "raw", url, out); !ok {
		t.Fatal("qemu-img convert from NBD failed")
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("image converted from NBD differs (%v)", err)
	}

	if _, err := dev.WriteAt([]byte{1}, size/2+7); err != nil {
		t.Fatal(err)
	}
	if _, ok := runQEMU(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, url); ok {
		t.Fatal("qemu-img compare found no difference")
	}
}
