package warmpool

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"warren/internal/backoff"
	"warren/internal/wait"
)

// maker makes ints, failing the calls listed in fail (1 for the first).
type maker struct {
	mu        sync.Mutex
	calls     int
	fail      map[int]bool
	discarded []int
}

func (m *maker) make() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.fail[m.calls] {
		return 0, errors.New("make failed")
	}
	return m.calls, nil
}

func (m *maker) discard(v int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.discarded = append(m.discarded, v)
	return nil
}

func (m *maker) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func newPool(m *maker, size int, quiet time.Duration) *Pool[int] {
	return New(Config[int]{
		Size: size, Make: m.make, Discard: m.discard, Quiet: quiet,
		Retry: backoff.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
	})
}

func TestFillTakeRefill(t *testing.T) {
	m := &maker{}
	p := newPool(m, 2, time.Millisecond)
	defer p.Close()
	if _, ok := p.Take(); ok {
		t.Fatal("Take before Start found an item")
	}
	p.Start()
	p.Start() // a second Start starts nothing more
	wait.For(t, 10*time.Second, "two ready", func() bool { return len(p.Ready()) == 2 })
	v, ok := p.Take()
	if !ok || v != 2 {
		t.Fatalf("Take = %d, %v; want the last made, 2", v, ok)
	}
	wait.For(t, 10*time.Second, "the refill", func() bool { return len(p.Ready()) == 2 })
	if got := p.Ready(); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("ready %v, want [1 3]", got)
	}
}

// Regression: the network's warm-router pool, once empty, stopped for good
// after one failed refill (it waited for the next take, which an empty pool
// never gets). A failed make is retried.
func TestRefillFailingOnceIsRetried(t *testing.T) {
	m := &maker{fail: map[int]bool{1: true}}
	p := newPool(m, 1, 0)
	defer p.Close()
	p.Start()
	wait.For(t, 10*time.Second, "an item after a failed make", func() bool { return len(p.Ready()) == 1 })
	if got := m.count(); got != 2 {
		t.Fatalf("%d makes, want 2 (one failed, one retried)", got)
	}
}

func TestRefillWaitsForQuiet(t *testing.T) {
	m := &maker{}
	const quiet = 200 * time.Millisecond
	p := newPool(m, 1, quiet)
	defer p.Close()
	p.Start()
	wait.For(t, 10*time.Second, "the first fill", func() bool { return len(p.Ready()) == 1 })
	start := time.Now()
	p.Take()
	wait.For(t, 10*time.Second, "the refill", func() bool { return len(p.Ready()) == 1 })
	if d := time.Since(start); d < quiet {
		t.Fatalf("refilled %v after a take, want at least %v", d, quiet)
	}
}

func TestCloseDiscardsReady(t *testing.T) {
	m := &maker{}
	p := newPool(m, 3, 0)
	p.Start()
	wait.For(t, 10*time.Second, "three ready", func() bool { return len(p.Ready()) == 3 })
	taken, _ := p.Take()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	discarded := slices.Sorted(slices.Values(m.discarded))
	m.mu.Unlock()
	want := slices.DeleteFunc([]int{1, 2, 3}, func(v int) bool { return v == taken })
	// A make may have run between the take and Close: its item is ready too.
	if len(discarded) < 2 || !slices.Equal(discarded[:2], want) {
		t.Fatalf("discarded %v, want %v (and perhaps a refill)", discarded, want)
	}
	calls := m.count()
	p.Start()                         // after Close: nothing
	time.Sleep(20 * time.Millisecond) // nothing to poll for: time for a wrong make to happen
	if m.count() != calls {
		t.Fatal("Start after Close made items")
	}
	if _, ok := p.Take(); ok {
		t.Fatal("Take after Close found an item")
	}
}

func TestZeroSize(t *testing.T) {
	m := &maker{}
	p := newPool(m, 0, 0)
	p.Start()
	if err := p.Close(); err != nil || m.count() != 0 {
		t.Fatalf("Close = %v after %d makes, want nil after 0", err, m.count())
	}
}

// TestSetSizePut: a pool grows to a larger size, discards its oldest items
// when made smaller, takes back what fits and discards the rest, and
// discards what is put back once closed.
func TestSetSizePut(t *testing.T) {
	m := &maker{}
	p := newPool(m, 0, time.Millisecond)
	p.Start()
	if err := p.SetSize(3); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "three items made", func() bool { return len(p.Ready()) == 3 })
	if err := p.SetSize(1); err != nil {
		t.Fatal(err)
	}
	if got := p.Ready(); !slices.Equal(got, []int{3}) {
		t.Fatalf("ready after shrinking to 1 = %v, want the newest, [3]", got)
	}
	m.mu.Lock()
	discarded := slices.Clone(m.discarded)
	m.mu.Unlock()
	if !slices.Equal(discarded, []int{1, 2}) {
		t.Errorf("discarded = %v, want the oldest two", discarded)
	}
	item, ok := p.Take()
	if !ok || item != 3 {
		t.Fatalf("Take = %d, %v", item, ok)
	}
	wait.For(t, 10*time.Second, "the pool refilled", func() bool { return len(p.Ready()) == 1 })
	if err := p.Put(item); err != nil { // full: discarded
		t.Fatal(err)
	}
	if got := len(p.Ready()); got != 1 {
		t.Errorf("a full pool took an item back: %d ready", got)
	}
	p.Close()
	if err := p.Put(7); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.discarded, 7) || !slices.Contains(m.discarded, 3) {
		t.Errorf("discarded = %v, want 3 (put back into a full pool) and 7 (put back after Close)", m.discarded)
	}
}
