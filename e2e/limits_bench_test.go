//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"warren/api"
)

// BenchmarkDaemonMemoryUnderAttack measures the daemon's resident memory
// under the two attacks of issue 13, items 2 and 3, each against the RSS
// the same daemon had just before (ratios, since the machine is shared):
//   - output: 4 non-streaming execs at once, each printing 16 MiB of NUL on
//     both streams (before the fix, one took the daemon from 51 to 765 MB);
//   - idle: 1,000 connections opened and left idle, without a key.
//
// Reported: MiB before, MiB after, and after/before.
func BenchmarkDaemonMemoryUnderAttack(b *testing.B) {
	need(b)
	id := shared.newSandbox(b)
	cl := shared.client()
	ctx := context.Background()
	u, _ := url.Parse(shared.url)
	b.Run("output", func(b *testing.B) {
		for b.Loop() {
			before := shared.rss(b)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if _, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", nulBomb}}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			after := shared.rss(b)
			report(b, before, after)
		}
	})
	b.Run("idle", func(b *testing.B) {
		fds := func() int {
			entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", shared.cmd.Process.Pid))
			return len(entries)
		}
		for b.Loop() {
			before, open := shared.rss(b), fds()
			var conns []net.Conn
			for range 1000 {
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
			}
			eventually(b, 10*time.Second, "the daemon to accept the connections", func() bool { return fds() >= open+len(conns) })
			after := shared.rss(b)
			for _, c := range conns {
				c.Close()
			}
			report(b, before, after)
		}
	})
}

func report(b *testing.B, before, after int64) {
	b.ReportMetric(float64(before)/(1<<20), "MiB-before")
	b.ReportMetric(float64(after)/(1<<20), "MiB-after")
	b.ReportMetric(float64(after)/float64(before), "after/before")
}
