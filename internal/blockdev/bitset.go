package blockdev

import (
	"encoding/binary"
	"math/bits"
)

// bitset is a set of cells.
type bitset []uint64

func newBitset(n int64) bitset { return make(bitset, (n+63)/64) }

func (b bitset) has(i int64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i int64)      { b[i/64] |= 1 << (i % 64) }

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

func (b bitset) clone() bitset { return append(bitset(nil), b...) }

// bytes encodes the set, little-endian words.
func (b bitset) bytes() []byte {
	out := make([]byte, 0, 8*len(b))
	for _, w := range b {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out
}

// bitsetOf decodes a set of n cells; it reports false if data does not
// hold one.
func bitsetOf(data []byte, n int64) (bitset, bool) {
	b := newBitset(n)
	if len(data) != 8*len(b) {
		return nil, false
	}
	for i := range b {
		b[i] = binary.LittleEndian.Uint64(data[8*i:])
	}
	return b, true
}
