package main

import (
	"context"
	"fmt"
	"io"
)

// keyCommands are the subcommands of `warren key`.
var keyCommands = []command{
	{"create", "make an API key for a tenant and print it", runKeyCreate},
	{"ls", "list the API keys (never the keys themselves)", runKeyList},
	{"rm", "revoke an API key by its ID", runKeyRemove},
}

func runKey(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "key", keyCommands, args)
}

func runKeyCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("key create", "TENANT",
		"Make an API key for TENANT (needs the admin key) and print it alone on stdout.\nThe server keeps only its hash: store it now. `warren key ls` shows its ID.")
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

func runKeyList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("key ls", "[flags]", "List the API keys: ID, tenant, admin or not, created (needs the admin key).\nThe keys themselves are never shown: the server keeps only their hashes.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	keys, err := cl.ListKeys(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, keys, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "ID\tTENANT\tADMIN\tCREATED")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", k.ID, k.Tenant, k.Admin, when(k.CreatedAt))
		}
	})
}

func runKeyRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("key rm", "ID...", "Revoke API keys by ID (needs the admin key): each authenticates nothing from\nthe next request on. The admin key is replaced by removing the data\ndirectory's admin.key and restarting the server.")
	cl, rest, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	for _, id := range rest {
		if err := cl.DeleteKey(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
