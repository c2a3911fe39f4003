package main

import (
	"context"
	"encoding/json"
	"io"

	"warren/client"
)

func runGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("get", "ID", "Print the sandbox ID as JSON.")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	sb, err := cl.GetSandbox(ctx, rest[0])
	if err != nil {
		return err
	}
	return printJSON(c.stdout, sb)
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
