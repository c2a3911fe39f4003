package main

import "context"

func runGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("get", "ID", "Print the sandbox ID as JSON.")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	sb, err := cl.GetSandbox(ctx, rest[0])
	if err != nil {
		return err
	}
	return printJSON(c.stdout, sb)
}
