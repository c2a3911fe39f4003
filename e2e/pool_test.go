//go:build linux

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// poolMemoryMB is the memory of the e2e suite's warm pools: a size no
// other test asks for, so that no other test's create takes a member.
const poolMemoryMB = 320

// setPool keeps n booted sandboxes of runtime rt and the default template
// with half a CPU and memoryMB on the shared daemon until the test ends,
// and waits until they are ready.
func setPool(t testing.TB, rt string, n int, memoryMB int64) {
	t.Helper()
	ctx := context.Background()
	c := shared.client()
	if _, err := c.SetPool(ctx, "default", api.PoolSpec{Runtime: rt, Min: n, MemoryMB: memoryMB, CPUs: 0.5}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeletePool(context.Background(), "default", rt) })
	waitReady(t, rt, n)
}

// waitReady waits until the shared daemon's pool of runtime rt has n
// members ready (a vm member boots for seconds under TCG).
func waitReady(t testing.TB, rt string, n int) {
	t.Helper()
	d := time.Duration(n)*time.Second + 30*time.Second
	if rt == "vm" {
		d = 5 * time.Minute
	}
	wait.For(t, d, "the pool's members ready", func() bool {
		return runtimePool(t, rt).Ready == n
	})
}

// runtimePool is the default template's pool of runtime rt on the shared
// daemon.
func runtimePool(t testing.TB, rt string) api.Pool {
	t.Helper()
	pools, err := shared.client().Pools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if p.Template == "default" && p.Runtime == rt {
			return p
		}
	}
	t.Fatalf("no pool of default/%s: %+v", rt, pools)
	return api.Pool{}
}

// TestWarmPool: a create that matches a pool takes a booted member: it
// runs at once with the identity it asked for (ID as hostname, env, egress
// policy, times), nothing but its agent ran in it before, and the pool
// refills behind it.
func TestWarmPool(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := shared.client()
	setPool(t, "container", 2, poolMemoryMB)
	before := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
		Runtime: "container", CPUs: 0.5, MemoryMB: poolMemoryMB, TimeoutSeconds: 120,
		Env: map[string]string{"FOO": "bar"}, Network: &api.NetworkPolicy{None: true},
		Metadata: map[string]string{"run": "pool"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
	wait.For(t, 10*time.Second, "the create counted as a hit", func() bool { return runtimePool(t, "container").Hits == 1 })
	if sb.State != api.StateRunning || sb.CreatedAt.Before(before) || sb.ExpiresAt.Sub(sb.CreatedAt) != 2*time.Minute ||
		sb.Metadata["run"] != "pool" || !sb.Network.None {
		t.Errorf("claimed sandbox = %+v", sb)
	}
	out := shared.sh(t, sb.ID, `hostname; printenv FOO; ps -e -o pid=,comm= | grep -v -e ' ps$' -e ' sh$' -e ' grep$'`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != sb.ID || lines[1] != "bar" || !strings.HasPrefix(strings.TrimSpace(lines[2]), "1 ") {
		t.Errorf("hostname, FOO and the processes before this exec = %q; want %s, bar and PID 1 alone", out, sb.ID)
	}
	got := probe(t, sb.ID, "dns:allowed.test", hostPort(inetAllowed, 80))
	wantRefused(t, got, "dns:allowed.test")
	wantRefused(t, got, hostPort(inetAllowed, 80))
	wait.For(t, 30*time.Second, "the pool refilled", func() bool { return runtimePool(t, "container").Ready == 2 })
}
