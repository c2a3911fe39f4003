package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"warren/internal/archive/archivetest"
)

// sparseImageArchive writes a docker save tarball of an image whose one
// layer holds a sparse file that expands to size bytes, and returns its
// path: a few KiB on the wire.
func sparseImageArchive(t testing.TB, size int64) string {
	t.Helper()
	bomb := archivetest.SparseTar(size)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(bomb)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference("e2e/sparse:1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sparse.tar")
	if err := tarball.WriteToFile(path, r, img); err != nil {
		t.Fatal(err)
	}
	return path
}

// usedBytes is what the filesystem holding dir has in use.
func usedBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// importSparse sends the archive at path as a new tenant's template and
// returns the error the import ended with.
func importSparse(t testing.TB, path string) error {
	t.Helper()
	c, _ := newTenant(t, "sparse")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = c.CreateTemplateFromArchive(context.Background(), "sparse", f, io.Discard)
	return err
}

// TestImportSparseLayer replays issue 35, row 6: an image archive of a few
// KiB whose layer held a sparse file wrote 1.1 GB on the node's disk
// during its import. It is refused now, naming the sparse file, and the
// node's disk does not take its size.
func TestImportSparseLayer(t *testing.T) {
	need(t)
	path := sparseImageArchive(t, 2<<30)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before := usedBytes(t, shared.dataDir)
	err = importSparse(t, path)
	grew := usedBytes(t, shared.dataDir) - before
	t.Logf("import of a %d-byte archive: %v; the node's disk grew by %d MiB", st.Size(), err, grew>>20)
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("import of a %d-byte archive expanding to 2 GiB: %v, want a refusal naming the sparse file", st.Size(), err)
	}
	// Other tests may write beside this one; 2 GiB is far above them.
	if grew > 1<<30 {
		t.Errorf("the node's disk took %d MiB more during the import", grew>>20)
	}
}

// BenchmarkImportSparseLayer is issue 35, row 6's figure: the daemon's
// peak RSS and the node's disk use around the import of a sparse-layer
// archive that expands to 2 GiB (refused).
func BenchmarkImportSparseLayer(b *testing.B) {
	need(b)
	path := sparseImageArchive(b, 2<<30)
	for b.Loop() {
		// Timed whole: the figures are the metrics, not the time.
		node := startNode(b, nil)
		rss, disk := node.rss(b), usedBytes(b, node.dataDir)
		c := node.client()
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		_, err = c.CreateTemplateFromArchive(context.Background(), "sparse", f, io.Discard)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), "sparse") {
			b.Fatalf("import: %v, want a refusal naming the sparse file", err)
		}
		b.ReportMetric(float64(node.hwm(b)-rss)/(1<<20), "rss-growth-MiB")
		b.ReportMetric(float64(usedBytes(b, node.dataDir)-disk)/(1<<20), "disk-growth-MiB")
	}
}
