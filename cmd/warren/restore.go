package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"warren/api"
)

func runRestore(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("restore", "[flags] SNAPSHOT",
		"Start sandboxes from a snapshot (its ID or its name), each with its disk\n"+
			"and a fresh identity, and print their IDs, one a line, once they all run.\n"+
			"All or nothing: if one cannot start, none is left running. A workspace\n"+
			"snapshot gives the sandboxes its /workspace on a fresh root disk from its\n"+
			"template.")
	var req api.RestoreRequest
	fs.IntVar(&req.Count, "count", 1, "how many sandboxes to start")
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
	snap := rest[0]
	if !strings.HasPrefix(snap, api.SnapshotIDPrefix) {
		// A name: the events the progress counts carry the snapshot's ID.
		sn, err := cl.GetSnapshot(ctx, snap)
		if err != nil {
			return err
		}
		snap = sn.ID
	}
	p := c.progress(*noProgress, "restore: sandboxes running", int64(req.Count), false)
	stop := countStarted(ctx, cl, p, snap)
	sbs, err := cl.Restore(ctx, snap, req)
	stop()
	if err == nil {
		p.setDone(int64(len(sbs)))
	}
	p.end(err == nil, "")
	if err != nil {
		return err
	}
	return printIDs(c.stdout, sbs)
}

// printIDs prints the sandboxes' IDs, one a line.
func printIDs(w io.Writer, sbs []api.Sandbox) error {
	for _, sb := range sbs {
		if _, err := fmt.Fprintln(w, sb.ID); err != nil {
			return err
		}
	}
	return nil
}

func runGC(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("gc", "[flags]",
		"Collect the snapshot layers and chunks no snapshot needs (admin key only),\nand print what was freed as JSON.")
	grace := fs.Duration("grace", -1, "spare objects younger than this, for uploads of other nodes sharing the\nblob store (default: the server's, 1h); 0 when no other node writes to it")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	var req api.GCRequest
	if *grace >= 0 {
		secs := int64(*grace / time.Second)
		req.GraceSeconds = &secs
	}
	res, err := cl.GC(ctx, req)
	if err != nil {
		return err
	}
	return printJSON(c.stdout, res)
}
