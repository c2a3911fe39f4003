//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/runtime"
	"warren/internal/server"
)

// rss is the daemon's resident memory in bytes.
func (d *daemon) rss(t testing.TB) int64 {
	t.Helper()
	return rssOf(t, d.cmd.Process.Pid)
}

// rssOf is process pid's resident memory in bytes.
func rssOf(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
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

// TestAgentOutlivesSlowReaders is the regression test of issue 13, item 7:
// 40 streaming `yes` with readers that stopped reading drove the agent of
// a 512 MiB sandbox to 498 MB and the kernel killed it; the sandbox failed
// and its disk was deleted. Now the agent's output buffers are bounded in
// total, the sandbox's processes run in a subgroup held to the sandbox's
// memory while the agent keeps a reserve beside it, and a memory hog is
// the one the OOM killer takes. The layout of cgroups it checks is the
// container runtime's; a gvisor sandbox's limits are the conformance
// suite's and the gvisor runtime's tests'.
func TestAgentOutlivesSlowReaders(t *testing.T) {
	need(t)
	cl := shared.client()
	ctx := context.Background()
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 512, CPUs: 1, Runtime: "container"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.DeleteSandbox(context.Background(), sb.ID) })
	agent := initPid(t, sb.ID)
	before := rssOf(t, agent)

	peak := stalledStreamsPeak(t, sb.ID, agent, 40)
	t.Logf("agent RSS %d MiB idle, peak %d MiB with 40 stalled streams", before>>20, peak>>20)
	if peak > 160<<20 {
		t.Errorf("the agent's RSS reached %d MiB with 40 stalled streams (idle: %d MiB); want its buffers bounded", peak>>20, before>>20)
	}

	// The sandbox's processes run in the work subgroup; the group adds the
	// agent's reserve.
	res, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/proc/self/cgroup"}})
	if err != nil || !strings.Contains(res.Stdout, ":memory:/work\n") || !strings.Contains(res.Stdout, ":pids:/work\n") {
		t.Errorf("a sandbox process's cgroups: %v %+v; want memory and pids in /work", err, res)
	}
	for file, want := range map[string]int64{
		"memory.limit_in_bytes":      (512 + runtime.AgentMemoryMB) << 20,
		"work/memory.limit_in_bytes": 512 << 20,
	} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory/warren", sb.ID, file))
		if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %d", file, b, err, want)
		}
	}
	// A hog is killed, not the agent.
	hog, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", "b = b'x' * (1 << 30)"}})
	if err != nil || hog.ExitCode != 137 {
		t.Errorf("1 GiB in a 512 MiB sandbox: %v %+v; want killed (137)", err, hog)
	}
	if got := initPid(t, sb.ID); got != agent {
		t.Fatalf("the agent changed from pid %d to %d", agent, got)
	}
	if res, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec after: %v %+v", err, res)
	}
	if got, err := cl.GetSandbox(ctx, sb.ID); err != nil || got.State != api.StateRunning {
		t.Errorf("sandbox after: %v %+v", err, got)
	}
}

// stalledStreamsPeak starts n streaming `yes` in sandbox id, stops reading
// each after its first event, and returns the peak RSS of process pid (the
// sandbox's agent) over the next 8 s; then it closes the streams.
func stalledStreamsPeak(t testing.TB, id string, pid, n int) int64 {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cl := shared.client()
	for i := range n {
		s, err := cl.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"yes", strings.Repeat("y", 1000)}})
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		defer s.Close()
		if _, err := s.Next(); err != nil { // it started; now stop reading
			t.Fatal(err)
		}
	}
	var peak int64
	for range 16 {
		time.Sleep(500 * time.Millisecond) // sampling the peak while the load runs
		peak = max(peak, rssOf(t, pid))
	}
	return peak
}

