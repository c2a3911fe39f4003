package main

import (
	"context"
	"encoding/json"

	"warren/api"
)

// quotaCommands are the subcommands of `warren quota`.
var quotaCommands = []command{
	{"get", "print a tenant's quota in the fleet as JSON (admin)", runQuotaGet},
	{"set", "set a tenant's quota in the fleet (admin)", runQuotaSet},
}

func runQuota(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "quota", quotaCommands, args)
}

func runQuotaGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("quota get", "TENANT", "Print TENANT's quota in the fleet as JSON: 0 bounds nothing (needs the admin key).")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	q, err := cl.Quota(ctx, rest[0])
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(q)
}

func runQuotaSet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("quota set", "TENANT [flags]",
		"Set TENANT's quota in the fleet, whole: what it may hold at once across every\nnode. A flag not given is 0, no bound (needs the admin key). A create,\nrestore or snapshot beyond it is refused (429), naming the quota.")
	var q struct {
		sandboxes, snapshots, perMinute int
		cpus                            float64
		memory, disk, snapshotBytes     int64
	}
	fs.IntVar(&q.sandboxes, "sandboxes", 0, "live sandboxes")
	fs.Float64Var(&q.cpus, "cpus", 0, "vCPUs of its live sandboxes")
	fs.Int64Var(&q.memory, "memory", 0, "memory of its live sandboxes, in `MB`")
	fs.Int64Var(&q.disk, "disk", 0, "disk of its live sandboxes, in `MB`")
	fs.IntVar(&q.snapshots, "snapshots", 0, "snapshots")
	fs.Int64Var(&q.snapshotBytes, "snapshot-bytes", 0, "bytes its snapshots added to the blob store")
	fs.IntVar(&q.perMinute, "creates-per-minute", 0, "sandboxes it starts in any 60 seconds")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return cl.SetQuota(ctx, rest[0], api.Quota{Sandboxes: q.sandboxes, CPUs: q.cpus, MemoryMB: q.memory, DiskMB: q.disk,
		Snapshots: q.snapshots, SnapshotBytes: q.snapshotBytes, CreatesPerMinute: q.perMinute})
}
