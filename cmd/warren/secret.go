package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"warren/api"
)

// secretCommands are the subcommands of `warren secret`.
var secretCommands = []command{
	{"set", "create a secret, or give it a new value, from stdin", runSecretSet},
	{"ls", "list your secrets (never their values)", runSecretList},
	{"get", "show a secret's ID, version and metadata (never its value)", runSecretGet},
	{"rm", "delete secrets", runSecretRemove},
}

func runSecret(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "secret", secretCommands, args)
}

func runSecretSet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("secret set", "[flags] NAME",
		"Create your secret NAME, or give it a new version, with the value read from\n"+
			"stdin: never from the command line, where other users and shell history\n"+
			"would see it. One trailing newline is dropped (warren secret set NAME < file,\n"+
			"or printf %s \"$VALUE\" | warren secret set NAME); on a terminal the value is\n"+
			"typed, hidden, and ends at Enter. Prints the secret's name, ID and version.\n\n"+
			"An egress rule names the secret as ${secrets.NAME}: the node puts the value\n"+
			"in the sandbox's requests as they leave it (warren create --rule). Names are\n"+
			"letters, digits, '.', '_' and '-', stored in lower case.")
	meta := kvFlag{}
	fs.Var(meta, "meta", "set the metadata `K=V` (repeatable); given, it replaces the secret's metadata")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	value, err := c.readSecret(rest[0])
	if err != nil {
		return err
	}
	s, err := cl.SetSecret(ctx, rest[0], api.SetSecretRequest{Value: value, Metadata: meta.orNil()})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s %s version %d\n", s.Name, s.ID, s.Version)
	return err
}

// readSecret reads the value of secret name from stdin: a line typed with
// the echo off on a terminal, else everything up to the end of file. It
// drops one trailing newline and refuses an empty value or one over
// api.MaxSecretBytes, before anything is sent.
func (c *cli) readSecret(name string) (string, error) {
	in := c.stdin
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		fmt.Fprintf(c.stderr, "value of %s (hidden; end with Enter): ", name)
		restore, err := noEcho(f)
		if err != nil {
			return "", fmt.Errorf("read the value: %w", err)
		}
		line, err := bufio.NewReader(io.LimitReader(f, api.MaxSecretBytes+2)).ReadBytes('\n')
		restore()
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("read the value: %w", err)
		}
		in = bytes.NewReader(line)
	}
	// Read one byte past the longest value and its newline, to tell an
	// overlong value from one that fits.
	data, err := io.ReadAll(io.LimitReader(in, api.MaxSecretBytes+3))
	if err != nil {
		return "", fmt.Errorf("read the value from stdin: %w", err)
	}
	if v, ok := bytes.CutSuffix(data, []byte("\n")); ok {
		data, _ = bytes.CutSuffix(v, []byte("\r"))
	}
	switch {
	case len(data) == 0:
		return "", fmt.Errorf("the value of secret %s is empty: give it on stdin (warren secret set %s < file)", name, name)
	case len(data) > api.MaxSecretBytes:
		return "", fmt.Errorf("the value of secret %s is over %d bytes", name, api.MaxSecretBytes)
	}
	return string(data), nil
}

func runSecretList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("secret ls", "[flags]", "List your secrets by name: ID, version, when their value was last set.\nValues are never shown: the server never returns them.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list, err := cl.ListSecrets(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "NAME\tID\tVERSION\tUPDATED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, s.ID, s.Version, when(s.UpdatedAt))
		}
	})
}

func runSecretGet(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("secret get", "[flags] NAME", "Show your secret NAME (or its ID): ID, version, times and metadata.\nIts value is never shown: the server never returns it.")
	asJSON := fs.Bool("json", false, "print JSON")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	s, err := cl.GetSecret(ctx, rest[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(c.stdout, s)
	}
	w := c.stdout
	fmt.Fprintf(w, "name      %s\nid        %s\nversion   %d\ncreated   %s\nupdated   %s\n", s.Name, s.ID, s.Version, when(s.CreatedAt), when(s.UpdatedAt))
	for _, k := range slices.Sorted(maps.Keys(s.Metadata)) {
		if _, err := fmt.Fprintf(w, "meta      %s=%s\n", k, s.Metadata[k]); err != nil {
			return err
		}
	}
	return nil
}

func runSecretRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("secret rm", "NAME...", "Delete your secrets (by name or ID), every version of each. Sandboxes whose\nrules use one keep the value they have; rules set later that name it are refused.")
	cl, names, err := connect(fs, args, 1, -1)
	if err != nil {
		return err
	}
	return c.deleteEach(ctx, "secret rm", names, cl.DeleteSecret)
}
