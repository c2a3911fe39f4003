package main

// A node's layer cache: the layers it has materialized (each kept as a
// reflink clone, which costs the layer's own bytes), least recently used
// first out once their bytes pass the cache's size. Entries live in one
// pool of index-linked records, so that 10,000 caches of thousands of
// layers hold no pointers for the collector to chase.
type lru struct {
	idx        map[int32]int32 // layer → entry
	head, tail int32           // most and least recently used; -1 when empty
	bytes      int64
	limit      int64
}

type cacheEntry struct {
	layer      int32
	prev, next int32 // towards head, towards tail
}

// entryPool holds every cache's entries.
type entryPool struct {
	ents []cacheEntry
	free []int32
}

func newLRU(limit int64) lru { return lru{idx: map[int32]int32{}, head: -1, tail: -1, limit: limit} }

func (c *lru) holds(layer int32) bool {
	_, ok := c.idx[layer]
	return ok
}

// touch makes a held layer the most recently used.
func (c *lru) touch(p *entryPool, layer int32) {
	e := c.idx[layer]
	c.unlink(p, e)
	c.pushHead(p, e)
}

// insert adds a layer as the most recently used (touches it if held), then
// evicts from the tail until the cache fits, calling evicted for each.
func (c *lru) insert(p *entryPool, layer int32, size func(int32) int64, evicted func(int32)) {
	if _, ok := c.idx[layer]; ok {
		c.touch(p, layer)
		return
	}
	var e int32
	if k := len(p.free); k > 0 {
		e = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		p.ents = append(p.ents, cacheEntry{})
		e = int32(len(p.ents) - 1)
	}
	p.ents[e] = cacheEntry{layer: layer}
	c.idx[layer] = e
	c.pushHead(p, e)
	c.bytes += size(layer)
	for c.bytes > c.limit && c.tail != e {
		old := c.tail
		l := p.ents[old].layer
		c.unlink(p, old)
		delete(c.idx, l)
		p.free = append(p.free, old)
		c.bytes -= size(l)
		evicted(l)
	}
}

// clear empties the cache (the node failed and came back blank).
func (c *lru) clear(p *entryPool) {
	for e := c.head; e >= 0; e = p.ents[e].next {
		p.free = append(p.free, e)
	}
	*c = newLRU(c.limit)
}

func (c *lru) unlink(p *entryPool, e int32) {
	en := &p.ents[e]
	if en.prev >= 0 {
		p.ents[en.prev].next = en.next
	} else {
		c.head = en.next
	}
	if en.next >= 0 {
		p.ents[en.next].prev = en.prev
	} else {
		c.tail = en.prev
	}
}

func (c *lru) pushHead(p *entryPool, e int32) {
	en := &p.ents[e]
	en.prev, en.next = -1, c.head
	if c.head >= 0 {
		p.ents[c.head].prev = e
	}
	c.head = e
	if c.tail < 0 {
		c.tail = e
	}
}
