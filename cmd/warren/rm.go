package main

import (
	"context"
	"fmt"
	"strings"
)

func runRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("rm", "[flags] ID...", "Delete sandboxes. Exits 1 if any could not be deleted, naming them.")
	allTenants := fs.Bool("all-tenants", false, "delete whichever tenant owns them (admin key only)")
	cl, ids, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	del := cl.DeleteSandbox
	if *allTenants {
		del = cl.DeleteAnyTenantsSandbox
	}
	return c.deleteEach(ctx, "rm", ids, del)
}

// deleteEach deletes every id, going on after a failure: each failure is
// reported on stderr, and the error names them all.
func (c *cli) deleteEach(ctx context.Context, cmd string, ids []string, del func(context.Context, string) error) error {
	var failed []string
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := del(ctx, id); err != nil {
			fmt.Fprintf(c.stderr, "warren: %s %s: %v\n", cmd, id, err)
			failed = append(failed, id)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not delete %s", strings.Join(failed, ", "))
	}
	return nil
}
