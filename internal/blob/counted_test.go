package blob_test

import (
	"context"
	"errors"
	"testing"

	"warren/internal/blob"
	"warren/internal/blob/file"
)

// TestCounted counts what was stored and fetched, and nothing for a
// missing object.
func TestCounted(t *testing.T) {
	ctx := context.Background()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &blob.Counted{Store: fs}
	for _, k := range []string{"a", "b"} {
		if err := c.Put(ctx, k, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if stored, fetched := c.Bytes(); stored != 2000 || fetched != 1000 {
		t.Errorf("stored %d, fetched %d; want 2000, 1000", stored, fetched)
	}
}
