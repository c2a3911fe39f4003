package tenanttpl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/archive"
	"warren/internal/archive/archivetest"
)

// TestExtractContextSparse is the regression test of issue 35, row 3: a
// build context of a few KiB holding a PAX sparse file was expanded onto
// the node's disk pool (512 MiB of real blocks). Now it is refused before
// a byte of it is written.
func TestExtractContextSparse(t *testing.T) {
	dir := t.TempDir()
	err := extractContext(archivetest.SparseTar(64<<20), dir)
	if !errors.Is(err, archive.ErrSparse) {
		t.Errorf("a sparse context: %v, want ErrSparse", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "big")); err == nil {
		t.Errorf("the sparse file was extracted: %d bytes", fi.Size())
	}
}

// TestBuildersFair is the regression test of issue 35, row 11: build
// slots were node-wide and first come, first served (a refusal when
// none was free), so two tenants' long builds kept every other tenant
// out. Now a build waits for a slot, and a free slot goes to the waiting
// tenant with the fewest builds running: another tenant's build before a
// second of a tenant that has one.
func TestBuildersFair(t *testing.T) {
	var b builders
	ctx := context.Background()
	take := func(tenant string) func() {
		t.Helper()
		tk, err := b.enqueue(tenant)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := tk.wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	a1, _ := take("a"), take("a")
	b1, _ := take("b"), take("b")
	// The node is full: a's third and c's first wait, a's first in line.
	ta, err := b.enqueue("a")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := b.enqueue("c")
	if err != nil {
		t.Fatal(err)
	}
	a1()
	rel, err := tc.wait(ctx)
	if err != nil {
		t.Fatalf("c's build after a slot freed: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := ta.wait(short); err == nil || !strings.Contains(err.Error(), "build slot") {
		t.Errorf("a's third build got a slot while c's waited, or a vague error: %v", err)
	}
	// a gave up its place: the next free slot is nobody's in particular.
	b1()
	rel2 := take("d")
	rel()
	rel2()
	if got := b.running(); got != 2 {
		t.Errorf("%d builds counted running, want 2 (a's and b's second)", got)
	}
}

// TestBuildersQueueBounded: what waits is bounded too, per tenant and on
// the node, with 429s that say so.
func TestBuildersQueueBounded(t *testing.T) {
	var b builders
	for range maxBuilds + maxBuildsWaitingPerTenant {
		if _, err := b.enqueue("a"); err != nil {
			if api.IsCode(err, api.CodeTooMany) {
				break
			}
			t.Fatal(err)
		}
	}
	if _, err := b.enqueue("a"); !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "waiting") {
		t.Errorf("a tenant's build past its waiting most: %v", err)
	}
}

// TestBuildTimeBound: a build that runs out of its time fails with an
// error saying so, its bound and how to change it.
func TestBuildTimeBound(t *testing.T) {
	build := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	err := runBounded(context.Background(), 20*time.Millisecond, build)
	if err == nil || !strings.Contains(err.Error(), "ran out of its time, 20ms") || !strings.Contains(err.Error(), "limits.timeout_seconds") {
		t.Errorf("a build past its bound: %v", err)
	}
	if err := runBounded(context.Background(), time.Minute, func(context.Context) error { return nil }); err != nil {
		t.Errorf("a build within its bound: %v", err)
	}
}
