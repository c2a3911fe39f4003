package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"warren/client"
)

// fileCommands are the subcommands of `warren files`.
var fileCommands = []command{
	{"write", "write stdin to a file", runFilesWrite},
	{"read", "write a file to stdout", runFilesRead},
	{"ls", "list a directory", runFilesList},
	{"stat", "describe a file as JSON", runFilesStat},
	{"mkdir", "make a directory and its parents", runFilesMkdir},
	{"mv", "move or rename a file", runFilesMove},
	{"rm", "remove a file or directory", runFilesRemove},
}

func runFiles(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "files", fileCommands, args)
}

func runFilesWrite(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files write", "[flags] ID PATH",
		"Write stdin, streamed byte for byte, to the file PATH in the sandbox ID,\nreplacing it atomically and creating its parents.")
	var mode modeFlag
	fs.Var(&mode, "mode", "the file's permission bits in octal, e.g. 0600 (default 0644)")
	user := fs.String("user", "", "the file's owner (default root)")
	noProgress := fs.Bool("no-progress", false, noProgressUsage)
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	in := c.stdin
	p := c.progress(*noProgress, "files write", inputSize(in), true)
	if p != nil {
		in = progressReader{in, p}
	}
	_, err = cl.WriteFile(ctx, rest[0], rest[1], in, uint32(mode), *user)
	p.end(err == nil, "")
	return err
}

// inputSize is the size of r when it is a regular file (stdin redirected
// from one), else -1: unknown.
func inputSize(r io.Reader) int64 {
	f, ok := r.(*os.File)
	if !ok {
		return -1
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return -1
	}
	if off, err := f.Seek(0, io.SeekCurrent); err == nil && off <= fi.Size() {
		return fi.Size() - off
	}
	return fi.Size()
}

func runFilesRead(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files read", "[flags] ID PATH", "Write the file PATH of the sandbox ID to stdout, streamed byte for byte.")
	noProgress := fs.Bool("no-progress", false, noProgressUsage)
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	rc, err := cl.ReadFile(ctx, rest[0], rest[1])
	if err != nil {
		return err
	}
	defer rc.Close()
	// A file shown on the terminal would be mixed with the progress line.
	if f, ok := c.stdout.(*os.File); ok && isTerminal(f) {
		*noProgress = true
	}
	p := c.progress(*noProgress, "files read", rc.Size, true)
	_, err = io.Copy(c.stdout, progressReader{rc, p})
	p.end(err == nil, "")
	if err != nil {
		return fmt.Errorf("read file: %w", err)
	}
	return nil
}

func runFilesList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files ls", "[flags] ID PATH", "List the directory PATH of the sandbox ID.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	depth := fs.Int("depth", 1, "how many levels to descend")
	rest, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *depth < 1 {
		return badUsage(fs, "-depth must be at least 1")
	}
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	entries, err := cl.ListFiles(ctx, rest[0], rest[1], *depth)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, entries, 1, func(tw io.Writer) {
		for _, e := range entries {
			name := e.Name
			if *depth > 1 {
				name = e.Path
			}
			if e.SymlinkTarget != "" {
				name += " -> " + e.SymlinkTarget
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Permissions, e.Owner, e.Group, e.Size, when(e.ModifiedAt), name)
		}
	})
}

func runFilesStat(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files stat", "ID PATH", "Describe the file PATH of the sandbox ID as JSON.")
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	fi, err := cl.StatFile(ctx, rest[0], rest[1])
	if err != nil {
		return err
	}
	return printJSON(c.stdout, fi)
}

func runFilesMkdir(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files mkdir", "[flags] ID PATH", "Make the directory PATH in the sandbox ID, and its missing parents.")
	var mode modeFlag
	fs.Var(&mode, "mode", "the permission bits in octal (default 0755)")
	user := fs.String("user", "", "the directory's owner (default root)")
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	_, err = cl.Mkdir(ctx, rest[0], rest[1], uint32(mode), *user)
	return err
}

func runFilesMove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files mv", "ID SRC DST", "Move or rename SRC to DST in the sandbox ID.")
	cl, rest, err := connect(fs, args, 3, 3)
	if err != nil {
		return err
	}
	_, err = cl.Move(ctx, rest[0], rest[1], rest[2])
	return err
}

func runFilesRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("files rm", "[flags] ID PATH", "Remove the file or empty directory PATH in the sandbox ID.")
	recursive := fs.Bool("r", false, "remove a directory and everything in it")
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	return cl.RemoveFile(ctx, rest[0], rest[1], *recursive)
}
