package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"warren/client"
)

// clock is a fake clock that tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func lastLine(out string) string         { return out[strings.LastIndex(out, "\r")+1:] }
func draws(out string) int               { return strings.Count(out, "\r") }
func newTestProgress(b *bytes.Buffer, c *clock, total int64, bytes bool) *progress {
	return newProgress(b, c.now, 80, "files write", total, bytes)
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		name    string
		total   int64
		bytes   bool
		done    int64
		elapsed time.Duration
		status  string
		want    string
	}{
		{"bytes of a known total", 4 << 20, true, 1 << 20, 2 * time.Second, "",
			"files write  1.0 MiB / 4.0 MiB   25% [#####...............]  512.0 KiB/s  2.0s"},
		{"bytes of an unknown total", -1, true, 3 << 30, 12 * time.Second, "",
			`files write  |  3.0 GiB  256.0 MiB/s  12s`},
		{"things of a known total", 8, false, 6, 3 * time.Second, "",
			"files write  6 / 8   75% [###############.....]  2.0/s  3.0s"},
		{"a spinner with a status", -1, false, 0, 75 * time.Second, "pending",
			`files write  |  1m15s  pending`},
		{"cut to the terminal's width", -1, false, 0, 2 * time.Second, strings.Repeat("x", 100),
			"files write  |  2.0s  " + strings.Repeat("x", 79-len("files write  |  2.0s  "))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			c := newClock()
			p := newTestProgress(&b, c, tt.total, tt.bytes)
			c.advance(tt.elapsed)
			p.done, p.status = tt.done, tt.status
			if got := p.line(c.now()); got != tt.want {
				t.Errorf("line\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestProgressThrottle: the line is drawn at most every progressEvery, and
// not at all while the work is short and small.
func TestProgressThrottle(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	p := newTestProgress(&b, c, 10, false)
	p.add(1)
	c.advance(900 * time.Millisecond)
	p.add(1)
	if b.Len() != 0 {
		t.Fatalf("drawn %q within progressDelay, want nothing", b.String())
	}
	c.advance(100 * time.Millisecond)
	p.add(1)
	c.advance(50 * time.Millisecond)
	p.add(1)
	if got := draws(b.String()); got != 1 {
		t.Errorf("%d draws in 50 ms after the first, want 1: %q", got, b.String())
	}
	c.advance(50 * time.Millisecond)
	p.setStatus("going")
	if got, line := draws(b.String()), lastLine(b.String()); got != 2 || !strings.HasPrefix(line, "files write  4 / 10 ") || !strings.HasSuffix(line, "  going") {
		t.Errorf("%d draws, last %q; want 2, the last with 4 / 10 and the status", got, line)
	}

	// A megabyte shows at once.
	b.Reset()
	p = newTestProgress(&b, c, -1, true)
	p.add(progressBytes)
	if !strings.HasPrefix(b.String(), "\rfiles write  |  1.0 MiB") {
		t.Errorf("after a MiB: %q, want the line drawn", b.String())
	}
}

// TestProgressEnd: a kept line is drawn a last time and ends with a
// newline; one not kept is cleared; work too short to show leaves nothing.
func TestProgressEnd(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	p := newTestProgress(&b, c, 2<<20, true)
	p.width = 120
	p.add(1 << 20)
	c.advance(10 * time.Millisecond)
	p.add(1 << 20)
	p.end(true, "done")
	if got := lastLine(b.String()); !strings.HasSuffix(got, "100% [####################]  200.0 MiB/s  0.0s  done\n") {
		t.Errorf("final line %q, want it whole, with its status and a newline", got)
	}
	p.add(1) // after the end: nothing
	if strings.Count(b.String(), "\n") != 1 || !strings.HasSuffix(b.String(), "\n") {
		t.Errorf("drawn after the end: %q", b.String())
	}

	b.Reset()
	p = newTestProgress(&b, c, -1, true)
	p.add(2 << 20)
	shown := p.shown
	p.end(false, "")
	if want := "\r" + strings.Repeat(" ", shown) + "\r"; !strings.HasSuffix(b.String(), want) || shown == 0 {
		t.Errorf("cleared line: %q, want it ending with %q", b.String(), want)
	}

	b.Reset()
	p = newTestProgress(&b, c, 3, false)
	p.add(3)
	p.end(true, "done")
	if b.Len() != 0 {
		t.Errorf("short work wrote %q, want nothing", b.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 19: "1.5 MiB", 5 << 30: "5.0 GiB", 2 << 40: "2.0 TiB", 2 << 50: "2048.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestStatusWriter(t *testing.T) {
	var b bytes.Buffer
	c := newClock()
	p := newTestProgress(&b, c, -1, false)
	w := statusWriter{p}
	w.Write([]byte("debootstrap: I: Retrieving a\ndebootstrap: I: Retrieving b\n"))
	w.Write([]byte("\n"))
	if p.status != "debootstrap: I: Retrieving b" {
		t.Errorf("status %q, want the last line written", p.status)
	}
}

// TestProgressEventsLost: a server without the events stream (404) turns a
// restore's count into a spinner, and the call is not held up.
func TestProgressEventsLost(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"not_found","message":"no such route"}}`))
	}))
	defer hs.Close()
	var b bytes.Buffer
	p := newTestProgress(&b, newClock(), 4, false)
	start := time.Now()
	stop := countStarted(t.Context(), client.New(hs.URL, "k"), p, "sn-1")
	stop()
	if p.total != -1 || time.Since(start) >= eventsOpenWait {
		t.Errorf("total %d after %v, want -1 (a spinner) at once", p.total, time.Since(start))
	}
}
