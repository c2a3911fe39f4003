//go:build linux

// Package agenttest serves the real guest agent (package agent) in a
// test's process, the one way every package's tests get an agent to talk
// to. The agent's processes run on the host as the test's user. It is not
// a runtime: internal/runtime/inproc runs sandboxes of agents for the
// manager's tests.
//
// It imports nothing of the node's side (agentconn), so that agentconn's
// own tests can use it: callers dial the socket their own way.
package agenttest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"warren/internal/agent"
)

// Serve serves an agent with opts on l until the test ends, logging its
// warnings to the test's output, and returns it. The test fails if Serve
// ends with an error.
func Serve(t testing.TB, opts agent.Options, l net.Listener) *agent.Server {
	t.Helper()
	srv := agent.New(opts, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("agent serve: %v", err)
		}
	})
	return srv
}

// Listen serves an agent with opts, as Serve, on a unix socket in a new
// temporary directory and returns the socket's path and the agent. The
// directory is short (not t.TempDir, named for the test): a unix socket's
// path has at most 108 bytes. The socket accepts at once; a client's first
// call waits for nothing else.
func Listen(t testing.TB, opts agent.Options) (string, *agent.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return sock, Serve(t, opts, l)
}
