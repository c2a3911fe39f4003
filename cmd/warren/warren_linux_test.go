package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"warren/api"
	"warren/client"
	"warren/internal/daemon"
	"warren/internal/node"
	"warren/internal/sandbox/sandboxtest"
	"warren/internal/server"
	"warren/internal/store"
)

// tenant is the tenant of the key the CLI's tests use.
const tenant = "acme"

// warren is a real warren for the CLI's tests: the API server over a real
// manager (sandboxtest: sandboxes are real agents in this process, their
// processes run as the test's user), on an httptest server.
type warren struct {
	*sandboxtest.Harness
	t   testing.TB
	srv *server.Server
	hs  *httptest.Server
	url string
	// key is tenant's key; admin is an admin key.
	key, admin string
}

// newWarren starts a warren and points the test's environment at it with
// tenant's key.
func newWarren(t *testing.T) *warren {
	t.Helper()
	return newWarrenWith(t, sandboxtest.New(t), server.Options{})
}

// newWarrenWith starts another API server, with opts, over h's manager
// and store.
func newWarrenWith(t testing.TB, h *sandboxtest.Harness, opts server.Options) *warren {
	t.Helper()
	ctx := context.Background()
	w := &warren{Harness: h, t: t}
	var err error
	if w.key, err = h.Deps.Store.CreateKey(ctx, store.Key{Tenant: tenant}); err != nil {
		t.Fatal(err)
	}
	if w.admin, err = h.Deps.Store.CreateKey(ctx, store.Key{Tenant: api.AdminTenant, Admin: true}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	nd := node.New(node.Deps{Log: log, Version: "test", Runtimes: h.Deps.Runtimes, CloneMode: h.Deps.Pool.Mode().String(),
		Templates: h.Deps.Templates, Bases: h.Deps.Snapshots, Sandboxes: h.Manager})
	opts.Requests, opts.Quotas, opts.Pools, opts.Templates = daemon.Requests(h.Deps.Store), daemon.Quotas(h.Deps.Store), h.Manager, h.Templates
	opts.Events = daemon.Events(h.Deps.Store)
	if opts.Secrets == nil {
		opts.Secrets = h.Secrets
	}
	w.srv = server.New(h.Manager, nd, daemon.Keys(h.Deps.Store), log, opts)
	w.hs = httptest.NewServer(daemon.FleetOfOne(w.srv, opts.MaxBodyBytes, t.TempDir(), nil))
	t.Cleanup(w.hs.Close)
	w.url = w.hs.URL
	t.Setenv(client.EnvURL, w.url)
	t.Setenv(client.EnvAPIKey, w.key)
	return w
}

// asAdmin makes the CLI use the admin key from now on.
func (w *warren) asAdmin() { w.t.Setenv(client.EnvAPIKey, w.admin) }

// sandbox creates a running sandbox of tenant and returns it.
func (w *warren) sandbox(req api.CreateSandboxRequest) api.Sandbox {
	w.t.Helper()
	sb, err := w.Manager.Create(context.Background(), tenant, req)
	if err != nil {
		w.t.Fatal(err)
	}
	return sb
}

// get is tenant's sandbox id as the manager has it.
func (w *warren) get(id string) api.Sandbox {
	w.t.Helper()
	sb, err := w.Manager.Get(context.Background(), tenant, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return sb
}
