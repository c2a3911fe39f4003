package main

import (
	"context"
	"fmt"
)

// keyCommands are the subcommands of `warren key`.
var keyCommands = []command{
	{"create", "make an API key for a tenant and print it", runKeyCreate},
}

func runKey(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "key", keyCommands, args)
}

func runKeyCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("key create", "TENANT",
		"Make an API key for TENANT (needs the admin key) and print it alone on stdout.\nThe server keeps only its hash: store it now.")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	k, err := cl.CreateKey(ctx, rest[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, k.Key)
	return err
}
