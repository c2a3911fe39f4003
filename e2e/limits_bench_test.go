//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// BenchmarkDaemonMemoryUnderAttack measures a daemon's resident memory
// under the two attacks of issue 13, items 2 and 3, against the RSS the
// same daemon had just before (ratios, since the machine is shared). Each
// iteration starts a fresh daemon (a node sharing the suite's blob store,
// its sandbox restored from a snapshot), so that no iteration inherits
// another's heap:
//   - output: 4 non-streaming execs at once, each printing 16 MiB of NUL on
//     both streams (before the fix, one took the daemon from 51 to 765 MB);
//   - idle: 1,000 connections opened and left idle, without a key.
//
// Reported: MiB before, MiB after, and after/before.
func BenchmarkDaemonMemoryUnderAttack(b *testing.B) {
	need(b)
	ctx := context.Background()
	id := shared.newSandbox(b)
	snap := shared.snapshot(b, id)
	b.Cleanup(func() { deleteSnapshotsOf(b, id) })
	fresh := func(b *testing.B) (*daemon, string) {
		node := startNode(b, nil, "--blob-store", filepath.Join(shared.dataDir, "blobs"))
		sbs, err := node.client().Restore(ctx, snap, api.RestoreRequest{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { node.client().DeleteSandbox(context.Background(), sbs[0].ID) })
		return node, sbs[0].ID
	}
	b.Run("output", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node, sb := fresh(b)
			b.StartTimer()
			before := node.rss(b)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if _, err := node.client().Exec(ctx, sb, api.ExecRequest{Cmd: []string{"python3", "-c", nulBomb}}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			report(b, before, node.rss(b))
		}
	})
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node, _ := fresh(b)
			b.StartTimer()
			u, _ := url.Parse(node.url)
			fds := func() int {
				entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", node.cmd.Process.Pid))
				return len(entries)
			}
			before, open := node.rss(b), fds()
			var conns []net.Conn
			for range 1000 {
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
			}
			wait.For(b, 10*time.Second, "the daemon to accept the connections", func() bool { return fds() >= open+len(conns) })
			after := node.rss(b)
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

// BenchmarkAgentMemoryUnderAttack is a sandbox agent's RSS idle and at its
// peak with 40 streaming `yes` whose readers stopped reading (issue 13,
// item 7: it reached 498 MB and was OOM-killed): the agent's output
// buffers are bounded in total.
func BenchmarkAgentMemoryUnderAttack(b *testing.B) {
	need(b)
	for b.Loop() {
		b.StopTimer()
		sb, err := shared.client().CreateSandbox(context.Background(), api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 512, CPUs: 1}})
		if err != nil {
			b.Fatal(err)
		}
		agent := initPid(b, sb.ID)
		b.StartTimer()
		before := rssOf(b, agent)
		report(b, before, stalledStreamsPeak(b, sb.ID, agent, 40))
		b.StopTimer()
		shared.client().DeleteSandbox(context.Background(), sb.ID)
		b.StartTimer()
	}
}
