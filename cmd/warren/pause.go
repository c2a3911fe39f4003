package main

import (
	"context"
	"fmt"

	"warren/api"
	"warren/client"
)

func runPause(ctx context.Context, c *cli, args []string) error {
	return c.changeState(ctx, "pause", "Pause the vm or gvisor sandbox ID with its memory: it is saved to a file on the node and no process runs for it until `warren resume ID`. Prints its state.",
		args, (*client.Client).PauseSandbox)
}

func runResume(ctx context.Context, c *cli, args []string) error {
	return c.changeState(ctx, "resume", "Run the paused sandbox ID again from its saved memory; its processes carry on where they were. Prints its state.",
		args, (*client.Client).ResumeSandbox)
}

// changeState runs a command that takes one sandbox ID, moves the sandbox
// to another state with call, and prints its new state.
func (c *cli) changeState(ctx context.Context, name, about string, args []string,
	call func(*client.Client, context.Context, string) (*api.Sandbox, error)) error {
	fs := c.newFlags(name, "ID", about)
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	sb, err := call(cl, ctx, rest[0])
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.State)
	return err
}
