package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// regionCommands are the subcommands of `warren region`.
var regionCommands = []command{
	{"ls", "list the fleet's regions and their clusters (admin)", runRegionList},
}

func runRegion(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "region", regionCommands, args)
}

func runRegionList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("region ls", "[flags]", "List the fleet's regions: their clusters, and how many nodes are active in each\nof all they have (needs the admin key). A create or restore names one with\n--region.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return err
	}
	type region struct {
		Region   string   `json:"region"`
		Clusters []string `json:"clusters"`
		Nodes    int      `json:"nodes"`
		Active   int      `json:"active"`
	}
	by := map[string]*region{}
	for _, n := range nodes {
		r := by[n.Region]
		if r == nil {
			r = &region{Region: n.Region}
			by[n.Region] = r
		}
		if !slices.Contains(r.Clusters, n.Cluster) {
			r.Clusters = append(r.Clusters, n.Cluster)
		}
		r.Nodes++
		if n.State == "active" {
			r.Active++
		}
	}
	var regions []region
	for _, r := range by {
		slices.Sort(r.Clusters)
		regions = append(regions, *r)
	}
	slices.SortFunc(regions, func(a, b region) int { return strings.Compare(a.Region, b.Region) })
	return printTable(c.stdout, *asJSON, regions, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "REGION\tCLUSTERS\tNODES")
		for _, r := range regions {
			fmt.Fprintf(tw, "%s\t%s\t%d of %d active\n", r.Region, strings.Join(r.Clusters, ","), r.Active, r.Nodes)
		}
	})
}
