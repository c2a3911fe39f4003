package main

import (
	"context"
	"flag"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"warren/internal/daemon"
	"warren/internal/network"
	"warren/internal/sandbox"
	"warren/internal/server"
)

// runServer is `warren server`: the single machine's daemon, a fleet of
// one (control plane and node in one process, SQLite metadata, local
// disks). It serves until ctx ends (SIGINT or SIGTERM) and then returns
// nil: its sandboxes keep running and the next start adopts them.
func runServer(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("server", "[flags]", "Run the warren server: the API, the sandbox manager and the vm and container runtimes.")
	opts := c.daemonFlags(fs, "127.0.0.1:7777", "address of the HTTP API")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	o, err := opts()
	if err != nil {
		return err
	}
	return runDaemon(ctx, o)
}

// runDaemon runs the daemon until ctx ends.
func runDaemon(ctx context.Context, o daemon.Options) error {
	err := daemon.Run(ctx, o)
	if err != nil && ctx.Err() != nil {
		// Stopped by a signal while starting (e.g. during a template build).
		return nil
	}
	return err
}

// daemonFlags defines the flags of a node's daemon (warren server, warren
// node) on fs, and returns what reads them, once parsed, into its options.
func (c *cli) daemonFlags(fs *flag.FlagSet, listenDefault, listenUsage string) func() (daemon.Options, error) {
	dataDir := fs.String("data-dir", daemon.DefaultDataDir, "directory for the database, keys, templates and sandbox disks")
	database := fs.String("database", "", "the metadata store: a postgres:// URL (a fleet's), or a SQLite file (default: warren.db in the data dir)")
	listen := fs.String("listen", listenDefault, listenUsage)
	agent := fs.String("agent", "", "path of the static guest agent (default: warren-agent beside this binary)")
	tpl := fs.String("template", "default", "template to build at start if missing (empty: none)")
	rootfsCache := fs.String("rootfs-cache", "", "directory where templates' installed root filesystems are cached, for the next build\nof the same packages; servers on one host may share one (default: in the data dir)")
	ttl := fs.Duration("default-timeout", 15*time.Minute, "time to live of a sandbox created without a timeout")
	warm := fs.Int("warm", 2, "sandbox inits kept started ahead of time, for fast creates (each costs about 2 MiB)")
	spill := fs.Duration("pause-spill-after", daemon.DefaultPauseSpillAfter, "how long a paused gvisor sandbox keeps its memory, frozen (a resume then takes tens of\nmilliseconds), before it is saved to disk and released (0: at once)")
	blobs := fs.String("blob-store", "", "where snapshots are stored: a directory, file:///dir, or\ns3://bucket?endpoint=URL&region=R&use_path_style=true&prefix=P with AWS_ACCESS_KEY_ID\nand AWS_SECRET_ACCESS_KEY in the environment (default: blobs in the data dir)")
	cluster := fs.String("cluster-store", "", "the in-cluster tier of always-on disks, like --blob-store: a flush in a sandbox returns\nonce its data is there, and object storage follows within --max-lag (default: none; the\nblob store then plays both roles)")
	maxLag := fs.Duration("max-lag", 30*time.Second, "how far object storage may be behind the cluster store for always-on disks")
	require := fs.String("require-isolation", "", "refuse sandboxes weaker than this isolation: vm, gvisor or container (default: none)")
	registries := fs.String("registry-allow", "", "comma-separated registries (HOST or HOST:PORT) templates' images may be pulled from\nalthough they are at a loopback or private address (default: public addresses only)")
	noNet := fs.Bool("no-network", false, "give sandboxes loopback only (no router, no egress, no exposed ports)")
	pool := fs.String("net-pool", network.DefaultPool.String(), "IPv4 pool of the sandboxes' router links, a /30 each; two servers on one host\nneed two pools. \"auto\": a free /16 of 10.202.0.0-10.250.0.0, recorded in the data dir")
	mbps := fs.Int("net-mbps", network.DefaultMbps, "bandwidth limit of each sandbox, each way, in megabits per second")
	connRate := fs.Uint("net-conn-rate", network.DefaultConnRate, "new connections per second each sandbox may open")
	netWarm := fs.Int("net-warm", network.DefaultWarm, "sandbox routers kept ready, for fast creates")
	egressTrust := fs.String("egress-trust", "", "PEM file of CA certificates the egress interceptor trusts, besides the host's,\nwhen it connects to a destination that egress rules name (default: none)")
	dns := fs.String("dns-upstream", "", "comma-separated DNS servers (ip:port) the sandboxes' resolver asks\n(default: the nameservers of /etc/resolv.conf)")
	preview := fs.String("preview-domain", "", "serve each sandbox's ports on PORT-ID.DOMAIN (wildcard DNS to this server):\na domain (https preview URLs) or a URL such as http://localhost:7777 (default: none)")
	execOut := fs.Int64("exec-output-max", server.DefaultMaxOutputBytes, "bytes of each of stdout and stderr a non-streaming exec keeps (the rest is dropped, and the result says truncated)")
	maxConns := fs.Int("max-conns", server.DefaultMaxConns, "API connections open at once (beyond it, new ones wait)")
	maxConnsIP := fs.Int("max-conns-per-ip", server.DefaultMaxConnsPerIP, "API connections without a valid key one client (an IPv4 address, an IPv6 /64)\nmay hold, and as many again on probation in the quarter kept for keyed callers")
	adm := sandbox.DefaultAdmission
	fs.Float64Var(&adm.CPUOvercommit, "cpu-overcommit", adm.CPUOvercommit, "vCPUs the node may promise per CPU it has")
	fs.Float64Var(&adm.MemoryOvercommit, "memory-overcommit", adm.MemoryOvercommit, "memory the node may promise per MiB it has (after the reserve);\nall sandboxes together still never get more than it has")
	fs.Float64Var(&adm.DiskOvercommit, "disk-overcommit", adm.DiskOvercommit, "sandbox disk (sparse) the node may promise per MiB of its data directory's filesystem")
	fs.Int64Var(&adm.ReserveMemoryMB, "reserve-memory-mb", 0, "memory kept for the host and the daemon (default: 1 GiB or a tenth of it, the larger)")
	fs.Int64Var(&adm.ReserveDiskMB, "reserve-disk-mb", 0, "free disk below which creates, restores and snapshots are refused\n(default: a twentieth of the filesystem, between 2 and 10 GiB)")
	fs.IntVar(&adm.Tenant.Sandboxes, "tenant-max-sandboxes", adm.Tenant.Sandboxes, "sandboxes one tenant may have at once on this node")
	fs.Float64Var(&adm.TenantShare, "tenant-share", adm.TenantShare, "part of the node's vCPUs, memory and disk one tenant may hold where no\n--tenant-max-* bound is set (1: the whole node; the admin key's tenant is not bounded by it)")
	fs.Float64Var(&adm.Tenant.CPUs, "tenant-max-cpus", 0, "vCPUs one tenant may hold on this node (0: --tenant-share of the node's)")
	fs.Int64Var(&adm.Tenant.MemoryMB, "tenant-max-memory-mb", 0, "memory one tenant may hold on this node (0: --tenant-share of the node's)")
	fs.Int64Var(&adm.Tenant.DiskMB, "tenant-max-disk-mb", 0, "disk one tenant may hold on this node (0: --tenant-share of the node's)")
	debug := fs.Bool("debug", false, "log debug messages")
	return func() (daemon.Options, error) {
		if *preview != "" {
			if err := server.CheckPreviewDomain(*preview); err != nil {
				return daemon.Options{}, badUsage(fs, "--preview-domain: "+err.Error())
			}
		}
		netCfg := network.Config{Mbps: *mbps, ConnRate: uint32(*connRate), Warm: *netWarm}
		var err error
		autoPool := *pool == "auto"
		if !autoPool {
			if netCfg.Pool, err = netip.ParsePrefix(*pool); err != nil {
				return daemon.Options{}, badUsage(fs, "--net-pool: "+err.Error()+` (want a prefix such as 10.202.0.0/16, or "auto")`)
			}
		}
		if *dns != "" {
			for _, a := range strings.Split(*dns, ",") {
				ap, err := netip.ParseAddrPort(strings.TrimSpace(a))
				if err != nil {
					return daemon.Options{}, badUsage(fs, "--dns-upstream: "+err.Error())
				}
				netCfg.Upstreams = append(netCfg.Upstreams, ap)
			}
		}
		level := slog.LevelInfo
		if *debug {
			level = slog.LevelDebug
		}
		cfg := sandbox.DefaultConfig()
		cfg.DefaultTTL = *ttl
		cfg.RequireIsolation = *require
		var registryAllow []string
		if *registries != "" {
			registryAllow = strings.Split(*registries, ",")
		}
		cfg.Admission = adm
		return daemon.Options{
			DataDir:         *dataDir,
			Database:        *database,
			Listen:          *listen,
			AgentBinary:     *agent,
			EnsureTemplate:  *tpl,
			RootfsCache:     *rootfsCache,
			Warm:            *warm,
			PauseSpillAfter: *spill,
			RegistryAllow:   registryAllow,
			BlobStore:       *blobs,
			ClusterStore:    *cluster,
			MaxLag:          *maxLag,
			PreviewDomain:   *preview,
			Network:         netCfg,
			AutoNetPool:     autoPool,
			EgressTrust:     *egressTrust,
			Server: server.Options{
				MaxOutputBytes: *execOut,
				Conns:          server.ListenerLimits{Total: *maxConns, PerIP: *maxConnsIP},
			},
			NoNetwork: *noNet,
			Sandbox:   cfg,
			Log:       slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})),
			Out:       c.stdout,
		}, nil
	}
}
