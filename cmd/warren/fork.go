package main

import (
	"context"
	"fmt"

	"warren/api"
)

func runFork(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("fork", "[flags] SANDBOX",
		"Start children of a running sandbox: its root disk is snapshotted (a\n"+
			"container's synced and cloned while it runs; a vm's or gvisor sandbox's cloned\n"+
			"while it is stopped and its memory saved), and each child starts from it with\n"+
			"a fresh identity; a vm's or gvisor sandbox's children start from its memory\n"+
			"too, its processes running on in each. Prints the children's IDs, one a line, once they all run; the\n"+
			"snapshot and the parent's pause go to stderr. A flag not given takes the\n"+
			"parent's value (resources, env, metadata, egress policy, time to live).\n"+
			"All or nothing.")
	var req api.ForkRequest
	fs.IntVar(&req.Count, "count", 1, "how many children to start")
	noProgress := fs.Bool("no-progress", false, noProgressUsage)
	sf := addSandboxFlags(fs, &req.SandboxSpec)
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if req.Count < 1 {
		return badUsage(fs, "-count must be at least 1")
	}
	if err := sf.fill(fs, &req.SandboxSpec); err != nil {
		return err
	}
	p := c.progress(*noProgress, "fork: children running", int64(req.Count), false)
	stop := countForked(ctx, cl, p, rest[0])
	res, err := cl.Fork(ctx, rest[0], req)
	stop()
	if err == nil {
		p.setDone(int64(len(res.Sandboxes)))
	}
	p.end(err == nil, "")
	if err != nil {
		return err
	}
	if err := printIDs(c.stdout, res.Sandboxes); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "forked %s from snapshot %s (paused %.1f ms)\n", rest[0], res.Snapshot.ID, res.PausedMs)
	return nil
}
