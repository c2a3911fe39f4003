//go:build linux

// Package daemon wires warren's single-node daemon together in one place:
// the metadata store, the disk pool, cgroups, runtimes, the template catalog,
// the sandbox manager and the HTTP server. cmd/warren stays thin and every
// subsystem stays unaware of the others' construction.
package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/blob"
	"warren/internal/blob/blobspec"
	"warren/internal/blockserver"
	"warren/internal/cgroup"
	"warren/internal/console"
	"warren/internal/control"
	"warren/internal/disk"
	"warren/internal/e2b"
	"warren/internal/metrics"
	"warren/internal/network"
	"warren/internal/node"
	"warren/internal/pki"
	"warren/internal/runtime"
	"warren/internal/runtime/container"
	"warren/internal/runtime/gvisor"
	"warren/internal/runtime/vm"
	"warren/internal/sandbox"
	"warren/internal/secrets"
	"warren/internal/server"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
	"warren/internal/tenanttpl"
)

// Version is warren's version, shown in node info.
const Version = "0.1.0"

// Options configure the daemon.
type Options struct {
	DataDir string
	Listen  string
	// NodeID names this node in the fleet (default DefaultNodeID).
	NodeID string
	// Database is the metadata store (store.Open): "" for warren.db in the
	// data directory; a fleet's is a postgres:// URL.
	Database string
	// Fleet, when set, runs the daemon as a node of a fleet (docs/FLEET.md)
	// rather than a single machine: its API serves the fleet's control
	// replicas only, on Fleet.Listen, and Listen is not used.
	Fleet *FleetNode
	// AgentBinary is the static guest agent; default: warren-agent beside
	// this executable.
	AgentBinary string
	// EnsureTemplate, when set, builds this template at start if it is
	// missing, before the API listens.
	EnsureTemplate string
	// RootfsCache is where templates' installed root filesystems are
	// cached (template.Options.RootfsCache); "" for the data directory.
	RootfsCache string
	// Warm is how many sandbox inits the container runtime keeps started
	// ahead of time.
	Warm int
	// PauseSpillAfter is how long a paused gvisor sandbox keeps its memory
	// before it is saved to disk (gvisor.Options.SpillAfter).
	PauseSpillAfter time.Duration
	// BlobStore is where snapshots are stored: a directory path or
	// file:// URL, or an s3:// URL (credentials from the AWS_* environment).
	// Default: the directory blobs in the data directory.
	BlobStore string
	// ClusterStore is the in-cluster tier of always-on disks, like
	// BlobStore; empty: none (the blob store plays both roles). MaxLag
	// bounds how far the blob store may be behind it.
	ClusterStore string
	MaxLag       time.Duration
	// Network configures sandbox networking; NoNetwork turns it off (every
	// sandbox then has loopback only).
	Network   network.Config
	NoNetwork bool
	// AutoNetPool picks a free network pool at first start and records it
	// in the data directory for the next (network.Config.PoolFile).
	AutoNetPool bool
	// EgressTrust is a PEM file of CA certificates the egress interceptor
	// trusts besides the host's (network.Config.EgressRoots); "" for none.
	EgressTrust string
	Sandbox     sandbox.Config
	Snapshot    snapshot.Config
	// RegistryAllow are the registries (HOST or HOST:PORT) a template's
	// image may come from although they are not at a public address.
	RegistryAllow []string
	// PreviewDomain serves sandboxes' ports on PORT-ID.<domain> (see
	// server.Options.PreviewDomain); "" for none.
	PreviewDomain string
	// Server tunes the API server (limits, timeouts); PreviewDomain above
	// is its PreviewDomain.
	Server server.Options
	Log    *slog.Logger
	// Out receives the first-start admin key and the listening address.
	Out io.Writer
	// Ready, when set, is called with the bound address once the API serves.
	Ready func(addr string)
}

// DefaultNodeID is the name of a single machine's one node.
const DefaultNodeID = "local"

