//go:build !linux

package main

import (
	"context"
	"errors"
	"flag"
	"runtime"
)

// runServer, runNodeDaemon and runControl are the daemons, where they cannot
// run: their runtimes are Linux's (namespaces, cgroups, KVM). Every other
// command drives a remote warren from here.
func runServer(ctx context.Context, c *cli, args []string) error { return linuxOnly(c, "server", args) }

func runNodeDaemon(ctx context.Context, c *cli, args []string) error {
	return linuxOnly(c, "node", args)
}

func runControl(ctx context.Context, c *cli, args []string) error {
	return linuxOnly(c, "control", args)
}

// hiddenCommands: warren runs none of its own here.
var hiddenCommands []command

func linuxOnly(c *cli, name string, args []string) error {
	fs := c.newFlags(name, "[flags]", "Run warren "+name+": on Linux only. From here, set WARREN_URL to drive\na warren on a Linux machine.")
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			fs.Usage()
			return flag.ErrHelp
		}
	}
	return errors.New("warren " + name + " runs on Linux only, not on " + runtime.GOOS + ": set WARREN_URL to drive a warren on a Linux machine")
}
