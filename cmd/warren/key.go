package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"warren/api"
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
	fs := c.newFlags("key create", "[flags] TENANT",
		"Make an API key for TENANT (needs the admin key) and print it alone on stdout.\nThe server keeps only its hash: store it now. `warren key ls` shows its ID.\nWith --scope metrics the key may only read /metrics (for a Prometheus\nscraper), and TENANT names its owner.")
	scope := fs.String("scope", "", "limit the key to what it names: metrics (GET /metrics alone)")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	k, err := cl.CreateKey(ctx, api.CreateKeyRequest{Tenant: rest[0], Scope: *scope})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, k.Key)
	return err
}

func runKeyList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("key ls", "[flags]", "List the API keys: ID, tenant, admin or not, scope, created (needs the admin key).\nThe keys themselves are never shown: the server keeps only their hashes.")
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
		fmt.Fprintln(tw, "ID\tTENANT\tADMIN\tSCOPE\tCREATED")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", k.ID, k.Tenant, k.Admin, cmp.Or(k.Scope, "-"), when(k.CreatedAt))
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
