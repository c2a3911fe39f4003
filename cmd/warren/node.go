package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"warren/api"
)

// nodeCommands are the subcommands of `warren node` that drive a fleet's
// nodes; `warren node` with flags runs one.
var nodeCommands = []command{
	{"ls", "list the fleet's nodes (admin)", runNodeList},
	{"cordon", "stop a node taking new sandboxes (admin)", runNodeCordon},
	{"uncordon", "let a cordoned or draining node take new sandboxes again (admin)", runNodeUncordon},
	{"drain", "move a node's sandboxes to other nodes from a final snapshot (admin)", runNodeDrain},
}

func runNode(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 && lookup(nodeCommands, args[0]) != nil {
		return runGroup(ctx, c, "node", nodeCommands, args)
	}
	return runNodeDaemon(ctx, c, args)
}

func runNodeList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("node ls", "[flags]", "List the fleet's nodes: ID, region and cluster, state, sandboxes, vCPUs and\nmemory promised of what each may promise, last heartbeat (needs the admin key).")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, nodes, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "ID\tREGION\tCLUSTER\tSTATE\tSANDBOXES\tCPUS\tMEMORY\tRUNTIMES\tHEARTBEAT")
		for _, n := range nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%g/%g\t%d/%d MiB\t%s\t%s\n", n.ID, n.Region, n.Cluster, n.State, n.Sandboxes,
				n.Allocated.CPUs, n.Capacity.CPUs, n.Allocated.MemoryMB, n.Capacity.MemoryMB, strings.Join(n.Runtimes, ","), when(n.HeartbeatAt))
		}
	})
}

func runNodeCordon(ctx context.Context, c *cli, args []string) error {
	return nodeAction(ctx, c, api.NodeCordon, "Stop nodes taking new sandboxes; they keep those they run (needs the admin key).", args)
}

func runNodeUncordon(ctx context.Context, c *cli, args []string) error {
	return nodeAction(ctx, c, api.NodeUncordon, "Let cordoned or draining nodes take new sandboxes again (needs the admin key).", args)
}

func runNodeDrain(ctx context.Context, c *cli, args []string) error {
	return nodeAction(ctx, c, api.NodeDrain, `Drain nodes: they take no new sandboxes, and each running sandbox gets a
final snapshot with its filesystem frozen, stops, and starts again on another
node from that snapshot under the same ID, losing nothing written before it.
Paused sandboxes and those with a workspace disk stay. warren node ls shows
what is left (needs the admin key).`, args)
}

func nodeAction(ctx context.Context, c *cli, action, about string, args []string) error {
	fs := c.newFlags("node "+action, "ID...", about)
	cl, rest, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	for _, id := range rest {
		n, err := cl.NodeAction(ctx, id, action)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(c.stdout, "%s %s\n", n.ID, n.State); err != nil {
			return err
		}
	}
	return nil
}
