package main

import (
	"context"
	"fmt"
	"io"
)

func runMetrics(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("metrics", "[flags] ID",
		"Print a running sandbox's resource use, measured by its agent: the CPU share\nsince the previous call (of anyone), memory, disk and tasks.")
	asJSON := fs.Bool("json", false, "print JSON")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	m, err := cl.SandboxMetrics(ctx, rest[0])
	if err != nil {
		return err
	}
	const mib = 1 << 20
	return printTable(c.stdout, *asJSON, m, 2, func(tw io.Writer) {
		fmt.Fprintf(tw, "cpu:\t%.1f%% of %d\n", m.CPUUsedPct, m.CPUCount)
		fmt.Fprintf(tw, "memory:\t%.1f MiB of %.1f MiB (cache %.1f MiB)\n", float64(m.MemoryUsedBytes)/mib, float64(m.MemoryTotalBytes)/mib, float64(m.MemoryCacheBytes)/mib)
		fmt.Fprintf(tw, "disk:\t%.1f MiB of %.1f MiB\n", float64(m.DiskUsedBytes)/mib, float64(m.DiskTotalBytes)/mib)
		fmt.Fprintf(tw, "tasks:\t%d\n", m.Pids)
	})
}
