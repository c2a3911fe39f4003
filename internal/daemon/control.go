package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"warren/internal/console"
	"warren/internal/control"
	"warren/internal/fleet"
	"warren/internal/metrics"
	"warren/internal/pki"
	"warren/internal/sandbox"
	"warren/internal/secrets"
	"warren/internal/server"
	"warren/internal/store"
)

// ControlOptions configure a control replica of a fleet.
type ControlOptions struct {
	// DataDir holds the replica's admin key (admin.key).
	DataDir string
	// Database is the fleet's metadata store, a postgres:// URL.
	Database string
	// Listen is the address of the API the fleet's users call.
	Listen string
	// Member is the replica's certificate from the fleet's CA.
	Member *pki.Member
	// SecretsKey is the file of the key tenants' secrets are sealed with,
	// the same on every replica (or $WARREN_SECRETS_KEY); "" with no
	// such variable: the replica keeps no secrets.
	SecretsKey string
	// FleetListen is the address nodes resolve their sandboxes' secrets
	// at (mutual TLS, nodes only); "": nowhere.
	FleetListen   string
	Lease         fleet.Config
	PreviewDomain string
	Server        server.Options
	Log           *slog.Logger
	Out           io.Writer
	Ready         func(addr string)
}

// RunControl runs a control replica until ctx ends: the fleet's API, which
// sends each request on to the node that must answer it (package control),
// and the directory that places sandboxes and fences nodes that stopped
// heartbeating (package fleet). It holds no state of its own: any number
// of replicas may serve one fleet behind any load balancer.
func RunControl(ctx context.Context, o ControlOptions) error {
	log := o.Log
	if o.Out == nil {
		o.Out = io.Discard
	}
	if err := o.Lease.Check(); err != nil {
		return err
	}
	if o.Member.ID.Role != pki.Control {
		return fmt.Errorf("the fleet certificate names %s, not a control replica: make one with warren fleet cert --role control", o.Member.ID)
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := store.Open(ctx, o.Database)
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath := filepath.Join(o.DataDir, "admin.key")
	key, created, err := st.EnsureAdminKey(ctx, keyPath)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	}
	if created {
		fmt.Fprintf(o.Out, "admin API key (also in %s): %s\n", keyPath, key)
	}
	o.Server.PreviewDomain = o.PreviewDomain
	o.Server.Requests, o.Server.Quotas = Requests(st), Quotas(st)
	if o.SecretsKey != "" || os.Getenv(secrets.KeyEnv) != "" {
		box, err := secrets.LoadKey(o.SecretsKey, false)
		if err != nil {
			return err
		}
		vault := secrets.NewVault(st, box)
		o.Server.Secrets = vault
		if o.FleetListen != "" {
			stop, err := serveNodes(ctx, o.FleetListen, o.Member, vault.FleetHandler(subsystem(log, "secrets")))
			if err != nil {
				return err
			}
			defer stop()
		}
	} else if o.FleetListen != "" {
		return errors.New("--fleet-listen serves the fleet's secrets to nodes: it needs --secrets-key")
	}
	o.Server.Fleet = Fleet(st)
	o.Server.Console = console.New()
	reg := metrics.New()
	o.Server.Metrics = reg
	// The replica's server is its middleware, its key check and its error
	// answers: every route is a node's.
	srv := server.New(nil, nil, Keys(st), subsystem(log, "api"), o.Server)
	remote := func(node, addr string) http.Handler {
		return control.Remote(o.Member, node, addr, subsystem(log, "control"), srv.WriteError)
	}
	defaults := sandbox.DefaultConfig()
	dir, err := fleet.NewDirectory(ctx, st, remote, nil, o.Lease,
		fleet.DirectoryConfig{DefaultCPUs: defaults.DefaultCPUs, DefaultMemoryMB: defaults.DefaultMemoryMB}, subsystem(log, "fleet"))
	if err != nil {
		return err
	}
	dir.RegisterMetrics(reg)
	go dir.Run(ctx)
	uploads, err := uploadDir(o.DataDir)
	if err != nil {
		return err
	}
	hs := srv.HTTPServer(front(srv, dir, o.Server.MaxBodyBytes, uploads, subsystem(log, "e2b")), slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ln = srv.Limit(ln)
	fmt.Fprintf(o.Out, "warren %s control replica %s serving on http://%s\n", Version, o.Member.ID.Name, ln.Addr())
	log.Info("serving", "addr", ln.Addr().String(), "replica", o.Member.ID.Name)
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	return serve(ctx, hs, ln)
}

// serveNodes serves h to the fleet's nodes at addr, over mutual TLS, until
// ctx ends or stop is called.
func serveNodes(ctx context.Context, addr string, m *pki.Member, h http.Handler) (stop func(), _ error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fleet listen: %w", err)
	}
	hs := &http.Server{Handler: h, TLSConfig: m.ServerConfig(pki.Node), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: time.Minute}
	go hs.ServeTLS(ln, "", "")
	return func() { hs.Close() }, nil
}
