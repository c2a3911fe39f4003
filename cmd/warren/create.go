package main

import (
	"context"
	"fmt"
	"time"

	"warren/api"
	"warren/client"
)

func runCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("create", "[flags]",
		"Create a sandbox and print its ID, alone, on stdout once it runs.")
	var req api.CreateSandboxRequest
	fs.StringVar(&req.Template, "template", "", "the template to start from (default: the server's default)")
	fs.StringVar(&req.Runtime, "runtime", "", "container, or auto for the strongest available (default auto)")
	fs.Float64Var(&req.CPUs, "cpus", 0, "CPUs, fractions allowed (default: the server's)")
	fs.Int64Var(&req.MemoryMB, "memory", 0, "memory limit in `MB`")
	fs.Int64Var(&req.Pids, "pids", 0, "process limit")
	fs.Int64Var(&req.DiskMB, "disk", 0, "root disk size in `MB`")
	fs.Int64Var(&req.WorkspaceMB, "workspace", 0, "add an empty workspace disk of this many `MB`, mounted at /workspace")
	ttl := fs.Duration("timeout", 0, "delete the sandbox after this long, e.g. 30m (default: the server's)")
	env, meta := kvFlag{}, kvFlag{}
	fs.Var(env, "env", "set `K=V` in the environment of every command (repeatable)")
	fs.Var(meta, "meta", "attach the metadata `K=V` (repeatable)")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *ttl < 0 {
		return badUsage(fs, "negative -timeout")
	}
	req.TimeoutSeconds = int64((*ttl + time.Second - 1) / time.Second)
	req.Env, req.Metadata = env.orNil(), meta.orNil()
	cl, err := client.FromEnv()
	if err != nil {
		return err
	}
	sb, err := cl.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, sb.ID)
	return err
}
