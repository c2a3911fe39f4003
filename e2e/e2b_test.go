//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// e2bNode is the node.js the e2b SDK runs on, and the folder its pinned
// packages are installed in (scripts/test.sh runs npm ci there). The SDK
// needs node 20.18.1 or later: an older one skips, saying so.
func e2bNode(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node.js on PATH: the e2b SDK tests need node 20.18.1 or later (scripts/deps.sh installs it)")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	if v := strings.TrimSpace(string(out)); !nodeAtLeast(v, 20, 18, 1) {
		t.Skipf("node %s is older than the e2b SDK's 20.18.1", v)
	}
	dir, err = filepath.Abs("e2b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		t.Fatalf("the e2b SDK is not installed in %s: run `npm ci --prefix e2e/e2b` (scripts/test.sh does): %v", dir, err)
	}
	return node, dir
}

// nodeAtLeast reports whether node's version v ("v20.20.2") is at least
// major.minor.patch.
func nodeAtLeast(v string, major, minor, patch int) bool {
	var got [3]int
	for i, f := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
		got[i], _ = strconv.Atoi(f)
	}
	for i, want := range []int{major, minor, patch} {
		if got[i] != want {
			return got[i] > want
		}
	}
	return true
}

// runE2B runs the e2b SDK's test file of the suite under node's test
// runner with env, and fails t with its output when a test fails.
func runE2B(t *testing.T, node, dir string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk.test.mjs (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the e2b SDK's tests failed: %v\ndaemon log:\n%s", err, shared.log.tail(40))
	}
}

// TestE2BSDK drives the shared daemon with the real e2b SDK from npm,
// unmodified, in E2B's single-URL mode: the control API at /e2b and the
// sandbox API at the same URL with the E2b-Sandbox-Id header.
func TestE2BSDK(t *testing.T) {
	need(t)
	node, dir := e2bNode(t)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "e2b-sdk"})
	if err != nil {
		t.Fatal(err)
	}
	runE2B(t, node, dir,
		"E2B_API_KEY="+k.Key,
		"E2B_API_URL="+shared.url+"/e2b",
		"E2B_SANDBOX_URL="+shared.url+"/e2b",
	)
}
