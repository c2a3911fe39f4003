//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nodeJS is the node.js on PATH, if it is major.minor.patch or later:
// else the test skips, saying that what needs it cannot run.
func nodeJS(t testing.TB, what string, major, minor, patch int) string {
	t.Helper()
	want := strconv.Itoa(major) + "." + strconv.Itoa(minor) + "." + strconv.Itoa(patch)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node.js on PATH: %s needs node %s or later (scripts/deps.sh installs it)", what, want)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	if v := strings.TrimSpace(string(out)); !nodeAtLeast(v, major, minor, patch) {
		t.Skipf("node %s is older than the %s of %s", v, want, what)
	}
	return node
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

// nodeTests runs the test file file in dir under node's test runner
// (node's flags first) with env added, and fails t with its output when a
// test fails.
func nodeTests(t *testing.T, node, dir, file string, flags, env []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append(flags, "--test", "--test-reporter=spec", file)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s (%v):\n%s", file, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the tests of %s failed: %v\ndaemon log:\n%s", file, err, shared.log.tail(40))
	}
}
