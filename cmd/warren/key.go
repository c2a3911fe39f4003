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
	fs := c.newFlags("key rm", "[flags] ID...", "Revoke API keys by ID (needs the admin key): each authenticates nothing from\nthe next request on, and what it opened (streams, terminals, proxied\nconnections) ends. With --rotate-agent-tokens, every sandbox of each key's\ntenant also gets a new agent token (E2B's envd access token), which a holder\nof the key could have read. The admin key is replaced by removing the data\ndirectory's admin.key and restarting the server.")
	rotate := fs.Bool("rotate-agent-tokens", false, "also give every sandbox of each key's tenant a new agent token")
	cl, rest, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	tenants := map[string]string{} // by key ID
	if *rotate {
		keys, err := cl.ListKeys(ctx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			tenants[k.ID] = k.Tenant
		}
	}
	for _, id := range rest {
		if err := cl.DeleteKey(ctx, id); err != nil {
			return err
		}
		if !*rotate {
			continue
		}
		tenant, ok := tenants[id]
		if !ok {
			return fmt.Errorf("key %s was removed, but its tenant is unknown: rotate its agent tokens with the API (POST /v1/tenants/TENANT/rotate-agent-tokens)", id)
		}
		res, err := cl.RotateAgentTokens(ctx, tenant)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: new agent tokens for %d sandboxes of %s\n", id, len(res.Sandboxes), tenant)
	}
	return nil
}
