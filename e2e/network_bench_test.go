//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// Run with (docs/BENCHMARKS.md records the figures):
//   sudo WARREN_TEST_TEMPLATE_CACHE=/var/cache/warren-test \
//     go test ./e2e -run '^$' -bench 'PortProxy' -benchtime 200x

// BenchmarkPortProxy compares reaching a sandbox's app through warren's
// exposed-port route (client → API server → the sandbox's router) with a
// direct connection from the host to the sandbox's node address (host →
// the sandbox's router): latency of a small GET and throughput of a 64 MiB
// download. The client keeps its connection alive; the proxy opens a new
// one to the sandbox for every request, so direct-new-conn is the direct
// path doing the same. The sandbox runs on a node whose
// bandwidth limit is far above what the machine moves, so neither path is
// shaped.
func BenchmarkPortProxy(b *testing.B) {
	need(b)
	ctx := context.Background()
	id := shared.newSandbox(b)
	snap, err := shared.client().Snapshot(ctx, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), snap.ID) })
	node := startNode(b, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"), "--net-mbps", "1000000")
	cl := node.client()
	sbs, err := cl.Restore(ctx, snap.ID, api.RestoreRequest{})
	if err != nil {
		b.Fatal(err)
	}
	sb := sbs[0].ID
	b.Cleanup(func() { cl.DeleteSandbox(context.Background(), sb) })
	if _, err := cl.StartProcess(ctx, sb, api.ExecRequest{Cmd: []string{"python3", "-c", appServer}}); err != nil {
		b.Fatal(err)
	}
	direct := "http://" + nodeAddress(b, sb) + ":8000"
	proxied := cl.PortURL(sb, 8000, "")
	proxied = proxied[:len(proxied)-1] // no trailing slash: paths follow
	wait.For(b, 10*time.Second, "the app serving", func() bool {
		resp, err := http.Get(direct + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	keep := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	fetch := func(b *testing.B, hc *http.Client, base, path string) int64 {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+node.key)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d, %v", base+path, resp.StatusCode, err)
		}
		return n
	}
	for _, p := range []struct {
		name, base string
		hc         *http.Client
	}{{"direct", direct, keep}, {"direct-new-conn", direct, fresh}, {"proxy", proxied, keep}} {
		b.Run("latency/"+p.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				fetch(b, p.hc, p.base, "/small")
				ds = append(ds, time.Since(t0))
			}
			reportPercentiles(b, ds)
		})
		b.Run("throughput/"+p.name, func(b *testing.B) {
			const size = 64 << 20
			b.SetBytes(size)
			for b.Loop() {
				if n := fetch(b, p.hc, p.base, fmt.Sprintf("/bytes/%d", size)); n != size {
					b.Fatalf("got %d bytes", n)
				}
			}
		})
	}
}
