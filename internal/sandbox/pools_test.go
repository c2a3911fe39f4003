//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/store"
	"warren/internal/wait"
)

// setPool sets the default template's container pool.
func (h harness) setPool(spec api.PoolSpec) api.Pool {
	h.t.Helper()
	spec.Runtime = "container"
	p, err := h.Manager.SetPool(context.Background(), "default", spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// pool returns the default template's container pool.
func (h harness) pool() api.Pool {
	h.t.Helper()
	pools, err := h.Manager.Pools(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range pools {
		if p.Template == "default" && p.Runtime == "container" {
			return p
		}
	}
	h.t.Fatalf("no default/container pool in %+v", pools)
	return api.Pool{}
}

// ready waits until n members are ready, as the runtime and the pool's
// report (synced every few seconds) both say.
func (h harness) ready(n int) {
	h.t.Helper()
	wait.For(h.t, 20*time.Second, "pool members ready", func() bool {
		p := h.pool()
		return p.Ready == n && len(h.markers()) == n
	})
}

// markers lists the pooled members' markers in the state directory.
func (h harness) markers() []string {
	h.t.Helper()
	entries, _ := os.ReadDir(h.Deps.StateDir)
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".pooled"); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// printenv runs printenv NAME in sandbox id.
func (h harness) printenv(id, name string) string {
	h.t.Helper()
	conn, err := h.Manager.Agent(context.Background(), tenant, id)
	if err != nil {
		h.t.Fatal(err)
	}
	var out bytes.Buffer
	if _, _, err := conn.Run(context.Background(), &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "printenv", Args: []string{name}},
	}, &out, nil); err != nil {
		h.t.Fatal(err)
	}
	return strings.TrimSpace(out.String())
}

// TestPoolClaim: a matching create takes a ready member instead of
// starting one, with the identity it asked for (tenant, env, times) and a
// record that says running; the pool refills; a create that does not match
// starts cold and is no miss; one that matches an empty pool is.
func TestPoolClaim(t *testing.T) {
	h := newHarness(t)
	p := h.setPool(api.PoolSpec{Min: 2})
	if p.Min != 2 || p.Max != 2 || p.MemoryMB != 512 || p.CPUs != 1 || p.DiskMB != 64 {
		t.Fatalf("pool = %+v, want min 2, max 2 and the create defaults", p)
	}
	h.ready(2)
	members := h.markers()
	started := h.Runtime.Started()

	before := time.Now()
	sb, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{
		SandboxSpec: api.SandboxSpec{Env: map[string]string{"FOO": "bar"}, TimeoutSeconds: 60},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(members, " "), sb.ID) {
		t.Fatalf("created %s, not one of the members %v", sb.ID, members)
	}
	if h.Runtime.Started() != started {
		t.Errorf("the create started a sandbox: it should have taken a member")
	}
	if sb.State != api.StateRunning || sb.Tenant != tenant || sb.CreatedAt.Before(before) ||
		sb.ExpiresAt.Sub(sb.CreatedAt) != time.Minute {
		t.Errorf("claimed sandbox = %+v; want running, of %s, created now, expiring a minute later", sb, tenant)
	}
	if rec := h.record(sb.ID); rec.State != api.StateRunning || rec.Tenant != tenant || rec.NetSlot != 0 || len(rec.RuntimeState) == 0 {
		t.Errorf("record = %+v", rec)
	}
	if got := h.printenv(sb.ID, "FOO"); got != "bar" {
		t.Errorf("FOO in the claimed sandbox = %q, want bar", got)
	}
	if _, err := os.Stat(filepath.Join(h.Deps.StateDir, sb.ID+".pooled")); !os.IsNotExist(err) {
		t.Errorf("the claimed sandbox still has its pool marker: %v", err)
	}
	wait.For(t, 10*time.Second, "the hit reported", func() bool { p := h.pool(); return p.Hits == 1 && p.Misses == 0 })
	h.ready(2) // refilled

	started = h.Runtime.Started()
	if _, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 256}}); err != nil {
		t.Fatal(err)
	}
	if h.Runtime.Started() != started+1 {
		t.Errorf("a create of other resources did not start cold")
	}
	if err := h.Manager.Delete(context.Background(), tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 { // two members, then a miss
		if _, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "the miss reported", func() bool { p := h.pool(); return p.Hits == 3 && p.Misses == 1 })
}

