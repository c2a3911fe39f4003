//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// TestTypeScriptSDK runs the TypeScript SDK's live tests
// (sdk/typescript/test/live.test.mjs) under node's test runner against the
// shared daemon, with a tenant key of their own. The SDK must be built
// first (scripts/test.sh runs npm ci and npm run build in sdk/typescript).
func TestTypeScriptSDK(t *testing.T) {
	need(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node.js on PATH: the TypeScript SDK's tests need node 18 or later (scripts/deps.sh installs it)")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	if v := strings.TrimSpace(string(out)); !nodeAtLeast(v, 18, 0, 0) {
		t.Skipf("node %s is older than the TypeScript SDK's 18", v)
	}
	dir, err := filepath.Abs(filepath.Join("..", "sdk", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dist", "index.js")); err != nil {
		t.Fatalf("the TypeScript SDK is not built in %s: run `npm ci --prefix sdk/typescript && npm run build --prefix sdk/typescript` (scripts/test.sh does): %v", dir, err)
	}
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "typescript-sdk"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "test/live.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "WARREN_URL="+shared.url, "WARREN_API_KEY="+k.Key)
	start := time.Now()
	out, err = cmd.CombinedOutput()
	t.Logf("node --test test/live.test.mjs (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the TypeScript SDK's live tests failed: %v\ndaemon log:\n%s", err, shared.log.tail(40))
	}
}
