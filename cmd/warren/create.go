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
	sf := addSandboxFlags(fs, &req.SandboxSpec)
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if err := sf.fill(fs, &req.SandboxSpec); err != nil {
		return err
	}
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

// sandboxFlags are the flags of the sandboxes create and restore start
// that need reading after the parse.
type sandboxFlags struct {
	ttl, checkpoint   *time.Duration
	idle, pausedTTL   *time.Duration
	env, meta, labels kvFlag
	net               *networkFlags
}

// addSandboxFlags defines the flags create and restore share on fs, the
// simple ones straight into spec's fields.
func addSandboxFlags(fs *flag.FlagSet, spec *api.SandboxSpec) *sandboxFlags {
	fs.StringVar(&spec.Runtime, "runtime", "", "vm, container, or auto for the strongest available (default auto; auto never picks a vm under tcg emulation)")
	fs.Float64Var(&spec.CPUs, "cpus", 0, "CPUs, fractions allowed (default: the server's)")
	fs.Int64Var(&spec.MemoryMB, "memory", 0, "memory limit in `MB`")
	fs.Int64Var(&spec.Pids, "pids", 0, "process limit")
	fs.Int64Var(&spec.WorkspaceMB, "workspace", 0, "add an empty workspace disk of this many `MB`, mounted at /workspace")
	fs.StringVar(&spec.Region, "region", "", "start in this region of a fleet (default: any)")
	fs.StringVar(&spec.Persistence, "persistence", "", "how the root disk persists: snapshot (what snapshots save) or always (every write\ngoes back to the node's tiers; an fsync returns once durable; a restore starts at once)\n(default snapshot)")
	sf := &sandboxFlags{env: kvFlag{}, meta: kvFlag{}, labels: kvFlag{}}
	sf.ttl = fs.Duration("timeout", 0, "delete the sandbox after this long, e.g. 30m (default: the server's)")
	sf.checkpoint = fs.Duration("checkpoint-every", 0, "checkpoint the root disk this often, e.g. 5m: in a fleet the sandbox comes back\non another node from its last checkpoint when its node is lost (default: never)")
	fs.StringVar(&spec.OnTimeout, "on-timeout", "", "what the timeout (and -idle-timeout) does: delete, or pause (to wake later with\nits files, and with its processes in a vm or gvisor sandbox) (default delete)")
	sf.idle = fs.Duration("idle-timeout", 0, "do what -on-timeout says once nothing used the sandbox (exec, files, terminal,\nits ports) for this long, e.g. 10m (default: never)")
	sf.pausedTTL = fs.Duration("paused-ttl", 0, "delete the sandbox once it has been paused this long (default: the server's)")
	fs.BoolVar(&spec.AutoResume, "auto-resume", false, "wake the sandbox when paused for any call that needs it running (exec, files,\nterminal, its ports)")
	fs.Var(sf.env, "env", "set `K=V` in the environment of every command (repeatable)")
	fs.Var(sf.meta, "meta", "attach the metadata `K=V` (repeatable)")
	fs.Var(sf.labels, "node-label", "start on a node of the fleet with the label `K=V` (repeatable)")
	sf.net = addNetworkFlags(fs)
	return sf
}

// fill sets spec's fields as the parsed flags say: the timeout, the
// checkpoint period, the idle timeout and the paused TTL in whole seconds
// (rounded up), env, metadata and node labels (nil when empty), the
// egress policy.
func (sf *sandboxFlags) fill(fs *flag.FlagSet, spec *api.SandboxSpec) error {
	if *sf.ttl < 0 {
		return badUsage(fs, "negative -timeout")
	}
	if *sf.checkpoint < 0 {
		return badUsage(fs, "negative -checkpoint-every")
	}
	if *sf.idle < 0 || *sf.pausedTTL < 0 {
		return badUsage(fs, "negative -idle-timeout or -paused-ttl")
	}
	spec.IdleTimeoutSeconds = int64((*sf.idle + time.Second - 1) / time.Second)
	spec.PausedTTLSeconds = int64((*sf.pausedTTL + time.Second - 1) / time.Second)
	spec.TimeoutSeconds = int64((*sf.ttl + time.Second - 1) / time.Second)
	spec.CheckpointEverySeconds = int64((*sf.checkpoint + time.Second - 1) / time.Second)
	spec.Env, spec.Metadata, spec.NodeLabels = sf.env.orNil(), sf.meta.orNil(), sf.labels.orNil()
	spec.Network = sf.net.policy()
	return nil
}
