package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"warren/api"
)

func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("ls", "[flags]", "List your live sandboxes (starting or running).")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	all := fs.Bool("all", false, "also list ended sandboxes (stopped or failed; the server keeps them for a while)")
	allTenants := fs.Bool("all-tenants", false, "every tenant's sandboxes, with a TENANT column (admin key only)")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list := cl.ListSandboxes
	if *allTenants {
		list = cl.ListAllTenantsSandboxes
	}
	var states []string // every state
	if !*all {
		states = []string{api.StateStarting, api.StateRunning, api.StatePaused}
	}
	sbs, err := list(ctx, states...)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, sbs, 2, func(tw io.Writer) {
		tenant := func(sb api.Sandbox) string { return "" }
		if *allTenants {
			tenant = func(sb api.Sandbox) string { return sb.Tenant + "\t" }
			fmt.Fprint(tw, "TENANT\t")
		}
		fmt.Fprintln(tw, "ID\tTEMPLATE\tRUNTIME\tSTATE\tCREATED\tEXPIRES")
		for _, sb := range sbs {
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", tenant(sb), sb.ID, sb.Template, sb.Runtime, sb.State, when(sb.CreatedAt), when(sb.ExpiresAt))
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
