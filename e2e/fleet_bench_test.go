//go:build linux

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/pki"
)

// BenchmarkFleetRouting: what a control replica adds to a request. One
// node and one replica on a real PostgreSQL and bucket; the same calls go
// straight to the node (over the fleet's mutual TLS, as the replica
// reaches it) and through the replica, in the same run:
//
//	exec: `true` in a restored sandbox;
//	restore: a restore of a snapshot the node holds, to its first exec
//	(each is deleted again outside the timing).
func BenchmarkFleetRouting(b *testing.B) {
	need(b)
	ctx := context.Background()
	f := newFleet(b)
	snap := f.snapshots(map[string]string{api.AdminTenant: ""})[api.AdminTenant]
	// Without networking, as when the figures in docs/BENCHMARKS.md were
	// taken: a router per restore is not what the replica adds.
	nd := f.startNode("n1", "r1", "r1-a", "--no-network")
	ctl := f.startControl("c1")
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(f.certs, name))
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	m, err := pki.LoadMember(read("c1.pem"), read("c1.key"), read("ca.pem"))
	if err != nil {
		b.Fatal(err)
	}
	tlsc := &http.Client{Transport: &http.Transport{TLSClientConfig: m.ClientConfig(pki.Identity{Role: pki.Node, Name: "n1"})}}
	clients := map[string]*client.Client{
		"direct":  client.New(nd.url, ctl.key, client.WithHTTPClient(tlsc)),
		"control": client.New(ctl.url, ctl.key),
	}
	restore := func(c *client.Client) string {
		sbs, err := c.Restore(ctx, snap, api.RestoreRequest{})
		if err != nil {
			b.Fatal(err)
		}
		return sbs[0].ID
	}
	held := restore(clients["control"]) // the node now holds the snapshot
	b.Cleanup(func() { clients["control"].DeleteSandbox(context.Background(), held) })
	// Each iteration makes the call both ways, alternately first, so that
	// both see the same machine.
	// A call returns what undoes it, outside the timing, or nil.
	both := func(b *testing.B, call func(c *client.Client) func()) {
		ds := map[string][]time.Duration{}
		order := []string{"direct", "control"}
		for b.Loop() {
			for _, via := range order {
				start := time.Now()
				undo := call(clients[via])
				ds[via] = append(ds[via], time.Since(start))
				if undo != nil {
					b.StopTimer()
					undo()
					b.StartTimer()
				}
			}
			order[0], order[1] = order[1], order[0]
		}
		for _, via := range []string{"direct", "control"} {
			slices.Sort(ds[via])
			b.ReportMetric(float64(ds[via][len(ds[via])/2])/float64(time.Millisecond), via+"-p50-ms")
			b.ReportMetric(float64(ds[via][len(ds[via])*99/100])/float64(time.Millisecond), via+"-p99-ms")
		}
	}
	b.Run("exec", func(b *testing.B) {
		both(b, func(c *client.Client) func() {
			if res, err := c.Exec(ctx, held, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
			return nil
		})
	})
	b.Run("restore", func(b *testing.B) {
		both(b, func(c *client.Client) func() {
			id := restore(c)
			if res, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
			return func() {
				if err := c.DeleteSandbox(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