// DefaultPauseSpillAfter is Options.PauseSpillAfter's default: a pause
// for a moment (a harness between steps) costs no disk, a long one no
// memory.
const DefaultPauseSpillAfter = 30 * time.Second

// DefaultDataDir is where a root daemon keeps its state by default.
const DefaultDataDir = "/var/lib/warren"

// Run starts the daemon and serves until ctx ends. Sandboxes keep running
// after it returns; the next Run adopts them.
func Run(ctx context.Context, o Options) error {
	// Whatever started the daemon may have left it descriptors without
	// close-on-exec; none may reach a sandbox's init or a VMM, which get
	// only the descriptors their runtime hands them.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close-on-exec for inherited descriptors: %w", err)
	}
	log := o.Log
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	unlock, err := lockDataDir(o.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	agentBin, err := agentBinary(o.AgentBinary)
	if err != nil {
		return err
	}

	st, err := store.Open(ctx, cmp.Or(o.Database, filepath.Join(o.DataDir, "warren.db")))
	if err != nil {
		return err
	}
	defer st.Close()
	if o.NodeID == "" {
		o.NodeID = DefaultNodeID
	}
	// Before anything reads them: a single machine's records from before
	// the fleet are this node's.
	if n, err := st.ClaimUnowned(ctx, o.NodeID); err != nil {
		return err
	} else if n > 0 {
		log.Info("sandboxes recorded before the fleet are this node's", "count", n, "node", o.NodeID)
	}
	keyPath := filepath.Join(o.DataDir, "admin.key")
	key, created, err := st.EnsureAdminKey(ctx, keyPath)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	}
	if created {
		fmt.Fprintf(o.Out, "admin API key (also in %s): %s\n", keyPath, key)
	}

	pool, err := disk.Open(ctx, o.DataDir, subsystem(log, "disk"), disk.Options{})
	if err != nil {
		return fmt.Errorf("disk pool: %w", err)
	}
	defer pool.Close()
	if pool.Mode() == disk.CloneCopy {
		log.Warn("no reflink filesystem: every sandbox disk is a full copy (slow create)")
	}
	cg, err := cgroup.Detect(log) // names itself, as network and snapshot do
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	host, err := hostCapacity(o.DataDir)
	if err != nil {
		return err
	}
	// Every sandbox of the host together stays below what the host keeps
	// for itself, whatever the admission's overcommit.
	memMB, pids := sandbox.HostShare(host, o.Sandbox.Admission)
	if err := cg.LimitAll(cgroup.Limits{MemoryBytes: memMB << 20, Pids: pids}); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	ctr, err := container.New(subsystem(log, "container"), cg, agentBin, container.Options{
		Warm:    o.Warm,
		WarmDir: filepath.Join(o.DataDir, "warm"),
	})
	if err != nil {
		return fmt.Errorf("container runtime: %w", err)
	}
	defer ctr.Close()
	// Runtimes strongest first: vm, gvisor, container. A node that cannot
	// run one (no guest kernel or QEMU; no runsc) still serves the others;
	// a runtime whose Available fails is listed with the reason.
	gv, err := gvisor.New(subsystem(log, "gvisor"), cg, agentBin, gvisor.Options{Dir: filepath.Join(o.DataDir, "gvisor"), SpillAfter: o.PauseSpillAfter})
	if err != nil {
		return fmt.Errorf("gvisor runtime: %w", err)
	}
	runtimes := []runtime.Runtime{gv, ctr}
	vmRT, err := vm.New(subsystem(log, "vm"), cg, agentBin, vm.Options{Dir: filepath.Join(o.DataDir, "vm")})
	if err != nil {
		log.Warn("vm runtime disabled", "err", err)
	} else {
		runtimes = []runtime.Runtime{vmRT, gv, ctr}
	}
	switch o.Sandbox.RequireIsolation {
	case "", api.IsolationContainer, api.IsolationGVisor, api.IsolationVM:
	default:
		return fmt.Errorf("require isolation: %q is none of %q, %q and %q", o.Sandbox.RequireIsolation, api.IsolationVM, api.IsolationGVisor, api.IsolationContainer)
	}
	templates, err := template.NewCatalog(pool, subsystem(log, "template"), template.Options{AgentBinary: agentBin, RootfsCache: o.RootfsCache})
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	if o.EnsureTemplate != "" {
		if _, err := templates.Ensure(ctx, o.EnsureTemplate, os.Stderr); err != nil {
			return fmt.Errorf("template %s: %w", o.EnsureTemplate, err)
		}
	}

	reg := metrics.New()
	blobs, err := openBlobStore(ctx, o.BlobStore, o.DataDir, subsystem(log, "blob"), reg)
	if err != nil {
		return err
	}
	defer blobs.Close()
	o.Snapshot.Node, o.Snapshot.Metrics = o.NodeID, reg
	snaps, err := snapshot.Open(ctx, log, st, pool, blobs, o.Snapshot)
	if err != nil {
		return err
	}
	defer snaps.Close()

	var netNode *network.Node
	if o.NoNetwork {
		log.Warn("sandbox networking is off: sandboxes have loopback only")
	} else {
		o.Network.Log = log
		if o.AutoNetPool {
			o.Network.PoolFile = filepath.Join(o.DataDir, "net-pool")
		}
		if o.Network.EgressRoots, err = egressRoots(o.EgressTrust); err != nil {
			return err
		}
		if netNode, err = network.New(o.Network); err != nil {
			return fmt.Errorf("sandbox networking (--no-network turns it off): %w", err)
		}
		defer netNode.Close()
	}

	var region string
	var labels map[string]string
	if o.Fleet != nil {
		region, labels = o.Fleet.Region, o.Fleet.Labels
	}
	// A single machine keeps its tenants' secrets; a fleet's control
	// replicas keep the fleet's, and a node asks them.
	var sbSecrets sandbox.Secrets
	switch {
	case o.Fleet == nil:
		box, err := secrets.LoadKey(filepath.Join(o.DataDir, "secrets.key"), true)
		if err != nil {
			return err
		}
		vault := secrets.NewVault(st, box)
		o.Server.Secrets, sbSecrets = vault, vault
	case len(o.Fleet.ControlSecrets) > 0:
		sbSecrets = secrets.NewRemote(o.Fleet.Member, o.Fleet.ControlSecrets)
	}
	mgr, err := sandbox.New(ctx, sandbox.Deps{
		Metrics:   reg,
		Log:       subsystem(log, "sandbox"),
		Store:     st,
		Pool:      pool,
		Templates: templates,
		Snapshots: snaps,
		Runtimes:  runtimes,
		StateDir:  sandboxStateDir(o.DataDir),
		Network:   netNode,
		Secrets:   sbSecrets,
		Host:      host,
		NodeID:    o.NodeID,
		Region:    region,
		Labels:    labels,
		Blocks: blockserver.NewLazy(blockserver.Options{
			DataDir: o.DataDir, BlobStore: o.BlobStore, ClusterStore: o.ClusterStore, MaxLag: o.MaxLag,
			Log: subsystem(log, "blockserver"),
		}),
	}, o.Sandbox)
	if err != nil {
		return err
	}
	defer mgr.Close()
	tpls, err := tenanttpl.New(ctx, tenanttpl.Deps{
		Log: subsystem(log, "template"), Store: st, Snapshots: snaps, Catalog: templates, Sandboxes: mgr,
		Dir: pool.Dir(), NodeID: o.NodeID,
	}, tenanttpl.Config{
		DefaultTemplate: cmp.Or(o.Sandbox.DefaultTemplate, sandbox.DefaultConfig().DefaultTemplate),
		RegistryAllow:   o.RegistryAllow,
	})
	if err != nil {
		return err
	}
	defer tpls.Close()
	// The warm pools, now that the manager has adopted every sandbox of an
	// earlier process (their uid ranges and network slots are taken) and
	// swept the rest.
	ctr.StartWarm()
	if netNode != nil {
		netNode.StartWarm()
	}

	o.Server.PreviewDomain = o.PreviewDomain
	nd := node.New(node.Deps{
		Log:           subsystem(log, "node"),
		Version:       Version,
		Runtimes:      runtimes,
		CloneMode:     pool.Mode().String(),
		CgroupVersion: cg.Version(),
		Templates:     templates,
		Bases:         snaps,
		Sandboxes:     mgr,
		Images:        mgr,
	})
	o.Server.Requests, o.Server.Quotas, o.Server.Events = Requests(st), Quotas(st), Events(st)
	if o.Fleet != nil {
		o.Server.Fleet = Fleet(st)
	}
	o.Server.Pools, o.Server.Templates, o.Server.Metrics, o.Server.NodeID = mgr, tpls, reg, o.NodeID
	o.Server.Console = console.New()
	srv := server.New(mgr, nd, Keys(st), subsystem(log, "api"), o.Server)
	uploads, err := uploadDir(o.DataDir)
	if err != nil {
		return err
	}
	handler, listen, scheme := FleetOfOne(srv, o.Server.MaxBodyBytes, uploads, subsystem(log, "e2b")), o.Listen, "http"
	if o.Fleet != nil {
		// A fleet's node: its API is for the fleet's control replicas
		// only, which the TLS handshake checks; they authenticate tenants.
		handler, listen, scheme = srv.Handler(), o.Fleet.Listen, "https"
	}
	hs := srv.HTTPServer(handler, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if o.Fleet != nil {
		ln = tls.NewListener(ln, o.Fleet.Member.ServerConfig(pki.Control))
		m, err := joinFleet(ctx, st, o, ln.Addr().String(), mgr, nd, snaps)
		if err != nil {
			ln.Close()
			return err
		}
		go m.Run(ctx)
	}
	ln = srv.Limit(ln)
	fmt.Fprintf(o.Out, "warren %s serving on %s://%s (data dir %s, isolation %s)\n", Version, scheme, ln.Addr(), o.DataDir, isolations(runtimes))
	log.Info("serving", "addr", ln.Addr().String(), "clone_mode", pool.Mode().String(), "cgroup_version", cg.Version(),
		"blob_store", blobs.String())
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	return serve(ctx, hs, ln)
}