// TestExecConcurrencyBounded: the execs open at once on one sandbox are
// bounded (429 naming the limit beyond it), and the bound frees as they
// end. Any number of small ones run at once across sandboxes
// (TestLoadConcurrentExecs runs 1,000).
func TestExecConcurrencyBounded(t *testing.T) {
	need(t)
	id := shared.newSandbox(t)
	cl := shared.client()
	ctx := context.Background()
	n := server.DefaultMaxStreamsPerSandbox + 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, tooMany := 0, 0
	for range n {
		wg.Go(func() {
			_, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sleep", "4"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case api.IsCode(err, api.CodeTooMany) && strings.Contains(err.Error(), fmt.Sprintf("limit %d", server.DefaultMaxStreamsPerSandbox)):
				tooMany++
			default:
				t.Errorf("exec: %v", err)
			}
		})
	}
	wg.Wait()
	if ok > server.DefaultMaxStreamsPerSandbox || tooMany == 0 {
		t.Errorf("%d execs at once on one sandbox: %d ran, %d refused; want at most %d to run", n, ok, tooMany, server.DefaultMaxStreamsPerSandbox)
	}
	if res, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("an exec once they ended: %v %+v", err, res)
	}
}

// TestAdmission is the regression test of issue 13, item 4: one tenant got
// the node to promise 6.5 TiB of disk against 71 GB free, 64 GiB of memory
// on a 23 GiB host, 65536 pids with pid_max 32768, and 256 sandboxes in one
// restore. Now each is refused, naming what is short, and the warren
// parent cgroup holds every sandbox together below the host's totals.
func TestAdmission(t *testing.T) {
	need(t)
	cl := shared.client()
	ctx := context.Background()
	for _, tc := range []struct {
		req  api.CreateSandboxRequest
		code string
		msg  string
	}{
		{api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 64 << 10}}, api.CodeBadRequest, "more than this node has"},
		{api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Pids: 65536}}, api.CodeBadRequest, "pid_max"},
	} {
		if sb, err := cl.CreateSandbox(ctx, tc.req); !api.IsCode(err, tc.code) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("create %+v: %v, want %s naming %q", tc.req, err, tc.code, tc.msg)
			if sb != nil {
				cl.DeleteSandbox(ctx, sb.ID)
			}
		}
	}
	// 256 GiB disks until the node has promised all it may: by its own
	// account, the last one is refused at the latest.
	_, scrape := scrapeMetrics(t, shared.key)
	free := value(t, scrape, `warren_node_capacity{resource="disk_mb"}`) - value(t, scrape, `warren_node_claimed{resource="disk_mb"}`)
	bound := int(free/(256<<10)) + 1
	if free <= 0 {
		t.Fatalf("the node's metrics give no disk capacity:\n%s", scrape)
	}
	var err error
	var made []string
	defer func() {
		for _, id := range made {
			cl.DeleteSandbox(context.Background(), id)
		}
	}()
	for range bound {
		var sb *api.Sandbox
		if sb, err = cl.CreateSandbox(ctx, api.CreateSandboxRequest{DiskMB: 256 << 10, SandboxSpec: api.SandboxSpec{CPUs: 0.1, MemoryMB: 64}}); err != nil {
			break
		}
		made = append(made, sb.ID)
	}
	if !api.IsCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "MiB disk") || len(made) >= bound {
		t.Errorf("after %d sandboxes of 256 GiB: %v, want insufficient_storage naming the disk", len(made), err)
	}
	t.Logf("%d sandboxes of 256 GiB admitted, then: %v", len(made), err)
	id := shared.newSandbox(t)
	snap, err := cl.Snapshot(ctx, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.DeleteSnapshot(context.Background(), snap.ID)
	before, _ := cl.ListSandboxes(ctx)
	// A restore of 200 (under the tenant's 256, over the node's memory) is
	// refused whole.
	if _, err := cl.Restore(ctx, snap.ID, api.RestoreRequest{Count: 200}); !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "cannot hold 200 sandboxes") {
		t.Errorf("restore of 200: %v, want conflict naming the 200", err)
	}
	if after, _ := cl.ListSandboxes(ctx); len(after) != len(before) {
		t.Errorf("a refused restore left %d sandboxes behind", len(after)-len(before))
	}
	// The parent cgroup's bounds.
	for _, f := range []struct{ controller, file string }{{"memory", "memory.limit_in_bytes"}, {"pids", "pids.max"}} {
		b, err := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/%s/warren/%s", f.controller, f.file))
		if err != nil {
			b, err = os.ReadFile("/sys/fs/cgroup/warren/" + map[string]string{"memory": "memory.max", "pids": "pids.max"}[f.controller])
		}
		v, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || perr != nil || v <= 0 || v >= 1<<62 {
			t.Errorf("warren parent cgroup %s: %q %v, want a bound", f.file, b, err)
		}
	}
}

