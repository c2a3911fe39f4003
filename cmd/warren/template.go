package main

import (
	"context"
	"fmt"
	"io"
)

// templateCommands are the subcommands of `warren template`.
var templateCommands = []command{
	{"ls", "list templates", runTemplateList},
	{"build", "build a template", runTemplateBuild},
}

func runTemplate(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "template", templateCommands, args)
}

func runTemplateList(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template ls", "[flags]", "List the templates sandboxes can be created from.")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cl, _, err := connect(fs, args, 0, 0)
	if err != nil {
		return err
	}
	list, err := cl.ListTemplates(ctx)
	if err != nil {
		return err
	}
	return printTable(c.stdout, *asJSON, list, 2, func(tw io.Writer) {
		fmt.Fprintln(tw, "NAME\tSIZE\tUSED\tBUILT")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, mib(t.SizeBytes), mib(t.UsedBytes), when(t.BuiltAt))
		}
	})
}

// mib formats a byte count in MiB.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func runTemplateBuild(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("template build", "NAME",
		"Build the template NAME (admin key only). Progress goes to stderr as it\n"+
			"comes: on a terminal, the current step on one line; else every line of\n"+
			"the build's log. The template's name is printed on stdout when it is built.")
	noProgress := fs.Bool("no-progress", false, "print every line of the build's log on stderr, even on a terminal")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	var log io.Writer = c.stderr
	p := c.progress(*noProgress, "template build "+rest[0], -1, false)
	if p != nil {
		log = statusWriter{p}
	}
	t, err := cl.BuildTemplate(ctx, rest[0], log)
	p.end(true, "") // the last step stays on the screen, above an error too
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, t.Name)
	return err
}
