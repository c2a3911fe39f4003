package consolelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"warren/internal/backoff"
)

// write writes all of p to w, waiting while the pipe is full.
func write(t *testing.T, w *os.File, p []byte) {
	t.Helper()
	for len(p) > 0 {
		n, err := syscall.Write(int(w.Fd()), p)
		if n > 0 {
			p = p[n:]
		}
		switch {
		case errors.Is(err, syscall.EAGAIN):
			time.Sleep(time.Millisecond) // the FIFO is full: the writer waits for the drain, as a console does
		case err != nil:
			t.Fatalf("write: %v", err)
		}
	}
}

// waitFor waits until the log ends with suffix.
func waitFor(t *testing.T, log string, suffix []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b []byte
	err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}, func() (bool, error) {
		b, _ = os.ReadFile(log)
		return bytes.HasSuffix(b, suffix), nil
	})
	if err != nil {
		t.Fatalf("log never ended with %q; it holds %d bytes ending %q", suffix, len(b), b[max(0, len(b)-40):])
	}
	return b
}

// TestDrainBoundsTheLog: 8 MiB written through the FIFO leave a log of at
// most max bytes holding the newest output; the writer never blocks.
func TestDrainBoundsTheLog(t *testing.T) {
	dir := t.TempDir()
	fifo, log := filepath.Join(dir, "console.fifo"), filepath.Join(dir, "console.log")
	const max = 256 << 10
	d, err := Start(fifo, log, max)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	w, err := Writer(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	line := bytes.Repeat([]byte("x"), 1000)
	for i := range 8 << 10 {
		write(t, w, fmt.Appendf(nil, "%06d %s\n", i, line))
	}
	last := []byte("the end\n")
	write(t, w, last)
	b := waitFor(t, log, last)
	if len(b) > max || len(b) < max/2-2000 {
		t.Errorf("log holds %d bytes after 8 MiB, want between %d and %d", len(b), max/2, max)
	}
	if !bytes.Contains(b, []byte(fmt.Sprintf("%06d ", 8<<10-1))) {
		t.Error("the newest lines are not in the log")
	}
}

// TestDrainAfterRestart: while nothing drains, writes fail at once (EPIPE)
// rather than block; a new Drain on the same FIFO, as a restarted daemon
// makes, gets what is written after it.
func TestDrainAfterRestart(t *testing.T) {
	dir := t.TempDir()
	fifo, log := filepath.Join(dir, "console.fifo"), filepath.Join(dir, "console.log")
	d, err := Start(fifo, log, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Writer(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write(t, w, []byte("before\n"))
	waitFor(t, log, []byte("before\n"))
	d.Stop()
	if _, err := syscall.Write(int(w.Fd()), []byte("lost\n")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("write with no drain: %v, want EPIPE", err)
	}
	d, err = Start(fifo, log, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	write(t, w, []byte("after\n"))
	if b := waitFor(t, log, []byte("after\n")); string(b) != "before\nafter\n" {
		t.Errorf("log %q", b)
	}
}

func TestStartRefusesANonFIFO(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "console.fifo")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(file, filepath.Join(dir, "console.log"), 0); err == nil {
		t.Error("Start on a regular file: no error")
	}
}
