//go:build !linux

package main

import (
	"context"
	"errors"
	"flag"
	"runtime"
)

// runServer is `warren server` where the server cannot run: its runtimes
// are Linux's (namespaces, cgroups, KVM). Every other command drives a
// remote server from here.
func runServer(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("server", "[flags]", "Run the warren server: on Linux only. From here, set WARREN_URL to drive\na server on a Linux machine.")
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			fs.Usage()
			return flag.ErrHelp
		}
	}
	return errors.New("warren server runs on Linux only, not on " + runtime.GOOS + ": set WARREN_URL to drive a server on a Linux machine")
}
