package main

import (
	"context"
	"fmt"

	"warren/api"
	"warren/client"
)

func runPause(ctx context.Context, c *cli, args []string) error {
	return c.changeState(ctx, "pause", "Pause the sandbox ID: its disk goes to the blob store as a snapshot, and a vm or gvisor sandbox keeps its processes too (held on its node); a container stops, and its processes start again when it wakes. Prints its state, and \"(without memory)\" when its processes will not carry on.",
		args, (*client.Client).PauseSandbox)
}

func runResume(ctx context.Context, c *cli, args []string) error {
	return c.changeState(ctx, "resume", "Wake the paused sandbox ID, on its node or any other, under its ID with its files; with memory its processes carry on where they were. Prints its state.",
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
	if sb.Paused != nil && !sb.Paused.Memory {
		_, err = fmt.Fprintln(c.stdout, sb.State, "(without memory)")
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.State)
	return err
}