// serve serves ln with hs until ctx ends, then shuts it down.
func serve(ctx context.Context, hs *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// openBlobStore opens the snapshot blob store named by spec (see
// Options.BlobStore), with retries on every call, and counts the bytes that
// pass through it in reg.
func openBlobStore(ctx context.Context, spec, dataDir string, log *slog.Logger, reg *metrics.Registry) (blob.Store, error) {
	b, err := blobspec.Open(ctx, spec, filepath.Join(dataDir, "blobs"), log)
	if err != nil {
		return nil, err
	}
	c := &blob.Counted{Store: b}
	reg.Gauges([]metrics.Family{{
		Name: "warren_blob_bytes_total", Help: "Bytes of objects this node stored in, and fetched from, its blob store since it started, by direction.",
		Labels: []string{"direction"}, Counter: true,
	}}, func() [][]metrics.Sample {
		stored, fetched := c.Bytes()
		return [][]metrics.Sample{{{Labels: []string{"stored"}, Value: float64(stored)}, {Labels: []string{"fetched"}, Value: float64(fetched)}}}
	})
	return c, nil
}

// lockDataDir makes sure one server at a time uses dataDir: two would
// reconcile each other's sandboxes away. The lock goes with the process, so
// a server killed with -9 does not leave it behind.
func lockDataDir(dataDir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dataDir, "server.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another warren server", dataDir)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	return func() { f.Close() }, nil
}

