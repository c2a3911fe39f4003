package main

import (
	"context"

	"warren/internal/blockserver"
	"warren/internal/leasewatch"
)

// hiddenCommands are the commands warren runs itself, never listed in its
// usage.
var hiddenCommands = []command{
	{leasewatch.Command, "a fleet node's lease watchdog (started by warren node)", runNodeWatchdog},
	{blockserver.Command, "the node's block server of always-on disks (started by the daemon)", runBlockServer},
}

// runNodeWatchdog is `warren node-watchdog`: the watchdog a fleet node
// starts, which kills the node's sandboxes if its lease lapses while the
// daemon cannot (package leasewatch).
func runNodeWatchdog(ctx context.Context, c *cli, args []string) error {
	return leasewatch.Main(ctx, args, c.stderr)
}

// runBlockServer is `warren block-server`: the process that serves the
// node's always-on disks, apart from the daemon so that it outlives it
// (package blockserver).
func runBlockServer(ctx context.Context, c *cli, args []string) error {
	return blockserver.Main(ctx, args, c.stderr)
}
