// Package blobtest is the test suite every blob.Store backend must pass,
// so that the snapshot engine can rely on the contract written on
// blob.Store rather than on one backend's habits. Each backend's tests call
// Run with a function that opens a fresh, empty store. It is test support
// only: nothing outside _test.go files should import it.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/internal/blob"
)

// Run runs the suite as subtests of t. open must return a new, empty
// store, with no keys shared with any store it returned before; Run closes
// the store when the subtest ends. The subtests do not run in parallel
// with each other, so open may rely on t.Setenv.
func Run(t *testing.T, open func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"NotADirectory", testNotADirectory},
		{"List", testList},
		{"InvalidKeys", testInvalidKeys},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"ConcurrentKeys", testConcurrentKeys},
		{"CancelledPut", testCancelledPut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			if s.String() == "" {
				t.Errorf("String() is empty")
			}
			tt.fn(t, s)
		})
	}
}

// payload returns n bytes that differ from any other seed's.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t *testing.T, s blob.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

// wantObject checks that Get and Stat of key agree with want.
func wantObject(t *testing.T, s blob.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %s, want %d bytes %s", key, len(got), head(got), len(want), head(want))
	}
	info, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	if info.Key != key || info.Size != int64(len(want)) {
		t.Fatalf("Stat(%q) = key %q size %d, want key %q size %d", key, info.Key, info.Size, key, len(want))
	}
}

func head(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x…", b[:16])
	}
	return fmt.Sprintf("%x", b)
}

func wantNotFound(t *testing.T, s blob.Store, key string) {
	t.Helper()
	if got, err := s.Get(t.Context(), key); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Get(%q) = %d bytes, %v; want ErrNotFound", key, len(got), err)
	}
	if info, err := s.Stat(t.Context(), key); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat(%q) = %+v, %v; want ErrNotFound", key, info, err)
	}
}

func testRoundTrip(t *testing.T, s blob.Store) {
	binary := make([]byte, 256*4)
	for i := range binary {
		binary[i] = byte(i)
	}
	for _, tt := range []struct {
		key  string
		data []byte
	}{
		{"empty", []byte{}},
		{"small.txt", []byte("hello, warren\n")},
		{"binary.bin", binary},
		{"big/4mib", payload(1, 4<<20)},
		{"deep/a/b/c/d/e.f-g_h", []byte("nested")},
	} {
		mustPut(t, s, tt.key, tt.data)
		wantObject(t, s, tt.key, tt.data)
	}
	// The same bytes again is not an error.
	mustPut(t, s, "small.txt", []byte("hello, warren\n"))
	wantObject(t, s, "small.txt", []byte("hello, warren\n"))
}

func testOverwrite(t *testing.T, s blob.Store) {
	mustPut(t, s, "obj", payload(1, 1000))
	mustPut(t, s, "obj", payload(2, 10))
	wantObject(t, s, "obj", payload(2, 10))
	mustPut(t, s, "obj", payload(3, 100_000))
	wantObject(t, s, "obj", payload(3, 100_000))
	mustPut(t, s, "obj", nil)
	wantObject(t, s, "obj", nil)
}