// sandboxStateDir holds one private directory per sandbox of the node.
func sandboxStateDir(dataDir string) string { return filepath.Join(dataDir, "sandboxes") }

// agentBinary finds the guest agent: the given path, or warren-agent beside
// the running executable.
func agentBinary(path string) (string, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find own binary: %w", err)
		}
		path = filepath.Join(filepath.Dir(self), "warren-agent")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("guest agent binary: %w (scripts/deps.sh builds it into bin/, beside warren; or pass --agent)", err)
	}
	return path, nil
}

// hostCapacity reads what the host has: its CPUs, memory, pid_max, and
// the size of the filesystem holding dataDir.
func hostCapacity(dataDir string) (sandbox.HostCapacity, error) {
	h := sandbox.HostCapacity{CPUs: goruntime.NumCPU()}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return h, fmt.Errorf("host memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return h, fmt.Errorf("host memory: %q: %w", line, err)
			}
			h.MemoryMB = kb >> 10
		}
	}
	if h.MemoryMB == 0 {
		return h, errors.New("host memory: no MemTotal in /proc/meminfo")
	}
	b, err = os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return h, fmt.Errorf("pid_max: %w", err)
	}
	if h.PidMax, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return h, fmt.Errorf("pid_max: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dataDir, &st); err != nil {
		return h, fmt.Errorf("data dir filesystem: %w", err)
	}
	h.DiskMB = int64(st.Blocks) * st.Bsize >> 20
	return h, nil
}

