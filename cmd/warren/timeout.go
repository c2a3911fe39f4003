package main

import (
	"context"
	"fmt"
	"time"

	"warren/client"
)

func runTimeout(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("timeout", "ID DURATION",
		"Make the sandbox ID expire DURATION (e.g. 1h) from now, and print its new expiry.")
	rest, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(rest[1])
	if err != nil || ttl <= 0 {
		return badUsage(fs, fmt.Sprintf("bad duration %q: want e.g. 30m or 1h", rest[1]))
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	sb, err := cl.SetTimeout(ctx, rest[0], ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.ExpiresAt.Local().Format(time.RFC3339))
	return err
}
