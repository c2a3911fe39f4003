package main

import (
	"context"
	"fmt"
	"io"
)

func runInfo(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("info", "[flags]",
		"Describe the node: its runtimes and the isolation each gives, how it clones\ndisks, its cgroup version, where it stores snapshots, and the memory images\nvm sandboxes start from.")
	asJSON := fs.Bool("json", false, "print JSON")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	info, err := cl.Info(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, info, 2, func(tw io.Writer) {
		fmt.Fprintf(tw, "version:\t%s\n", info.Version)
		fmt.Fprintf(tw, "kernel:\t%s\n", info.Kernel)
		fmt.Fprintf(tw, "clone mode:\t%s\n", info.CloneMode)
		fmt.Fprintf(tw, "cgroup:\tv%d\n", info.CgroupVersion)
		if info.BlobStore != "" { // an admin key's view
			fmt.Fprintf(tw, "blob store:\t%s\n", info.BlobStore)
		}
		fmt.Fprintf(tw, "sandboxes:\t%d\n", info.Sandboxes)
		fmt.Fprintln(tw, "runtimes:")
		for _, r := range info.Runtimes {
			state := "available"
			if !r.Available {
				state = "unavailable"
				if r.Reason != "" {
					state += ": " + r.Reason
				}
			}
			acc := ""
			if r.Accel != "" {
				acc = "\taccel: " + r.Accel
			}
			fmt.Fprintf(tw, "  %s\tisolation: %s%s\t%s\n", r.Name, r.Isolation, acc, state)
		}
		if len(info.MemoryImages) > 0 { // an admin key's view
			fmt.Fprintln(tw, "memory images:")
			for _, m := range info.MemoryImages {
				fmt.Fprintf(tw, "  %s\t%d vcpu, %d MiB\t%s\t%d starts\t%.1f MiB\n", m.Template, m.VCPUs, m.MemoryMB, m.State, m.Starts, float64(m.Bytes)/(1<<20))
			}
		}
	})
}
