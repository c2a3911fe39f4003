package blob

import (
	"context"
	"sync/atomic"
)

// Counted is a Store that counts the bytes of the objects stored and
// fetched through it, for the node's metrics. Its zero Store is not usable:
// set Store.
type Counted struct {
	Store
	stored, fetched atomic.Int64
}

// Put stores data and counts its bytes once stored.
func (c *Counted) Put(ctx context.Context, key string, data []byte) error {
	if err := c.Store.Put(ctx, key, data); err != nil {
		return err
	}
	c.stored.Add(int64(len(data)))
	return nil
}

// Get fetches an object and counts its bytes.
func (c *Counted) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.Store.Get(ctx, key)
	c.fetched.Add(int64(len(b)))
	return b, err
}

// Bytes are the bytes stored and fetched through c so far.
func (c *Counted) Bytes() (stored, fetched int64) { return c.stored.Load(), c.fetched.Load() }
