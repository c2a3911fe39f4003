package node

import (
	"context"
	"testing"
	"time"

	"warren/internal/listing"
)

// running counts sandboxes by tenant.
type running map[string]int

func (r running) Running(tenant string) int {
	if tenant != listing.AnyTenant {
		return r[tenant]
	}
	n := 0
	for _, c := range r {
		n += c
	}
	return n
}

// blobs names a blob store and records no base.
type blobs string

func (b blobs) BlobStore() string { return string(b) }
func (b blobs) EnsureBase(ctx context.Context, template, path string, builtAt time.Time) (string, error) {
	return "", nil
}

// TestInfoShowsATenantOnlyItsOwn: a tenant sees its own sandboxes' count
// and not where snapshots are stored; an admin sees every tenant's and the
// blob store.
func TestInfoShowsATenantOnlyItsOwn(t *testing.T) {
	n := New(Deps{Version: "v1", CloneMode: "reflink", CgroupVersion: 1,
		Bases: blobs("s3://bucket/prefix"), Sandboxes: running{"a": 2, "b": 3}})
	ctx := context.Background()
	a := n.Info(ctx, "a", false)
	if a.Sandboxes != 2 || a.BlobStore != "" || a.Version != "v1" || a.CloneMode != "reflink" || a.Kernel == "" {
		t.Errorf("tenant a's info = %+v, want 2 sandboxes, no blob store", a)
	}
	admin := n.Info(ctx, "admin", true)
	if admin.Sandboxes != 5 || admin.BlobStore != "s3://bucket/prefix" {
		t.Errorf("admin's info = %+v, want 5 sandboxes and the blob store", admin)
	}
}
