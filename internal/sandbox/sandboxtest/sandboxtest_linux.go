//go:build linux

// Package sandboxtest gives tests a real sandbox manager that needs no
// root: the manager over the in-process runtime (internal/runtime/inproc:
// each sandbox a real guest agent in the test's process, its processes
// running as the test's user on the host), a SQLite store, a disk pool of
// plain copies, a template of 64 MiB of zeros and a file blob store, all
// in a temporary directory, and tenants' secrets in that store. The sandbox package's lifecycle tests and the
// CLI's tests (over the real API server) run on it.
//
// It isolates nothing: what a sandbox runs, the test's user runs. Tests of
// isolation use the real runtimes (the end-to-end suite).
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	fileblob "warren/internal/blob/file"
	"warren/internal/disk"
	"warren/internal/metrics"
	"warren/internal/runtime"
	"warren/internal/runtime/inproc"
	"warren/internal/sandbox"
	"warren/internal/secrets"
	"warren/internal/snapshot"
	"warren/internal/store"
	"warren/internal/template"
	"warren/internal/tenanttpl"
)

// Harness is a real manager, the parts under it and tenants' templates
// over it.
type Harness struct {
	t testing.TB
	// Deps are the manager's parts; Deps.Store is the store the manager
	// and its API keys live in.
	Deps    sandbox.Deps
	Runtime *inproc.Runtime
	Manager *sandbox.Manager
	// Templates are tenants' templates over Manager.
	Templates *tenanttpl.Templates
	// Metrics is Manager's registry; each manager Restart makes gets its own.
	Metrics *metrics.Registry
	// Secrets are tenants' secrets in the store, under a key of the test's
	// own: the manager's Deps.Secrets, and an API server's Options.Secrets.
	Secrets *secrets.Vault
}

// New builds a Harness whose parts all end with the test.
func New(t testing.TB) *Harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pool, err := disk.Open(ctx, dir, nil, disk.Options{NoLoopImage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	tplDir := filepath.Join(pool.Dir(), "templates")
	if err := os.MkdirAll(tplDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tplDir, "default.img"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(tplDir, "default.img"), 64<<20); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(template.Info{Name: "default", BuiltAt: time.Now(), Recipe: "test"})
	if err := os.WriteFile(filepath.Join(tplDir, "default.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	templates, err := template.NewCatalog(pool, nil, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := fileblob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.Open(ctx, slog.New(slog.DiscardHandler), st, pool, blobs, snapshot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	box, err := secrets.NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{t: t, Runtime: inproc.New("container", nil), Secrets: secrets.NewVault(st, box)}
	h.Deps = sandbox.Deps{
		Store: st, Pool: pool, Templates: templates, Snapshots: snaps,
		Runtimes: []runtime.Runtime{h.Runtime}, StateDir: filepath.Join(dir, "sandboxes"),
		Host:   sandbox.HostCapacity{CPUs: 4, MemoryMB: 16 << 10, DiskMB: 1 << 20, PidMax: 1 << 22},
		NodeID: "test-node", Secrets: h.Secrets,
	}
	h.Manager = h.Restart()
	tpls, err := tenanttpl.New(ctx, tenanttpl.Deps{
		Log:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Store: st, Snapshots: snaps, Catalog: templates, Sandboxes: h.Manager, Dir: pool.Dir(), NodeID: h.Deps.NodeID,
	}, tenanttpl.Config{DefaultTemplate: "default"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tpls.Close)
	h.Templates = tpls
	return h
}

// Restart makes a new manager over the same store and runtime, as a
// restarted daemon has; h.Manager stays the first one.
func (h *Harness) Restart() *sandbox.Manager {
	h.t.Helper()
	deps := h.Deps
	deps.Log = slog.New(slog.NewTextHandler(h.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	deps.Metrics = metrics.New()
	if h.Metrics == nil {
		h.Metrics = deps.Metrics
	}
	// The host above is made up, so the disk reserve is not taken from it:
	// a twentieth of its 1 TiB would refuse creates on a real disk with
	// 50 GiB free.
	m, err := sandbox.New(context.Background(), deps, sandbox.Config{
		ReapEvery: 20 * time.Millisecond,
		Admission: sandbox.Admission{ReserveDiskMB: 256},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(m.Close)
	return m
}
