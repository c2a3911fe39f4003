//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"warren/api"
	"warren/client"
)

// hwm is the daemon's peak resident memory so far (VmHWM).
func (d *daemon) hwm(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// BenchmarkDaemonMemoryLargeListing measures a fresh daemon's peak
// resident memory while 4 clients at once list a directory of 99,000
// files in the sandbox, every page of it at the largest page size (issue
// 14, item 10: one such listing, answered whole, cost 185 MB). Reported:
// MiB before, peak MiB during, and their ratio.
func BenchmarkDaemonMemoryLargeListing(b *testing.B) {
	need(b)
	ctx := context.Background()
	id := shared.newSandbox(b)
	shared.sh(b, id, `mkdir /root/big && cd /root/big && seq -f 'file-with-a-longish-name-%06g' 1 99000 | xargs touch`)
	snap := shared.snapshot(b, id)
	b.Cleanup(func() { shared.client().DeleteSnapshot(context.Background(), snap) })
	for b.Loop() {
		b.StopTimer()
		node := startNode(b, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"))
		sbs, err := node.client().Restore(ctx, snap, api.RestoreRequest{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { node.client().DeleteSandbox(context.Background(), sbs[0].ID) })
		b.StartTimer()
		before := node.rss(b)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				n, token := 0, ""
				for {
					p, err := node.client().FilesPage(ctx, sbs[0].ID, "/root/big", 1, client.ListOptions{Limit: api.MaxFileListLimit, PageToken: token})
					if err != nil {
						b.Error(err)
						return
					}
					n += len(p.Entries)
					if token = p.NextPageToken; token == "" {
						break
					}
				}
				if n != 99000 {
					b.Errorf("listed %d entries, want 99000", n)
				}
			})
		}
		wg.Wait()
		report(b, before, node.hwm(b))
	}
}
