package main

import (
	"context"
	"flag"
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
	fs.Int64Var(&req.DiskMB, "disk", 0, "root disk size in `MB`")
	sf := addSandboxFlags(fs, &req.Runtime, &req.CPUs, &req.MemoryMB, &req.Pids, &req.WorkspaceMB)
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	var err error
	if req.TimeoutSeconds, req.Env, req.Metadata, err = sf.values(fs); err != nil {
		return err
	}
	req.Network = sf.net.policy()
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

// sandboxFlags are the flags of the sandboxes create and restore start.
type sandboxFlags struct {
	ttl       *time.Duration
	env, meta kvFlag
	net       *networkFlags
}

// addSandboxFlags defines the flags create and restore share on fs, the
// simple ones straight into the request's fields.
func addSandboxFlags(fs *flag.FlagSet, runtime *string, cpus *float64, memoryMB, pids, workspaceMB *int64) *sandboxFlags {
	fs.StringVar(runtime, "runtime", "", "vm, container, or auto for the strongest available (default auto; auto never picks a vm under tcg emulation)")
	fs.Float64Var(cpus, "cpus", 0, "CPUs, fractions allowed (default: the server's)")
	fs.Int64Var(memoryMB, "memory", 0, "memory limit in `MB`")
	fs.Int64Var(pids, "pids", 0, "process limit")
	fs.Int64Var(workspaceMB, "workspace", 0, "add an empty workspace disk of this many `MB`, mounted at /workspace")
	sf := &sandboxFlags{env: kvFlag{}, meta: kvFlag{}}
	sf.ttl = fs.Duration("timeout", 0, "delete the sandbox after this long, e.g. 30m (default: the server's)")
	fs.Var(sf.env, "env", "set `K=V` in the environment of every command (repeatable)")
	fs.Var(sf.meta, "meta", "attach the metadata `K=V` (repeatable)")
	sf.net = addNetworkFlags(fs)
	return sf
}

// values returns the parsed flags as the request wants them: the timeout in
// whole seconds (rounded up), env and metadata (nil when empty).
func (sf *sandboxFlags) values(fs *flag.FlagSet) (int64, map[string]string, map[string]string, error) {
	if *sf.ttl < 0 {
		return 0, nil, nil, badUsage(fs, "negative -timeout")
	}
	return int64((*sf.ttl + time.Second - 1) / time.Second), sf.env.orNil(), sf.meta.orNil(), nil
}
