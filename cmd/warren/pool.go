package main

import (
	"context"
	"fmt"
	"io"

	"warren/api"
)

// poolCommands are the subcommands of `warren pool`.
var poolCommands = []command{
	{"ls", "list the warm pools: target, ready members, hits and misses (admin)", runPoolList},
	{"set", "keep sandboxes of a template booted ahead of demand (admin)", runPoolSet},
	{"rm", "remove a warm pool and its members (admin)", runPoolRemove},
}

func runPool(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "pool", poolCommands, args)
}

func runPoolList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("pool ls", "[flags]", "List the warm pools: template and runtime, resources, min and max, the\nmembers the nodes aim to keep ready now and those ready, hits and misses\n(needs the admin key).")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	pools, err := cl.Pools(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, pools, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "TEMPLATE\tRUNTIME\tCPUS\tMEMORY\tDISK\tMIN\tMAX\tTARGET\tREADY\tHITS\tMISSES")
		for _, p := range pools {
			fmt.Fprintf(tw, "%s\t%s\t%g\t%d MiB\t%d MiB\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Template, p.Runtime, p.CPUs, p.MemoryMB, p.DiskMB,
				p.Min, p.Max, p.Target, p.Ready, p.Hits, p.Misses)
			for _, n := range p.Nodes {
				if n.Error != "" {
					fmt.Fprintf(tw, "  node %s: %s\n", n.Node, n.Error)
				}
			}
		}
	})
}

func runPoolSet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("pool set", "TEMPLATE [flags]",
		"Keep --min sandboxes of TEMPLATE booted ahead of demand, grown toward --max\nwhile creates find the pool empty. A create of the same template, runtime and\nresources takes one instead of booting. Replaces the pool of that template and\nruntime, members and all (needs the admin key).")
	var spec api.PoolSpec
	fs.IntVar(&spec.Min, "min", 0, "members kept booted")
	fs.IntVar(&spec.Max, "max", 0, "the most misses grow the pool to (default: --min)")
	fs.StringVar(&spec.Runtime, "runtime", "", "container or vm (default: what a create picks)")
	fs.Float64Var(&spec.CPUs, "cpus", 0, "CPUs of each member (default: the server's)")
	fs.Int64Var(&spec.MemoryMB, "memory", 0, "memory limit of each member in `MB`")
	fs.Int64Var(&spec.Pids, "pids", 0, "process limit of each member")
	fs.Int64Var(&spec.DiskMB, "disk", 0, "root disk size of each member in `MB`")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	p, err := cl.SetPool(ctx, rest[0], spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "pool %s/%s: min %d, max %d, %g CPUs, %d MiB, %d pids, %d MiB disk\n",
		p.Template, p.Runtime, p.Min, p.Max, p.CPUs, p.MemoryMB, p.Pids, p.DiskMB)
	return nil
}

func runPoolRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("pool rm", "TEMPLATE [flags]", "Remove the warm pool of TEMPLATE; its members go (needs the admin key).")
	runtime := fs.String("runtime", "", "the pool's runtime (default: what a create picks)")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	return cl.DeletePool(ctx, rest[0], *runtime)
}
