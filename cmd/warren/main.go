// Command warren is warren's command line and its daemon in one binary:
// `warren server` runs the server (control plane and node), and every other
// command talks to a server through package client, configured from the
// environment (WARREN_URL, WARREN_API_KEY, WARREN_DATA_DIR).
//
// Errors are printed as "warren: <message>" on stderr with exit status 1; a
// command line that does not parse exits 2 with the command's usage. `warren
// exec` exits with the status of the command it ran.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli is one invocation's standard streams.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// forceProgress shows progress lines on stderr as if it were a
	// terminal (tests).
	forceProgress bool
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for the list of commands
	run     func(ctx context.Context, c *cli, args []string) error
}

// commands are warren's subcommands, in the order the usage lists them.
var commands = []command{
	{"create", "create a sandbox and print its ID", runCreate},
	{"ls", "list sandboxes", runList},
	{"get", "print a sandbox as JSON", runGet},
	{"exec", "run a command in a sandbox", runExec},
	{"files", "read, write and manage files in a sandbox", runFiles},
	{"timeout", "set a sandbox's time to live", runTimeout},
	{"metrics", "print a running sandbox's CPU, memory, disk and tasks", runMetrics},
	{"network", "show or change a sandbox's egress policy", runNetwork},
	{"secret", "keep secrets that egress rules put in sandboxes' requests", runSecret},
	{"pause", "pause a vm or gvisor sandbox with its memory", runPause},
	{"resume", "resume a paused sandbox", runResume},
	{"rm", "delete sandboxes", runRemove},
	{"preview", "show or change how a sandbox's ports are reached (public, token, URL)", runPreview},
	{"port-url", "print the URL that opens a sandbox's port", runPortURL},
	{"snapshot", "snapshot a sandbox's disk; list, show and delete snapshots", runSnapshot},
	{"restore", "start sandboxes from a snapshot", runRestore},
	{"fork", "start children of a running sandbox from a snapshot of its disk", runFork},
	{"events", "follow what happens to your sandboxes and snapshots", runEvents},
	{"gc", "collect snapshot data nothing needs (admin)", runGC},
	{"template", "list and build templates", runTemplate},
	{"pool", "keep sandboxes of a template booted ahead of demand (admin)", runPool},
	{"info", "describe the node: runtimes, isolation, disks, cgroups", runInfo},
	{"key", "make API keys for tenants (admin)", runKey},
	{"quota", "show and set a tenant's quota in the fleet (admin)", runQuota},
	{"fleet", "make the fleet's certificate authority and its members' certificates", runFleet},
	{"server", "run the warren server: a single machine (control plane and node)", runServer},
	{"control", "run a control replica of a fleet", runControl},
	{"node", "run a node of a fleet; list, cordon, uncordon and drain nodes", runNode},
	{"region", "list the fleet's regions", runRegion},
}

// run runs the command line args (without the program's name) and returns
// the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return (&cli{stdin: stdin, stdout: stdout, stderr: stderr}).run(ctx, args)
}

// run runs the command line args with c's streams.
func (c *cli) run(ctx context.Context, args []string) int {
	stderr := c.stderr
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return c.help(ctx, args[1:])
	}
	cmd := lookup(commands, args[0])
	if cmd == nil {
		cmd = lookup(hiddenCommands, args[0])
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "warren: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return exitStatus(ctx, stderr, cmd.run(ctx, c, args[1:]))
}

// help prints the usage of warren, or of the command args name, on stdout.
func (c *cli) help(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(c.stdout)
		return 0
	}
	cmd := lookup(commands, args[0])
	if cmd == nil {
		fmt.Fprintf(c.stderr, "warren help: unknown command %q\n\n", args[0])
		usage(c.stderr)
		return 2
	}
	// A command prints its usage on stderr when asked with -h; here it is
	// what was asked for, so it goes to stdout.
	h := &cli{stdin: c.stdin, stdout: c.stdout, stderr: c.stdout}
	return exitStatus(ctx, c.stderr, cmd.run(ctx, h, append(args[1:], "-h")))
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: warren <command> [arguments]\n\ncommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
The server is $WARREN_URL (default http://127.0.0.1:7777). The API key is
$WARREN_API_KEY or, for a server on this machine, its admin key in
$WARREN_DATA_DIR/admin.key (default /var/lib/warren/admin.key).

Run "warren help <command>" for a command's usage.
`)
}

func lookup(cmds []command, name string) *command {
	for i := range cmds {
		if cmds[i].name == name {
			return &cmds[i]
		}
	}
	return nil
}

// usageError is a command line that does not parse; its message and the
// usage are already printed.
type usageError struct{}

func (usageError) Error() string { return "usage" }

// exitError ends warren with a status and no message: a remote command's
// exit status, or a failure already reported.
type exitError int

func (e exitError) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// exitStatus reports err on stderr and returns the exit status it means.
func exitStatus(ctx context.Context, stderr io.Writer, err error) int {
	var ue usageError
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ee):
		return int(ee)
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "warren: interrupted")
		return 130 // as a shell reports SIGINT
	default:
		fmt.Fprintf(stderr, "warren: %v\n", err)
		return 1
	}
}
