package main

import (
	"context"
	"log/slog"
	"time"

	"warren/internal/daemon"
	"warren/internal/sandbox"
)

// runServer is `warren server`: the single-node daemon (control plane and
// node in one process, SQLite metadata, local disks). It serves until ctx
// ends (SIGINT or SIGTERM) and then returns nil: its sandboxes keep running
// and the next start adopts them.
func runServer(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("server", "[flags]", "Run the warren server: the API, the sandbox manager and the vm and container runtimes.")
	dataDir := fs.String("data-dir", daemon.DefaultDataDir, "directory for the database, keys, templates and sandbox disks")
	listen := fs.String("listen", "127.0.0.1:7777", "address of the HTTP API")
	agent := fs.String("agent", "", "path of the static guest agent (default: warren-agent beside this binary)")
	tpl := fs.String("template", "default", "template to build at start if missing (empty: none)")
	ttl := fs.Duration("default-timeout", 15*time.Minute, "time to live of a sandbox created without a timeout")
	warm := fs.Int("warm", 2, "sandbox inits kept started ahead of time, for fast creates (each costs about 2 MiB)")
	blobs := fs.String("blob-store", "", "where snapshots are stored: a directory, file:///dir, or\ns3://bucket?endpoint=URL&region=R&use_path_style=true&prefix=P with AWS_ACCESS_KEY_ID\nand AWS_SECRET_ACCESS_KEY in the environment (default: blobs in the data dir)")
	require := fs.String("require-isolation", "", "refuse sandboxes weaker than this isolation: vm or container (default: none)")
	debug := fs.Bool("debug", false, "log debug messages")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	cfg := sandbox.DefaultConfig()
	cfg.DefaultTTL = *ttl
	cfg.RequireIsolation = *require
	err := daemon.Run(ctx, daemon.Options{
		DataDir:        *dataDir,
		Listen:         *listen,
		AgentBinary:    *agent,
		EnsureTemplate: *tpl,
		Warm:           *warm,
		BlobStore:      *blobs,
		Sandbox:        cfg,
		Log:            slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})),
		Out:            c.stdout,
	})
	if err != nil && ctx.Err() != nil {
		// Stopped by a signal while starting (e.g. during a template build).
		return nil
	}
	return err
}
