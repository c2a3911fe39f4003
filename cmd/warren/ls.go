package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("ls", "[flags]", "List your sandboxes.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list, err := cl.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "ID\tTEMPLATE\tRUNTIME\tSTATE\tCREATED\tEXPIRES")
		for _, sb := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Template, sb.Runtime, sb.State, when(sb.CreatedAt), when(sb.ExpiresAt))
		}
	})
}

// when formats a time of the API for a table, in local time.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}
