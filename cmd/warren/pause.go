package main

import (
	"context"
	"fmt"

	"warren/client"
)

func runPause(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("pause", "ID",
		"Pause the vm sandbox ID with its memory: it is saved to a file on the node and no process runs for it until `warren resume ID`. Prints its state.")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	sb, err := cl.PauseSandbox(ctx, rest[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.State)
	return err
}

func runResume(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("resume", "ID",
		"Run the paused sandbox ID again from its saved memory; its processes carry on where they were. Prints its state.")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	sb, err := cl.ResumeSandbox(ctx, rest[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.State)
	return err
}
