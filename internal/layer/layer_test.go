package layer

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
)

func TestSplit(t *testing.T) {
	const M = MaxChunk
	for _, tc := range []struct {
		name   string
		ranges []Range
		want   []Extent
		err    bool
	}{
		{"none", nil, nil, false},
		{"one block", []Range{{Off: 4096, Len: 4096}}, []Extent{{Offset: 4096, Length: 4096}}, false},
		{"exactly max", []Range{{Off: 0, Len: M}}, []Extent{{Offset: 0, Length: M}}, false},
		{
			"cut from the range's start", []Range{{Off: 8192, Len: 2*M + 4096}},
			[]Extent{{Offset: 8192, Length: M}, {Offset: 8192 + M, Length: M}, {Offset: 8192 + 2*M, Length: 4096}}, false,
		},
		{
			"zero ranges cut too", []Range{{Off: 0, Len: 4096}, {Off: 4096, Len: M + 4096, Zero: true}},
			[]Extent{{Offset: 0, Length: 4096}, {Offset: 4096, Length: M, Zero: true}, {Offset: 4096 + M, Length: 4096, Zero: true}}, false,
		},
		{"unsorted", []Range{{Off: 8192, Len: 4096}, {Off: 0, Len: 4096}}, nil, true},
		{"overlapping", []Range{{Off: 0, Len: 8192}, {Off: 4096, Len: 4096}}, nil, true},
		{"unaligned", []Range{{Off: 100, Len: 4096}}, nil, true},
		{"empty", []Range{{Off: 0, Len: 0}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := split(tc.ranges)
			if (err != nil) != tc.err {
				t.Fatalf("split err = %v, want error %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("split = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPlanSnap lays synthetic file maps over each other, including
// boundaries inside a block, which must never be skipped.
func TestPlanSnap(t *testing.T) {
	const B = BlockSize
	shared := func(off, n int64) mapping { return mapping{off: off, len: n, phys: 1 << 40, shareable: true} }
	for _, tc := range []struct {
		name          string
		child, parent []mapping
		size          int64
		want          []segment
	}{
		{"all holes", nil, nil, 4 * B, []segment{{0, 4 * B, segHoles, false, false}}},
		{
			"reflink clone", []mapping{shared(0, 4*B)}, []mapping{shared(0, 4*B)}, 4 * B,
			[]segment{{0, 4 * B, segShared, false, false}},
		},
		{
			"copied on write in the middle",
			[]mapping{shared(0, B), {off: B, len: 2 * B, phys: 7 << 40, shareable: true}, {off: 3 * B, len: B, phys: 1<<40 + 3*B, shareable: true}},
			[]mapping{shared(0, 4*B)}, 4 * B,
			[]segment{{0, B, segShared, false, false}, {B, 3 * B, segCompare, true, true}, {3 * B, 4 * B, segShared, false, false}},
		},
		{
			"same offset, different addresses",
			[]mapping{{off: 0, len: 2 * B, phys: 0, shareable: true}}, []mapping{{off: 0, len: 2 * B, phys: B, shareable: true}}, 2 * B,
			[]segment{{0, 2 * B, segCompare, true, true}},
		},
		{
			"unknown addresses are never shared",
			[]mapping{{off: 0, len: B}}, []mapping{{off: 0, len: B}}, B,
			[]segment{{0, B, segCompare, true, true}},
		},
		{
			"child data over parent hole, parent data under child hole",
			[]mapping{{off: 0, len: B}}, []mapping{{off: 2 * B, len: B}}, 4 * B,
			[]segment{{0, B, segCompare, true, false}, {B, 2 * B, segHoles, false, false}, {2 * B, 3 * B, segCompare, false, true}, {3 * B, 4 * B, segHoles, false, false}},
		},
		{
			"grown past the parent", []mapping{shared(0, B), {off: 2 * B, len: B}}, []mapping{shared(0, B)}, 4 * B,
			[]segment{{0, B, segShared, false, false}, {B, 2 * B, segHoles, false, false}, {2 * B, 3 * B, segCompare, true, false}, {3 * B, 4 * B, segHoles, false, false}},
		},
		{
			// 1 KiB file system blocks: the shared run ends mid-block, so
			// that block is compared, reading both files.
			"unaligned boundary", []mapping{shared(0, B+1024), {off: B + 1024, len: B - 1024}}, []mapping{shared(0, 2*B)}, 2 * B,
			[]segment{{0, B, segShared, false, false}, {B, 2 * B, segCompare, true, true}},
		},
		{
			// Two skip runs meeting inside a block: no whole block of
			// either, so it is compared.
			"skips meeting mid-block", []mapping{shared(0, 1024)}, []mapping{shared(0, 1024)}, 2 * B,
			[]segment{{0, B, segCompare, true, true}, {B, 2 * B, segHoles, false, false}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := snap(plan(tc.child, tc.parent, tc.size), tc.size)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("segments\n got %+v\nwant %+v", got, tc.want)
			}
			var end int64
			for _, s := range got {
				if s.off != end || s.off%BlockSize != 0 || s.end%BlockSize != 0 || s.end <= s.off {
					t.Errorf("segment %+v: not contiguous, aligned and non-empty", s)
				}
				end = s.end
			}
			if end != tc.size {
				t.Errorf("segments end at %d, want %d", end, tc.size)
			}
		})
	}
}

func TestForEach(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	seen := make([]atomic.Bool, 100)
	err := forEach(ctx, len(seen), 4, func(ctx context.Context, worker, i int) error {
		if worker < 0 || worker >= 4 {
			t.Errorf("worker %d outside [0, 4)", worker)
		}
		calls.Add(1)
		seen[i].Store(true)
		return nil
	})
	if err != nil || calls.Load() != 100 {
		t.Fatalf("forEach = %v after %d calls, want nil after 100", err, calls.Load())
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Errorf("index %d not called", i)
		}
	}

	boom := errors.New("boom")
	calls.Store(0)
	err = forEach(ctx, 1000, 3, func(ctx context.Context, worker, i int) error {
		calls.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() >= 1000 {
		t.Errorf("forEach = %v after %d calls, want boom and an early stop", err, calls.Load())
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := forEach(cancelled, 10, 2, func(context.Context, int, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("forEach with a cancelled context = %v, want context.Canceled", err)
	}
	if err := forEach(ctx, 0, 0, func(context.Context, int, int) error { return boom }); err != nil {
		t.Errorf("forEach over nothing = %v, want nil", err)
	}
}

// BenchmarkChunkName: naming a full chunk in a namespace (HMAC-SHA256) costs
// what the plain SHA-256 of format version 1 costs.
func BenchmarkChunkName(b *testing.B) {
	data := make([]byte, MaxChunk)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct{ name, ns string }{{"plain", ""}, {"namespaced", "tenant-a"}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(MaxChunk)
			for b.Loop() {
				ChunkName(tc.ns, data)
			}
		})
	}
}
