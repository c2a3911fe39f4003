package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"warren/api"
)

// runPreview is `warren preview`: show, or change, how a sandbox's ports
// are reached on the server's preview host names.
func runPreview(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("preview", "[flags] ID",
		"Show how the sandbox ID's ports are reached on preview host names: whether anyone may\n"+
			"(public) or only with its access token, the token, and the URL with {port} for the\n"+
			"port (none when the server has no --preview-domain). With flags, change it first.")
	public := fs.Bool("public", false, "let anyone reach its ports on its preview hosts")
	private := fs.Bool("private", false, "ask for its access token again")
	rotate := fs.Bool("rotate", false, "replace its access token (the old one stops working)")
	asJSON := fs.Bool("json", false, "print the Preview object as JSON")
	cl, rest, err := connect(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *public && *private {
		return badUsage(fs, "--public and --private exclude each other")
	}
	var p *api.Preview
	if *public || *private || *rotate {
		req := api.SetPreviewRequest{RotateToken: *rotate}
		if *public || *private {
			req.Public = public
		}
		p, err = cl.SetPreview(ctx, rest[0], req)
	} else {
		p, err = cl.Preview(ctx, rest[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(c.stdout, p)
	}
	access := "private (the token is needed)"
	if p.Public {
		access = "public"
	}
	tmpl := "none: the server has no preview domain (use warren port-url)"
	if p.URL != nil {
		tmpl = *p.URL
	}
	_, err = fmt.Fprintf(c.stdout, "access: %s\ntoken:  %s\nurl:    %s\n", access, p.Token, tmpl)
	return err
}

// runPortURL is `warren port-url`: the URL that opens a sandbox's port.
func runPortURL(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("port-url", "[flags] ID PORT",
		"Print the URL of the sandbox ID's port PORT on its preview host: with its access token\n"+
			"(?warren_token=…: a browser is redirected without it and keeps a cookie) unless its\n"+
			"previews are public. Without a preview domain on the server, print the API's URL of\n"+
			"the port, which needs the API key (Authorization: Bearer).")
	noToken := fs.Bool("no-token", false, "leave the access token out of a private preview's URL")
	cl, rest, err := connect(fs, args, 2, 2)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != rest[1] {
		return badUsage(fs, fmt.Sprintf("bad port %q: want a number from 1 to 65535", rest[1]))
	}
	p, err := cl.Preview(ctx, rest[0])
	if err != nil {
		return err
	}
	u := p.PortURL(port)
	switch {
	case u == "":
		u = cl.PortURL(rest[0], port, "/")
	case !p.Public && !*noToken:
		u += "?warren_token=" + url.QueryEscape(p.Token)
	}
	_, err = fmt.Fprintln(c.stdout, u)
	return err
}
