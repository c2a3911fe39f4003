package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"warren/client"
)

func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("ls", "[flags]", "List your sandboxes.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	list, err := cl.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(c.stdout, list)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTEMPLATE\tRUNTIME\tSTATE\tCREATED\tEXPIRES")
	for _, sb := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Template, sb.Runtime, sb.State, when(sb.CreatedAt), when(sb.ExpiresAt))
	}
	return tw.Flush()
}

// when formats a time of the API for a table, in local time.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}