// TestPoolGrowsOnMisses: misses grow a pool's target toward its max.
func TestPoolGrowsOnMisses(t *testing.T) {
	h := newHarness(t)
	h.setPool(api.PoolSpec{Min: 1, Max: 3})
	h.ready(1)
	for range 3 {
		if _, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 20*time.Second, "the pool grown to its max", func() bool {
		p := h.pool()
		return p.Misses == 2 && p.Target == 3 && p.Ready == 3
	})
}

// TestPoolRestartSweepsMembers: members an earlier daemon process left
// (it died without discarding them) are swept by the next one, which then
// keeps the pool itself.
func TestPoolRestartSweepsMembers(t *testing.T) {
	h := newHarness(t)
	h.setPool(api.PoolSpec{Min: 2})
	h.ready(2)
	old := h.markers()
	h.Restart()
	for _, id := range old {
		if h.Runtime.Live(id) != nil {
			t.Errorf("member %s of the earlier process still runs", id)
		}
		if _, err := os.Stat(filepath.Join(h.Deps.StateDir, id)); !os.IsNotExist(err) {
			t.Errorf("member %s's directory is left: %v", id, err)
		}
	}
	// Both processes keep the pool now; the first's members are gone.
	wait.For(t, 20*time.Second, "new members", func() bool {
		for _, id := range h.markers() {
			if id != old[0] && id != old[1] {
				return true
			}
		}
		return false
	})
}

// TestPoolGivesWay: a create the node has no room for discards ready
// members to make some; pools never take what was asked for.
func TestPoolGivesWay(t *testing.T) {
	h := newHarness(t)
	// The harness's node may promise 22,118 MiB of memory: four members
	// of 4 GiB (4,160 MiB with the agent's reserve) leave 5,478, and a
	// create of 8 GiB needs one of them gone. The pool cannot refill then.
	h.setPool(api.PoolSpec{Min: 4, MemoryMB: 4096})
	h.ready(4)
	sb, err := h.Manager.Create(context.Background(), tenant, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{MemoryMB: 8192}})
	if err != nil {
		t.Fatalf("create past what the members leave: %v", err)
	}
	if got := len(h.markers()); got != 3 {
		t.Errorf("%d members left, want 3", got)
	}
	wait.For(t, 10*time.Second, "the pool's refill refused", func() bool { return h.pool().Nodes[0].Ready == 3 })
	time.Sleep(500 * time.Millisecond) // past the pool's quiet time: a refill would have begun
	if got := len(h.markers()); got != 3 {
		t.Errorf("%d members after the create, want 3: the pool took back what the create holds", got)
	}
	if err := h.Manager.Delete(context.Background(), tenant, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// TestPoolSettings: bad settings are refused with what is allowed; a
// delete discards the members; the store keeps what was set.
func TestPoolSettings(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		tpl  string
		spec api.PoolSpec
		code string
	}{
		{"max below min", "default", api.PoolSpec{Min: 3, Max: 2}, api.CodeBadRequest},
		{"negative", "default", api.PoolSpec{Min: -1}, api.CodeBadRequest},
		{"too large", "default", api.PoolSpec{Min: 1, Max: 100000}, api.CodeBadRequest},
		{"unknown template", "nope", api.PoolSpec{Min: 1}, api.CodeNotFound},
		{"unknown runtime", "default", api.PoolSpec{Min: 1, Runtime: "wasm"}, api.CodeBadRequest},
		{"bad memory", "default", api.PoolSpec{Min: 1, MemoryMB: 1}, api.CodeBadRequest},
		{"more than the node holds", "default", api.PoolSpec{Min: 100, MemoryMB: 8192}, api.CodeConflict},
	} {
		_, err := h.Manager.SetPool(ctx, c.tpl, c.spec)
		if ae, ok := err.(*api.Error); !ok || ae.Code != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	h.setPool(api.PoolSpec{Min: 2})
	h.ready(2)
	sets, err := h.Deps.Store.ListPools(ctx)
	if err != nil || len(sets) != 1 || sets[0] != (store.Pool{Template: "default", Runtime: "container", Min: 2, Max: 2,
		CPUs: 1, MemoryMB: 512, Pids: 1024, DiskMB: 64, UpdatedAt: sets[0].UpdatedAt}) {
		t.Errorf("stored pools = %+v, %v", sets, err)
	}
	if err := h.Manager.DeletePool(ctx, "default", ""); err != nil {
		t.Fatal(err)
	}
	if got := h.markers(); len(got) != 0 {
		t.Errorf("members left after the delete: %v", got)
	}
	if err := h.Manager.DeletePool(ctx, "default", "container"); err == nil {
		t.Error("a second delete succeeded")
	}
}
