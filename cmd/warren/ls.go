package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"warren/api"
)

func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("ls", "[flags]", "List your live sandboxes (starting or running).")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	all := fs.Bool("all", false, "also list ended sandboxes (stopped or failed; the server keeps them for a while)")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list, err := cl.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	if !*all {
		list = slices.DeleteFunc(list, func(sb api.Sandbox) bool {
			return sb.State == api.StateStopped || sb.State == api.StateFailed
		})
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
