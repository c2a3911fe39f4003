package server

import (
	"sync"

	"warren/api"
)

// Bounds on what one exec, one sandbox and one tenant may hold of the
// daemon (docs/API.md, "Limits"). Output collected for a non-streaming exec
// is the daemon's memory: each such exec holds up to twice MaxOutputBytes,
// so their number is bounded per tenant and on the node. Streaming execs
// and process streams hold little memory but an agent stream each, and are
// bounded per sandbox.
const (
	DefaultMaxOutputBytes       = 4 << 20
	DefaultMaxStreamsPerSandbox = 64
	DefaultMaxCollectsPerTenant = 16
	DefaultMaxCollectsOnNode    = 64
)

// Limits bound concurrent calls; zero fields take the defaults above.
type Limits struct {
	// StreamsPerSandbox bounds the execs (collected or streamed) and
	// process streams open at once on one sandbox.
	StreamsPerSandbox int
	// CollectsPerTenant and CollectsOnNode bound the non-streaming execs
	// in flight, whose output the daemon holds.
	CollectsPerTenant, CollectsOnNode int
}

func (l Limits) withDefaults() Limits {
	if l.StreamsPerSandbox <= 0 {
		l.StreamsPerSandbox = DefaultMaxStreamsPerSandbox
	}
	if l.CollectsPerTenant <= 0 {
		l.CollectsPerTenant = DefaultMaxCollectsPerTenant
	}
	if l.CollectsOnNode <= 0 {
		l.CollectsOnNode = DefaultMaxCollectsOnNode
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
