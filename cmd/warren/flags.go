package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"warren/client"
)

// newFlags returns the flag set of the command name (e.g. "files write"),
// whose usage shows synopsis and about. Errors and usage go to c.stderr.
func (c *cli) newFlags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("warren "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: warren %s %s\n\n%s\n", name, synopsis, about)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args with fs and returns the positional arguments, checking
// that there are at least least of them and, when most >= 0, at most most.
//
// Flags may come anywhere among the positional arguments, as users type them
// (`warren snapshot ID --wait`), up to a "--": every argument after it is
// positional, flag-like or not (exec's command line).
func parse(fs *flag.FlagSet, args []string, least, most int) ([]string, error) {
	var rest []string
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			rest = append(rest, args[1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' { // "-" too is an argument (stdin, say)
			rest = append(rest, a)
			args = args[1:]
			continue
		}
		n := min(flagArgs(fs, a), len(args))
		if err := fs.Parse(args[:n]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{} // the flag package printed the error and the usage
		}
		args = args[n:]
	}
	switch {
	case len(rest) < least:
		return nil, badUsage(fs, "missing arguments")
	case most >= 0 && len(rest) > most:
		return nil, badUsage(fs, "too many arguments")
	}
	return rest, nil
}

// flagArgs is how many arguments the flag a (-name, --name or -name=value)
// takes up: two when its value is the next argument, else one. A flag fs
// does not define counts one, for fs.Parse to report.
func flagArgs(fs *flag.FlagSet, a string) int {
	name := strings.TrimPrefix(a[1:], "-")
	if strings.Contains(name, "=") {
		return 1
	}
	f := fs.Lookup(name)
	if f == nil {
		return 1
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return 1
	}
	return 2
}

// connect parses args as parse does and then makes the client of the server
// the environment names: every command that calls the server begins so.
func connect(fs *flag.FlagSet, args []string, least, most int) (*client.Client, []string, error) {
	rest, err := parse(fs, args, least, most)
	if err != nil {
		return nil, nil, err
	}
	cl, err := client.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	return cl, rest, nil
}

// badUsage prints msg and the usage of fs and returns a usageError.
func badUsage(fs *flag.FlagSet, msg string) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), msg)
	fs.Usage()
	return usageError{}
}

// runGroup runs the subcommand of group (e.g. "files") named by args[0].
func runGroup(ctx context.Context, c *cli, group string, subs []command, args []string) error {
	groupUsage := func() {
		fmt.Fprintf(c.stderr, "usage: warren %s <command> [arguments]\n\ncommands:\n", group)
		for _, s := range subs {
			fmt.Fprintf(c.stderr, "  %-8s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(c.stderr, "\nRun \"warren help %s <command>\" for a command's usage.\n", group)
	}
	if len(args) == 0 {
		groupUsage()
		return usageError{}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		groupUsage()
		return nil
	}
	sub := lookup(subs, args[0])
	if sub == nil {
		fmt.Fprintf(c.stderr, "warren %s: unknown command %q\n\n", group, args[0])
		groupUsage()
		return usageError{}
	}
	return sub.run(ctx, c, args[1:])
}

// kvFlag collects repeated K=V flags.
type kvFlag map[string]string

func (f kvFlag) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(f)) {
		fmt.Fprintf(&b, "%s=%s ", k, f[k])
	}
	return strings.TrimSpace(b.String())
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return errors.New("want K=V")
	}
	f[k] = v
	return nil
}

// orNil is f, or nil when it is empty (the API's "unset").
func (f kvFlag) orNil() map[string]string {
	if len(f) == 0 {
		return nil
	}
	return f
}

// modeFlag is a file mode given in octal (0644).
type modeFlag uint32

func (m *modeFlag) String() string {
	if *m == 0 {
		return ""
	}
	return fmt.Sprintf("%04o", uint32(*m))
}

func (m *modeFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return errors.New("want an octal mode like 0644")
	}
	*m = modeFlag(v)
	return nil
}
