package nbd

import (
	"math/bits"
	"sync"
)

// Request buffers are recycled by size class, powers of two from 4 KiB to
// maxPayload, so that a stream of 1 MiB writes does not allocate 1 MiB each.
const (
	minClassShift = 12
	numClasses    = 14 // 4 KiB << 13 == maxPayload
)

var pools [numClasses]sync.Pool // of *[]byte with cap 4 KiB << class

func class(n int) int { return bits.Len(uint(n-1) >> minClassShift) }

// getBuf returns a buffer of n bytes, 0 <= n <= maxPayload, of unspecified
// content.
func getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := class(n)
	if p, ok := pools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minClassShift))
}

// putBuf recycles a buffer from getBuf; the caller must not use it after.
func putBuf(b []byte) {
	if cap(b) == 0 {
		return
	}
	pools[class(cap(b))].Put(&b)
}