// isolations lists the available runtimes' isolation, strongest first.
func isolations(rts []runtime.Runtime) string {
	var out []string
	for _, rt := range rts {
		if rt.Available() == nil {
			out = append(out, rt.Isolation())
		}
	}
	return strings.Join(out, "; ")
}

// subsystem is the logger of one subsystem: its lines carry
// subsystem=name, and the attributes it adds stay at the top level, so that
// every line about a sandbox has the one key sandbox=ID, whichever
// subsystem wrote it (a slog group would make it disk.sandbox=, vm.sandbox=
// and so on). cgroup, network and snapshot add their subsystem themselves.
func subsystem(log *slog.Logger, name string) *slog.Logger {
	return log.With("subsystem", name)
}

// FleetOfOne is the API of a single machine: the fleet's front over the
// one node of srv, in this process; maxBody is srv's bound on a JSON body
// (0: the default); uploads is where E2B's template uploads wait ("": the
// temporary directory); log takes E2B's API's internal errors.
func FleetOfOne(srv *server.Server, maxBody int64, uploads string, log *slog.Logger) http.Handler {
	return front(srv, control.One(srv.Routes()), maxBody, uploads, log)
}

// uploadDir is where E2B's template uploads wait under dataDir: on its
// disk, never in a tmpfs /tmp, which is memory.
func uploadDir(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "e2b-uploads")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("e2b uploads: %w", err)
	}
	return dir, nil
}

// front is the API served through the front of f, with E2B's APIs in
// front of it (package e2b), srv's middleware around both.
func front(srv *server.Server, f control.Fleet, maxBody int64, uploads string, log *slog.Logger) http.Handler {
	return srv.Wrap(e2b.New(control.NewFront(f, control.Options{
		Routes:  srv.RouteTable(),
		Preview: srv.PreviewSandbox,
		Authenticate: func(r *http.Request) (string, error) {
			k, err := srv.Authenticate(r)
			return k.Tenant, err
		},
		WriteError: srv.WriteError,
		MaxBody:    cmp.Or(maxBody, server.DefaultMaxBodyBytes),
		Local:      srv.Routes(),
	}), e2b.Options{Domain: srv.PreviewHost(), Log: log, Dir: uploads, Tenant: func(r *http.Request) (string, error) {
		k, err := srv.Authenticate(r)
		return k.Tenant, err
	}}))
}
