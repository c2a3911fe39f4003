package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"warren/internal/daemon"
	"warren/internal/fleet"
	"warren/internal/pki"
	"warren/internal/server"
)

// runNodeDaemon is `warren node [flags]`: a fleet's node. It runs the
// sandboxes the fleet's control replicas place on it; its API takes only
// them, over the fleet's mutual TLS.
func runNodeDaemon(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("node", "--node-id ID --database URL --fleet-dir DIR [flags]",
		"Run a node of a warren fleet: the sandbox manager and the vm and container\nruntimes, whose API only the fleet's control replicas reach (mutual TLS with\nthe fleet's certificates, from warren fleet cert). It registers in the\nfleet's database and renews its lease there; a node that cannot renew it\nstops its sandboxes.")
	opts := c.daemonFlags(fs, "0.0.0.0:7778", "address of the node's API (mutual TLS; control replicas only)")
	id := fs.String("node-id", "", "the node's name in the fleet, and of its certificate")
	certs := fs.String("fleet-dir", "", "directory with the node's certificate (ID.pem, ID.key) and the fleet's CA (ca.pem)")
	advertise := fs.String("advertise", "", "host:port control replicas reach the node's API at (default: the address --listen bound)")
	region := fs.String("region", "", "the node's region")
	cluster := fs.String("cluster", "", "the node's cluster in its region")
	labels := fs.String("labels", "", "the node's labels, k=v[,k=v...]")
	controlSecrets := fs.String("control-secrets", "", "comma-separated host:port of the control replicas' --fleet-listen, which resolve the\nsecrets of the node's sandboxes' egress rules (default: none; such rules are refused)")
	lease := leaseFlags(fs)
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	o, err := opts()
	if err != nil {
		return err
	}
	if *id == "" || *certs == "" {
		return badUsage(fs, "--node-id and --fleet-dir are required")
	}
	if o.Database == "" {
		return badUsage(fs, "--database is required: the fleet's postgres:// URL")
	}
	member, err := loadMember(*certs, *id)
	if err != nil {
		return err
	}
	l, err := parseLabels(*labels)
	if err != nil {
		return badUsage(fs, "--labels: "+err.Error())
	}
	timing, err := lease()
	if err != nil {
		return err
	}
	o.NodeID = *id
	o.Fleet = &daemon.FleetNode{Member: member, Listen: o.Listen, Advertise: *advertise, Region: *region, Cluster: *cluster, Labels: l, Lease: timing}
	if *controlSecrets != "" {
		o.Fleet.ControlSecrets = strings.Split(*controlSecrets, ",")
	}
	return runDaemon(ctx, o)
}

// runControl is `warren control`: a control replica of a fleet.
func runControl(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("control", "--name NAME --database URL --fleet-dir DIR [flags]",
		"Run a control replica of a warren fleet: the API users call, which sends each\nrequest on to the node that must answer it, places creates and restores, and\nfences nodes that stop renewing their lease. Replicas keep no state of their\nown: run as many as you like behind any load balancer.")
	name := fs.String("name", "", "the replica's name, and of its certificate")
	dataDir := fs.String("data-dir", "/var/lib/warren-control", "directory for the replica's admin key")
	database := fs.String("database", "", "the fleet's metadata store, a postgres:// URL")
	certs := fs.String("fleet-dir", "", "directory with the replica's certificate (NAME.pem, NAME.key) and the fleet's CA (ca.pem)")
	listen := fs.String("listen", "127.0.0.1:7777", "address of the HTTP API")
	preview := fs.String("preview-domain", "", "serve each sandbox's ports on PORT-ID.DOMAIN (as warren server)")
	fleetListen := fs.String("fleet-listen", "", "address nodes resolve their sandboxes' secrets at (mutual TLS, the fleet's nodes only;\nneeds --secrets-key; default: none)")
	secretsKey := fs.String("secrets-key", "", "file of the key tenants' secrets are sealed with (64 hex digits, the same on\nevery replica; or $WARREN_SECRETS_KEY); without one the fleet keeps no secrets")
	lease := leaseFlags(fs)
	debug := fs.Bool("debug", false, "log debug messages")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *name == "" || *certs == "" || *database == "" {
		return badUsage(fs, "--name, --database and --fleet-dir are required")
	}
	if *preview != "" {
		if err := server.CheckPreviewDomain(*preview); err != nil {
			return badUsage(fs, "--preview-domain: "+err.Error())
		}
	}
	timing, err := lease()
	if err != nil {
		return err
	}
	member, err := loadMember(*certs, *name)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	return daemon.RunControl(ctx, daemon.ControlOptions{
		DataDir: *dataDir, Database: *database, Listen: *listen, Member: member, Lease: timing,
		PreviewDomain: *preview, SecretsKey: *secretsKey, FleetListen: *fleetListen,
		Log: slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})),
		Out: c.stdout,
	})
}

// leaseFlags defines the lease timing flags, and returns what reads them
// once parsed.
func leaseFlags(fs *flag.FlagSet) func() (fleet.Config, error) {
	beat := fs.Duration("heartbeat", time.Second, "how often a node renews its lease")
	lease := fs.Duration("lease", 5*time.Second, "how long a node that cannot renew its lease runs on before it stops its sandboxes")
	fence := fs.Duration("fence-after", 10*time.Second, "how long after its last heartbeat a node is fenced (more than --lease)")
	return func() (fleet.Config, error) {
		c := fleet.Config{Heartbeat: *beat, Lease: *lease, FenceAfter: *fence}
		if err := c.Check(); err != nil {
			return c, badUsage(fs, err.Error())
		}
		return c, nil
	}
}

// loadMember reads the fleet certificate of name from dir.
func loadMember(dir, name string) (*pki.Member, error) {
	read := func(f string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("fleet certificate: %w", err)
		}
		return b, nil
	}
	cert, err := read(name + ".pem")
	if err != nil {
		return nil, err
	}
	key, err := read(name + ".key")
	if err != nil {
		return nil, err
	}
	ca, err := read(caCertFile)
	if err != nil {
		return nil, err
	}
	return pki.LoadMember(cert, key, ca)
}

// parseLabels reads k=v[,k=v...].
func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not k=v", kv)
		}
		out[k] = v
	}
	return out, nil
}
