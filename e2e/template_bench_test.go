//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"warren/api"
	"warren/client"
)

// BenchmarkTemplateBuild builds the data-science example (sciSpec) in a
// tenant of its own, cold (no step cached; the host's apt lists may be),
// then again with every step cached, then with only its last step
// changed; it reports each time and the ratios to the cold build. It also
// reports what the versions stored: the first version's layers, and what
// a second template sharing its steps but the last added, against the
// same template built alone by another tenant (no chunk shared across
// tenants).
func BenchmarkTemplateBuild(b *testing.B) {
	need(b)
	servePipPackage(b)
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app", "hello.txt"), []byte("hi\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	build := func(c *client.Client, name, last string) (time.Duration, *api.Template) {
		b.Helper()
		spec := filepath.Join(dir, "warren.yaml")
		if err := os.WriteFile(spec, []byte(sciSpec(last)), 0o644); err != nil {
			b.Fatal(err)
		}
		req, err := specRequestOf(name, spec)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		t, err := c.CreateTemplate(ctx, req, nil)
		if err != nil {
			b.Fatalf("build %s: %v", name, err)
		}
		return time.Since(t0), t
	}
	var cold, cached, last time.Duration
	var shared, alone int64
	for range b.N {
		c, _ := newTenant(b, "tpl-bench")
		var first *api.Template
		cold, first = build(c, "sci", "echo built > /opt/app/built.txt")
		cached, _ = build(c, "sci", "echo built > /opt/app/built.txt")
		last, _ = build(c, "sci", "echo rebuilt > /opt/app/built.txt")
		_, second := build(c, "sci2", "echo other > /opt/app/built.txt")
		lone, _ := newTenant(b, "tpl-bench-alone")
		_, alone2 := build(lone, "sci2", "echo other > /opt/app/built.txt")
		shared = storedBytes(b, c, first) + storedBytes(b, c, second) - commonStored(b, c, first, second)
		alone = storedBytes(b, c, first) + storedBytes(b, lone, alone2)
	}
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(cached.Seconds(), "cached-s")
	b.ReportMetric(last.Seconds(), "last-step-s")
	b.ReportMetric(cached.Seconds()/cold.Seconds(), "cached/cold")
	b.ReportMetric(last.Seconds()/cold.Seconds(), "last-step/cold")
	b.ReportMetric(float64(shared)/(1<<20), "two-sharing-MiB")
	b.ReportMetric(float64(alone)/(1<<20), "two-alone-MiB")
}

// storedBytes is what the snapshots of t's lineage (its own and its
// ancestors', the built-in template's base layer left out) added to the
// blob store.
func storedBytes(b *testing.B, c *client.Client, t *api.Template) int64 {
	b.Helper()
	var n int64
	for _, id := range lineageOf(b, c, t.Snapshot) {
		sn, err := c.GetSnapshot(context.Background(), id)
		if err != nil {
			b.Fatal(err)
		}
		n += sn.StoredBytes
	}
	return n
}

// commonStored is the stored bytes of the snapshots t and u share.
func commonStored(b *testing.B, c *client.Client, t, u *api.Template) int64 {
	b.Helper()
	in := map[string]bool{}
	for _, id := range lineageOf(b, c, t.Snapshot) {
		in[id] = true
	}
	var n int64
	for _, id := range lineageOf(b, c, u.Snapshot) {
		if in[id] {
			sn, err := c.GetSnapshot(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			n += sn.StoredBytes
		}
	}
	return n
}

// lineageOf is id and its ancestors that are the tenant's (sn-…).
func lineageOf(b *testing.B, c *client.Client, id string) []string {
	b.Helper()
	anc, err := c.Lineage(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	out := []string{id}
	for _, a := range anc {
		if strings.HasPrefix(a, "sn-") {
			out = append(out, a)
		}
	}
	return out
}

// BenchmarkTemplateImport pushes images of one layer of random bytes (16,
// 64 and 256 MiB: nothing to compress) to a registry on loopback and
// imports each as a template; it reports each import's time and its
// throughput against the image's size.
func BenchmarkTemplateImport(b *testing.B) {
	need(b)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		b.Skipf("needs Debian's busybox-static: %v", err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	b.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	c, _ := newTenant(b, "tpl-import")
	ctx := context.Background()
	for _, mib := range []int{16, 64, 256} {
		ref := fmt.Sprintf("%s/bench/random:%d", host, mib)
		blob := make([]byte, mib<<20)
		rand.Read(blob)
		img := busyboxImage(b, bb)
		img, err := mutate.AppendLayers(img, static.NewLayer(tarOf(b, "data.bin", blob), types.OCIUncompressedLayer))
		if err != nil {
			b.Fatal(err)
		}
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			b.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			b.Fatal(err)
		}
		var took time.Duration
		for i := range b.N {
			t0 := time.Now()
			if _, err := c.CreateTemplate(ctx, api.CreateTemplateRequest{Name: fmt.Sprintf("random%d-%d", mib, i),
				FromImage: &api.ImageSource{Ref: ref, Insecure: true}}, nil); err != nil {
				b.Fatal(err)
			}
			took = time.Since(t0)
		}
		b.ReportMetric(took.Seconds(), fmt.Sprintf("import-%dMiB-s", mib))
		b.ReportMetric(float64(mib)/took.Seconds(), fmt.Sprintf("import-%dMiB-MiB/s", mib))
	}
}
