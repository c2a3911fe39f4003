//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"warren/api"
	"warren/internal/server"
)

// daemonRSS is the daemon's resident memory in bytes.
func (d *daemon) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// nulBomb prints 16 MiB of NUL bytes on each of stdout and stderr.
const nulBomb = `import sys
z = b"\0" * (1 << 20)
for _ in range(16):
    sys.stdout.buffer.write(z); sys.stderr.buffer.write(z)
`

// TestExecOutputBounded is the regression test of issue 13, item 2: one
// non-streaming exec printing 16 MiB of NUL on each stream took the
// daemon from 51 MB to 765 MB. Now each stream is cut at the documented
// limit, flagged, the answer is encoded piece by piece (as text, or as
// base64 with exact bytes), and two at once leave the daemon's memory
// near where it was.
func TestExecOutputBounded(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	cl := shared.client()
	ctx := context.Background()
	before := shared.rss(t)
	var wg sync.WaitGroup
	results := make([]*api.ExecResult, 2)
	errs := make([]error, 2)
	for i, enc := range []string{"", api.EncodingBase64} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", nulBomb}, OutputEncoding: enc})
		}()
	}
	wg.Wait()
	after := shared.rss(t)
	limit := server.DefaultMaxOutputBytes
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("exec %d: %v", i, errs[i])
		}
		if res.ExitCode != 0 || !res.Truncated {
			t.Errorf("exec %d: exit %d, truncated %v; want 0 and truncated", i, res.ExitCode, res.Truncated)
		}
		stdout := []byte(res.Stdout)
		if res.Encoding == api.EncodingBase64 {
			var err error
			if stdout, err = base64.StdEncoding.DecodeString(res.Stdout); err != nil {
				t.Fatalf("base64 stdout: %v", err)
			}
		} else if i == 1 {
			t.Errorf("asked for base64, got encoding %q", res.Encoding)
		}
		if len(stdout) != limit || !bytes.Equal(stdout, make([]byte, limit)) {
			t.Errorf("exec %d: stdout of %d bytes, want %d NULs", i, len(stdout), limit)
		}
	}
	t.Logf("daemon RSS %d MiB before, %d MiB after two 16 MiB-per-stream NUL execs", before>>20, after>>20)
	// Each exec holds its two cut streams (8 MiB) and a piece of their
	// encoding; before the fix the two took 1.5 GB.
	if grown := after - before; grown > 128<<20 {
		t.Errorf("daemon RSS grew by %d MiB, want under 128", grown>>20)
	}
	if _, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}, OutputEncoding: "hex"}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("output_encoding hex: %v, want 400", err)
	}
}

// TestExecConcurrencyBounded: a tenant's non-streaming execs in flight are
// bounded (429 naming the limit beyond it), and the bound frees as they end.
func TestExecConcurrencyBounded(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	cl := shared.client()
	ctx := context.Background()
	n := server.DefaultMaxCollectsPerTenant + 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, tooMany := 0, 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sleep", "3"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case api.IsCode(err, api.CodeTooMany) && strings.Contains(err.Error(), fmt.Sprintf("limit %d", server.DefaultMaxCollectsPerTenant)):
				tooMany++
			default:
				t.Errorf("exec: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok > server.DefaultMaxCollectsPerTenant || tooMany == 0 {
		t.Errorf("%d execs at once: %d ran, %d refused; want at most %d to run", n, ok, tooMany, server.DefaultMaxCollectsPerTenant)
	}
	if res, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("an exec once they ended: %v %+v", err, res)
	}
}
