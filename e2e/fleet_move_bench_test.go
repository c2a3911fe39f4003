//go:build linux

package e2e

import (
	"context"
	"testing"
	"time"

	"warren/api"
)

// BenchmarkFleetFailover measures node failure to restored: a sandbox with
// a checkpoint policy, its node killed -9, until it runs on the other node
// of a fleet of two (failover-ms), against a plain restore of the same
// checkpoint on that node, in the same run (restore-ms). The difference is
// the fleet's detection: the fence after --fence-after (2 s here) and the
// placement, polled every second by the replica and by the node.
//
//	go test ./e2e -run '^$' -bench FleetFailover -benchtime 3x
func BenchmarkFleetFailover(b *testing.B) {
	need(b)
	ctx := context.Background()
	f := newFleet(b)
	snaps := f.snapshots(map[string]string{api.AdminTenant: ""})
	clusters := map[string]string{"m1": "r1-a", "m2": "r1-b"}
	for id, cluster := range clusters {
		f.startNode(id, "r1", cluster)
	}
	admin := f.startControl("c1").client()
	var failover, restore time.Duration
	for range b.N {
		sbs, err := admin.Restore(ctx, snaps[api.AdminTenant], api.RestoreRequest{SandboxSpec: api.SandboxSpec{CheckpointEverySeconds: 5}})
		if err != nil {
			b.Fatal(err)
		}
		id := sbs[0].ID
		home := f.node(id)
		other := map[string]string{"m1": "m2", "m2": "m1"}[home]
		cp := waitSandbox(b, admin, id, 30*time.Second, "a checkpoint", func(sb *api.Sandbox) bool { return sb.Checkpoint != nil }).Checkpoint

		killed := time.Now()
		f.nodes[home].kill()
		waitSandbox(b, admin, id, time.Minute, "the sandbox to run on "+other, func(sb *api.Sandbox) bool {
			return sb.State == api.StateRunning && f.node(id) == other
		})
		failover += time.Since(killed)

		t0 := time.Now()
		plain, err := admin.Restore(ctx, cp.Snapshot, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Region: "r1"}})
		if err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
		for _, sb := range []string{id, plain[0].ID} {
			if err := admin.DeleteSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
		}
		f.startNode(home, "r1", clusters[home])
	}
	b.ReportMetric(float64(failover.Milliseconds())/float64(b.N), "failover-ms/op")
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms/op")
	b.ReportMetric(float64(failover)/float64(restore), "failover/restore")
}