func testMissing(t *testing.T, s blob.Store) {
	ctx := t.Context()
	wantNotFound(t, s, "never/put")
	if err := s.Delete(ctx, "never/put"); err != nil {
		t.Errorf("Delete of a missing key = %v, want nil", err)
	}
	mustPut(t, s, "gone/obj", []byte("x"))
	mustPut(t, s, "kept", []byte("y"))
	for range 2 {
		if err := s.Delete(ctx, "gone/obj"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	wantNotFound(t, s, "gone/obj")
	wantObject(t, s, "kept", []byte("y"))
	// A key can come back after it was deleted.
	mustPut(t, s, "gone/obj", []byte("z"))
	wantObject(t, s, "gone/obj", []byte("z"))
}

// testNotADirectory checks that a key's "directory" is not an object.
func testNotADirectory(t *testing.T, s blob.Store) {
	mustPut(t, s, "dir/obj", []byte("x"))
	wantNotFound(t, s, "dir")
	wantNotFound(t, s, "dir/obj/below")
	if err := s.Delete(t.Context(), "dir"); err != nil {
		t.Errorf("Delete(%q) = %v, want nil", "dir", err)
	}
	wantObject(t, s, "dir/obj", []byte("x"))
}

func testList(t *testing.T, s blob.Store) {
	ctx := t.Context()
	start := time.Now()
	keys := []string{"list/a", "list/b/c", "list/b/d/e", "list.x", "lis", "list-y", "other/z", "list/b.c"}
	for i, k := range keys {
		mustPut(t, s, k, payload(uint64(i), i*100))
	}
	size := func(k string) int64 { return int64(slices.Index(keys, k) * 100) }
	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"lis", "list-y", "list.x", "list/a", "list/b.c", "list/b/c", "list/b/d/e", "other/z"}},
		{"list/", []string{"list/a", "list/b.c", "list/b/c", "list/b/d/e"}},
		{"list", []string{"list-y", "list.x", "list/a", "list/b.c", "list/b/c", "list/b/d/e"}},
		{"list/b", []string{"list/b.c", "list/b/c", "list/b/d/e"}},
		{"list/b/", []string{"list/b/c", "list/b/d/e"}},
		{"list/b/d/e", []string{"list/b/d/e"}},
		{"other/", []string{"other/z"}},
		{"nomatch/", nil},
		{"list/a/", nil},
		{"z", nil},
	} {
		infos, err := s.List(ctx, tt.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tt.prefix, err)
		}
		var got []string
		for _, info := range infos {
			got = append(got, info.Key)
			if info.Size != size(info.Key) {
				t.Errorf("List(%q): %s has size %d, want %d", tt.prefix, info.Key, info.Size, size(info.Key))
			}
			// Some servers keep whole seconds; allow for that and a
			// little clock skew.
			if info.ModTime.Before(start.Add(-time.Minute)) || info.ModTime.After(time.Now().Add(time.Minute)) {
				t.Errorf("List(%q): %s has ModTime %v, want about %v", tt.prefix, info.Key, info.ModTime, start)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
	if err := s.Delete(ctx, "list/b/c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	infos, err := s.List(ctx, "list/b/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 || infos[0].Key != "list/b/d/e" {
		t.Errorf("List(%q) after Delete = %+v, want only list/b/d/e", "list/b/", infos)
	}
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := t.Context()
	bad := []string{"", "/a", "a/", "a//b", "A", "a b", ".", "..", "a/../b", "./a", "a\x00b", "ü",
		strings.Repeat("k", blob.MaxKeyLen+1)}
	for _, key := range bad {
		if err := s.Put(ctx, key, []byte("x")); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Stat(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	for _, prefix := range []string{"/", "/a", "a//", "A", "../", "a/./"} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("List(%q) = %v, want ErrInvalidKey", prefix, err)
		}
	}
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 0 {
		t.Errorf("after refused Puts, List = %+v, want nothing", infos)
	}
}

func testConcurrentSameKey(t *testing.T, s blob.Store) {
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			errs[i] = s.Put(t.Context(), "same", payload(uint64(100+i), 256<<10+i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	got, err := s.Get(t.Context(), "same")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// The size names the writer; the bytes must be all of its object.
	i := len(got) - 256<<10
	if i < 0 || i >= writers || !bytes.Equal(got, payload(uint64(100+i), 256<<10+i)) {
		t.Fatalf("after %d concurrent Puts, Get = %d bytes %s, not any one whole object", writers, len(got), head(got))
	}
}

func testConcurrentKeys(t *testing.T, s blob.Store) {
	const workers = 16
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("conc/%02d/obj", i)
			for round := range 3 {
				want := payload(uint64(i*10+round), 10_000+i)
				if err := s.Put(t.Context(), key, want); err != nil {
					errs[i] = err
					return
				}
				got, err := s.Get(t.Context(), key)
				if err != nil {
					errs[i] = err
					return
				}
				if !bytes.Equal(got, want) {
					errs[i] = fmt.Errorf("%s round %d: Get = %d bytes, want the %d just put", key, round, len(got), len(want))
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	infos, err := s.List(t.Context(), "conc/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != workers {
		t.Errorf("List(conc/) has %d objects, want %d", len(infos), workers)
	}
}

func testCancelledPut(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, data := range [][]byte{[]byte("small"), payload(7, 4<<20)} {
		if err := s.Put(ctx, "cancelled", data); err == nil {
			t.Fatalf("Put with a cancelled context of %d bytes succeeded", len(data))
		}
		wantNotFound(t, s, "cancelled")
	}
	// A cancelled Put leaves an older object as it was.
	mustPut(t, s, "cancelled", []byte("old"))
	if err := s.Put(ctx, "cancelled", []byte("new")); err == nil {
		t.Fatal("Put with a cancelled context succeeded")
	}
	wantObject(t, s, "cancelled", []byte("old"))
	infos, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 {
		t.Errorf("List = %+v, want only the old object", infos)
	}
}
