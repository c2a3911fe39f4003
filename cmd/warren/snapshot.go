package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"warren/api"
)

// snapshotCommands are the subcommands of `warren snapshot`; any other
// first argument is a sandbox to snapshot.
var snapshotCommands = []command{
	{"ls", "list snapshots, as a tree of parents and children", runSnapshotList},
	{"get", "print a snapshot as JSON", runSnapshotGet},
	{"lineage", "print a snapshot's ancestors, nearest first", runSnapshotLineage},
	{"rm", "delete snapshots", runSnapshotRemove},
}

func runSnapshot(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 && lookup(snapshotCommands, args[0]) != nil {
		return runGroup(ctx, c, "snapshot", snapshotCommands, args)
	}
	fs := c.newFlags("snapshot", "[flags] SANDBOX | ls | get | lineage | rm",
		"Snapshot the sandbox's disk and print the snapshot's ID, alone, on stdout.\n"+
			"It answers as soon as the disk is cloned (the snapshot is pending);\n"+
			"--wait answers once it is durable in the blob store. With --name, the\n"+
			"name stands for the snapshot wherever its ID does (SNAPSHOT below, and\n"+
			"warren restore), until the snapshot is deleted.\n\n"+
			"  warren snapshot ls [SANDBOX]   list snapshots as a tree\n"+
			"  warren snapshot get SNAPSHOT   print one as JSON\n"+
			"  warren snapshot lineage SNAPSHOT  print its ancestors, nearest first\n"+
			"  warren snapshot rm SNAPSHOT... delete snapshots")
	var req api.CreateSnapshotRequest
	fs.StringVar(&req.Name, "name", "", "name the snapshot: 1 to 63 letters, digits, '.', '_' and '-', starting with\na letter or a digit (not \""+api.SnapshotIDPrefix+"\"); unique among your snapshots")
	fs.StringVar(&req.Scope, "scope", "root", "root (the whole system disk) or workspace (the disk at /workspace)")
	fs.BoolVar(&req.Wait, "wait", false, "return once the snapshot is durable (or failed)")
	wait := fs.Duration("wait-timeout", 0, "give up waiting after this long (default: the server's, 10m)")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON instead of its ID")
	noProgress := fs.Bool("no-progress", false, noProgressUsage+" while --wait waits")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return badUsage(fs, "negative -wait-timeout")
	}
	req.WaitTimeoutSeconds = int64((*wait + time.Second - 1) / time.Second)
	p := c.progress(*noProgress || !req.Wait, "snapshot "+rest[0], -1, false)
	stop := watchSnapshot(ctx, cl, p, rest[0])
	sn, err := cl.Snapshot(ctx, rest[0], req)
	stop()
	if err != nil {
		p.end(false, "")
		return err
	}
	p.end(sn.State == api.SnapshotDurable, fmt.Sprintf("%s durable: %s changed, %s stored", sn.ID,
		humanBytes(sn.ChangedBytes), humanBytes(sn.StoredBytes)))
	if *asJSON {
		return printJSON(c.stdout, sn)
	}
	if sn.State == api.SnapshotFailed {
		return fmt.Errorf("snapshot %s failed: %s", sn.ID, sn.Error)
	}
	_, err = fmt.Fprintln(c.stdout, sn.ID)
	return err
}

func runSnapshotList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("snapshot ls", "[flags] [SANDBOX]",
		"List your snapshots on this node, or one sandbox's, as a tree: each is\nindented under its parent.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, rest, err := connect(fs, args, 0, 1)
	if err != nil {
		return err
	}
	sandbox := ""
	if len(rest) == 1 {
		sandbox = rest[0]
	}
	list, err := cl.ListSnapshots(ctx, sandbox)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tSCOPE\tSTATE\tDISK\tCHANGED\tSTORED\tCREATED")
		for _, n := range snapshotTree(list) {
			sn := n.sn
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", strings.Repeat("  ", n.depth), sn.ID, cmp.Or(sn.Name, "-"),
				sn.SandboxID, sn.Scope, sn.State, mib(sn.DiskBytes), mib(sn.ChangedBytes), mib(sn.StoredBytes), when(sn.CreatedAt))
		}
	})
}

// treeNode is a snapshot and its depth in the listed tree.
type treeNode struct {
	sn    api.Snapshot
	depth int
}

// snapshotTree orders snapshots depth first, children after their parent
// in the order listed; a snapshot whose parent is not listed is a root.
func snapshotTree(list []api.Snapshot) []treeNode {
	listed := map[string]bool{}
	children := map[string][]api.Snapshot{}
	for _, sn := range list {
		listed[sn.ID] = true
	}
	var roots []api.Snapshot
	for _, sn := range list {
		if sn.Parent != "" && listed[sn.Parent] {
			children[sn.Parent] = append(children[sn.Parent], sn)
		} else {
			roots = append(roots, sn)
		}
	}
	var out []treeNode
	var walk func(sn api.Snapshot, depth int)
	walk = func(sn api.Snapshot, depth int) {
		out = append(out, treeNode{sn, depth})
		for _, ch := range children[sn.ID] {
			walk(ch, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return out
}

func runSnapshotGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("snapshot get", "SNAPSHOT", "Print the snapshot (its ID or name) as JSON.")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	sn, err := cl.GetSnapshot(ctx, rest[0])
	if err != nil {
		return err
	}
	return printJSON(c.stdout, sn)
}

func runSnapshotLineage(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("snapshot lineage", "[flags] SNAPSHOT",
		"Print the snapshot's ancestors, one ID a line, nearest first: its parent,\nthe parent's parent, up to the first snapshot of the chain.")
	asJSON := fs.Bool("json", false, "print a JSON array instead")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	ids, err := cl.Lineage(ctx, rest[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(c.stdout, ids)
	}
	for _, id := range ids {
		if _, err := fmt.Fprintln(c.stdout, id); err != nil {
			return err
		}
	}
	return nil
}

func runSnapshotRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("snapshot rm", "SNAPSHOT...",
		"Delete snapshots (by ID or name): they can no longer be restored, and their\nnames are free again. Their layers stay in the blob store while a descendant\nneeds them; `warren gc` collects the rest.")
	cl, ids, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	return c.deleteEach(ctx, "snapshot rm", ids, cl.DeleteSnapshot)
}
