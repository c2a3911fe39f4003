package server

import (
	"context"
	"sync"

	"warren/api"
)

// Bounds on what execs hold of the daemon (docs/API.md, "Limits"). Output
// collected for a non-streaming exec is the daemon's memory: each stream is
// kept to MaxOutputBytes, and all the output held at once comes from a
// budget per tenant and one for the node; an exec whose share runs out
// keeps what it got and says truncated, so any number of execs with small
// output run at once. Execs and process streams hold an agent stream each,
// and are bounded per sandbox.
const (
	DefaultMaxOutputBytes        = 4 << 20
	DefaultMaxStreamsPerSandbox  = 256
	DefaultOutputPerTenant       = 256 << 20
	DefaultOutputOnNode          = 1 << 30
	DefaultListingsOnNode        = 4
	DefaultEventStreamsPerTenant = 16
	DefaultLargeTemplatesOnNode  = 2
)

// largeTemplateBody is the body of POST /v1/templates past which the
// request holds a turn (Limits.LargeTemplatesOnNode) while it is read and
// its build runs: a context of up to api.MaxTemplateContext is held in
// memory, base64 and decoded, until the build has it on disk.
const largeTemplateBody = 1 << 20

// Limits bound concurrent calls; zero fields take the defaults above.
type Limits struct {
	// StreamsPerSandbox bounds the execs (collected or streamed) and
	// process streams open at once on one sandbox.
	StreamsPerSandbox int
	// OutputPerTenant and OutputOnNode bound the bytes of output that
	// non-streaming execs hold at once.
	OutputPerTenant, OutputOnNode int64
	// ListingsOnNode bounds the directory listings served at once; more
	// wait their turn. Each holds a page of at most api.MaxFileListLimit
	// entries.
	ListingsOnNode int
	// EventStreamsPerTenant bounds the events streams a tenant holds open
	// on the node.
	EventStreamsPerTenant int
	// LargeTemplatesOnNode bounds the template requests with a body over
	// largeTemplateBody (a build context) read and built at once; more
	// wait their turn, holding their connection and nothing else, a
	// tenant's behind its own earlier ones.
	LargeTemplatesOnNode int
}

func (l Limits) withDefaults() Limits {
	if l.StreamsPerSandbox <= 0 {
		l.StreamsPerSandbox = DefaultMaxStreamsPerSandbox
	}
	if l.OutputPerTenant <= 0 {
		l.OutputPerTenant = DefaultOutputPerTenant
	}
	if l.OutputOnNode <= 0 {
		l.OutputOnNode = DefaultOutputOnNode
	}
	if l.ListingsOnNode <= 0 {
		l.ListingsOnNode = DefaultListingsOnNode
	}
	if l.EventStreamsPerTenant <= 0 {
		l.EventStreamsPerTenant = DefaultEventStreamsPerTenant
	}
	if l.LargeTemplatesOnNode <= 0 {
		l.LargeTemplatesOnNode = DefaultLargeTemplatesOnNode
	}
	return l
}

// counter counts holders by key against a maximum. It is safe for
// concurrent use.
type counter struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

// acquire takes one of max for key, or fails with a 429 naming what
// (with max) when all are taken. release gives it back, once.
func (c *counter) acquire(key string, max int, what string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if c.n[key] >= max {
		return nil, api.Errorf(api.CodeTooMany, "too many concurrent %s (limit %d): retry when one ends", what, max)
	}
	c.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[key]--; c.n[key] <= 0 {
				delete(c.n, key)
			}
		})
	}, nil
}

// budget hands out bytes of a node-wide total and of per-tenant totals.
// It is safe for concurrent use.
type budget struct {
	perTenant, onNode int64

	mu     sync.Mutex
	node   int64            // bytes held in all; guarded by mu
	tenant map[string]int64 // bytes held by tenant; guarded by mu
}

// take grants tenant up to n bytes, as many as both its budget and the
// node's have left.
func (b *budget) take(tenant string, n int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tenant == nil {
		b.tenant = map[string]int64{}
	}
	n = max(0, min(n, b.onNode-b.node, b.perTenant-b.tenant[tenant]))
	b.node += n
	b.tenant[tenant] += n
	return n
}

// give returns n bytes tenant took.
func (b *budget) give(tenant string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.node -= n
	if b.tenant[tenant] -= n; b.tenant[tenant] <= 0 {
		delete(b.tenant, tenant)
	}
}

// turns lets one holder at a time go per key; the others wait. It is safe
// for concurrent use, and keeps nothing for a key nobody holds or waits on.
type turns struct {
	mu   sync.Mutex
	keys map[string]*turn // guarded by mu
}

type turn struct {
	ch chan struct{} // holds a token while the turn is taken
	n  int           // holders and waiters; guarded by turns.mu
}

// wait takes key's turn, waiting for it until ctx is done (ctx's error).
// release gives it back, once.
func (t *turns) wait(ctx context.Context, key string) (release func(), err error) {
	t.mu.Lock()
	if t.keys == nil {
		t.keys = map[string]*turn{}
	}
	k := t.keys[key]
	if k == nil {
		k = &turn{ch: make(chan struct{}, 1)}
		t.keys[key] = k
	}
	k.n++
	t.mu.Unlock()
	drop := func() {
		t.mu.Lock()
		if k.n--; k.n == 0 {
			delete(t.keys, key)
		}
		t.mu.Unlock()
	}
	select {
	case k.ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-k.ch; drop() }) }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}