// TestTenantQuota: a node's per-tenant bound on sandboxes refuses the
// tenant's extra sandbox (429 naming the quota) until one is deleted.
func TestTenantQuota(t *testing.T) {
	need(t)
	ctx := context.Background()
	node, snap := snapshotNode(t, "--tenant-max-sandboxes", "2")
	admin := node.client()
	two, err := admin.Restore(ctx, snap, api.RestoreRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range two {
		t.Cleanup(func() { admin.DeleteSandbox(context.Background(), sb.ID) })
	}
	third, err := admin.Restore(ctx, snap, api.RestoreRequest{})
	for _, sb := range third {
		// Admitted by a bug: gone with the test, not left to fail the
		// leak checks of the tests after it.
		t.Cleanup(func() { admin.DeleteSandbox(context.Background(), sb.ID) })
	}
	if !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "at most 2 sandboxes") {
		t.Errorf("a third sandbox: %v, want too_many_requests naming the quota", err)
	}
	// The bound frees with a delete. (That another tenant is not held
	// back is internal/sandbox TestAdmissionOthersUnaffected's: on this
	// node, without a template, only the snapshot's tenant has a source.)
	if err := admin.DeleteSandbox(ctx, two[0].ID); err != nil {
		t.Fatal(err)
	}
	again, err := admin.Restore(ctx, snap, api.RestoreRequest{})
	if err != nil {
		t.Fatalf("after a delete, the tenant's sandbox: %v", err)
	}
	t.Cleanup(func() { admin.DeleteSandbox(context.Background(), again[0].ID) })
}

// TestTenantFleetQuota: a tenant's quota in the fleet (warren quota set)
// refuses its sandbox past it with a 429 naming the quota; another tenant
// is not held back; a delete frees the room.
func TestTenantFleetQuota(t *testing.T) {
	need(t)
	ctx := context.Background()
	tenant := fmt.Sprintf("quota-%d", time.Now().UnixNano())
	if _, errOut, code := shared.cli(t, nil, "quota", "set", tenant, "--sandboxes", "1", "--creates-per-minute", "10"); code != 0 {
		t.Fatalf("warren quota set: exit %d: %s", code, errOut)
	}
	out, errOut, code := shared.cli(t, nil, "quota", "get", tenant)
	if code != 0 || !strings.Contains(out, `"sandboxes": 1`) || !strings.Contains(out, `"creates_per_minute": 10`) {
		t.Errorf("warren quota get: exit %d %q %s", code, out, errOut)
	}
	c := tenantClient(t, tenant)
	first, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), first.ID) })
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{}); !api.IsCode(err, api.CodeTooMany) || !strings.Contains(err.Error(), "at most 1 sandboxes in the fleet") {
		t.Errorf("a second sandbox: %v, want too_many_requests naming the quota", err)
	}
	other := tenantClient(t, tenant+"-other")
	sb, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Errorf("another tenant: %v", err)
	} else {
		other.DeleteSandbox(ctx, sb.ID)
	}
	if err := c.DeleteSandbox(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	c.DeleteSandbox(ctx, again.ID)
}
