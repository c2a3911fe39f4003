//go:build linux

package leasewatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLapsed: a lease is over once more than its length has passed since
// the renewing heartbeat was sent, however late its answer came.
func TestLapsed(t *testing.T) {
	const lease = 5 * time.Second
	sent := renewal{sent: 100 * time.Second}
	for _, tc := range []struct {
		now  time.Duration
		want bool
	}{
		{100 * time.Second, false},
		{104 * time.Second, false},
		{105 * time.Second, false}, // exactly the lease: not over yet
		{105*time.Second + time.Nanosecond, true},
		{200 * time.Second, true},
		{99 * time.Second, false}, // a renewal read as later than now
	} {
		if got := lapsed(sent, tc.now, lease); got != tc.want {
			t.Errorf("lapsed(sent at %v, now %v, lease %v) = %v, want %v", sent.sent, tc.now, lease, got, tc.want)
		}
	}
}

// TestRenewalLine: a line reads back as written; a line not whole (cut
// short, changed, mixed with another) reads as torn, never as a renewal.
func TestRenewalLine(t *testing.T) {
	r := renewal{boot: "6b5b3e5a-0c6f-4f4e-9d55-1c1e7f1f2a3b", sent: 123456789 * time.Microsecond,
		wall: time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC)}
	line := r.encode()
	got, err := decode(line)
	if err != nil || got != r {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", r, got, err)
	}
	later := r
	later.sent += 3 * time.Second
	mixed := append([]byte(nil), later.encode()...)
	copy(mixed, line[:len(line)/2]) // a read in the middle of a rewrite
	changed := append([]byte(nil), line...)
	changed[40]++
	for name, b := range map[string][]byte{
		"empty":        nil,
		"no newline":   line[:len(line)-1],
		"cut short":    line[:20],
		"changed":      changed,
		"half of each": mixed,
		"not a lease":  []byte("hello\n"),
	} {
		if got, err := decode(b); !errors.Is(err, errTorn) {
			t.Errorf("%s: decode(%q) = %+v, %v; want errTorn", name, b, got, err)
		}
	}
	// What follows the first line (a longer line written before) is not
	// read.
	if got, err := decode(append(r.encode(), "trailing"...)); err != nil || got != r {
		t.Errorf("decode with a tail = %+v, %v", got, err)
	}
}

// TestRenewWritesTheLeaseFile: Renew records the heartbeat's sending on
// the boot clock, in place, each renewal replacing the last whole.
func TestRenewWritesTheLeaseFile(t *testing.T) {
	dir := t.TempDir()
	w := newTestWatch(t, dir)
	for _, ago := range []time.Duration{3 * time.Second, 0, 20 * time.Millisecond} {
		sent := time.Now().Add(-ago)
		w.Renew(sent)
		b, err := os.ReadFile(filepath.Join(dir, leaseFile))
		if err != nil {
			t.Fatal(err)
		}
		r, err := decode(b)
		if err != nil {
			t.Fatalf("the lease file after Renew: %q: %v", b, err)
		}
		now, err := bootClock()
		if err != nil {
			t.Fatal(err)
		}
		if age := now - r.sent; age < ago || age > ago+time.Second {
			t.Errorf("renewal sent %v ago reads as %v ago", ago, age)
		}
		if r.boot != w.boot || !r.wall.Equal(sent) {
			t.Errorf("renewal %+v, want boot %s and wall %v", r, w.boot, sent)
		}
		if lapsed(r, now, time.Second) != (ago > time.Second) {
			t.Errorf("renewal sent %v ago: lapsed %v under a 1s lease", ago, !(ago > time.Second))
		}
	}
}

// newTestWatch is a Watch of dir's lease file with no watchdog: Renew
// writes the file and starts none.
func newTestWatch(t *testing.T, dir string) *Watch {
	t.Helper()
	boot, err := bootID()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, leaseFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &Watch{opts: Options{DataDir: dir, StateDir: dir, Lease: time.Second, Log: testLog(t)}, boot: boot, lease: f,
		exited: make(chan struct{})}
}
