package resolver

import (
	"net/netip"
	"sync"
	"time"
)

// limitAction is what the rate limiter says of a query.
type limitAction int

const (
	admit  limitAction = iota
	refuse             // over the rate: answer REFUSED
	drop               // over twice the rate: send nothing
)

// limiter is a token bucket per source address: qps tokens a second, up to
// a burst of 2*qps. A query takes a token; without one it takes a token of
// a second bucket of the same size, the refusals, so that answering a
// flood is itself bounded; without either the query is dropped.
type limiter struct {
	rate  float64 // tokens a second
	burst float64
	now   func() time.Time

	mu      sync.Mutex // guards sources and swept
	sources map[netip.Addr]*bucket
	swept   time.Time // when sources was last rid of idle buckets
}

type bucket struct {
	tokens, refusals float64
	last             time.Time
}

// sweepEvery is how often buckets idle that long (so full again) are
// forgotten, to keep sources to the sandboxes that are querying.
const sweepEvery = time.Minute

func newLimiter(qps int) *limiter {
	return &limiter{
		rate:    float64(qps),
		burst:   2 * float64(qps),
		now:     time.Now,
		sources: make(map[netip.Addr]*bucket),
	}
}

func (l *limiter) take(src netip.Addr) limitAction {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.swept) > sweepEvery {
		for a, b := range l.sources {
			if now.Sub(b.last) > sweepEvery {
				delete(l.sources, a)
			}
		}
		l.swept = now
	}
	b := l.sources[src]
	if b == nil {
		b = &bucket{tokens: l.burst, refusals: l.burst, last: now}
		l.sources[src] = b
	}
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(l.burst, b.tokens+d*l.rate)
		b.refusals = min(l.burst, b.refusals+d*l.rate)
		b.last = now
	}
	switch {
	case b.tokens >= 1:
		b.tokens--
		return admit
	case b.refusals >= 1:
		b.refusals--
		return refuse
	}
	return drop
}

// slots bounds work in progress, per source and in all.
type slots struct {
	total, perSource int

	mu  sync.Mutex // guards n and sum
	n   map[netip.Addr]int
	sum int
}

func newSlots(total, perSource int) *slots {
	return &slots{total: total, perSource: perSource, n: make(map[netip.Addr]int)}
}

// acquire takes a slot for src, if one is free; release gives it back.
func (s *slots) acquire(src netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sum >= s.total || s.n[src] >= s.perSource {
		return false
	}
	s.n[src]++
	s.sum++
	return true
}

func (s *slots) release(src netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[src]--; s.n[src] <= 0 {
		delete(s.n, src)
	}
	s.sum--
}
