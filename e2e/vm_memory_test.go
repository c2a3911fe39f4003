//go:build linux

package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// memoryStartMB is the memory of the sandboxes of TestMemoryStart: a
// shape no other test asks for, so that the image is this test's alone.
const memoryStartMB = 448

// memoryImage is the shared daemon's memory image of the default template
// with memoryMB, or ok false.
func memoryImage(t testing.TB, rt string, memoryMB int64) (api.MemoryImage, bool) {
	t.Helper()
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range info.MemoryImages {
		if img.Runtime == rt && img.Template == "default" && img.MemoryMB == memoryMB && img.VCPUs == 1 {
			return img, true
		}
	}
	return api.MemoryImage{}, false
}

// guestIdentity is what makes a machine itself.
type guestIdentity struct {
	hostname, etcHostname, hosts, machineID, bootID, random string
	clockSkew                                               time.Duration
}

// identityOf reads sandbox id's identity, and how far its clock is from
// the host's: how far outside the host's times before and after the exec
// that read it (an exec of its own, to keep that window short) the guest's
// time was.
func identityOf(t *testing.T, id string) guestIdentity {
	t.Helper()
	out := shared.sh(t, id, `hostname; cat /etc/hostname; grep -c "$(hostname)" /etc/hosts; cat /etc/machine-id;
		cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'`)
	f := strings.Split(strings.TrimSpace(out), "\n")
	if len(f) != 6 {
		t.Fatalf("identity of %s: %q", id, out)
	}
	before := time.Now()
	date := shared.sh(t, id, "date +%s.%N")
	after := time.Now()
	secs, err := strconv.ParseFloat(strings.TrimSpace(date), 64)
	if err != nil {
		t.Fatalf("date in %s: %q", id, date)
	}
	guest := time.Unix(0, int64(secs*1e9))
	var skew time.Duration
	switch {
	case guest.Before(before):
		skew = before.Sub(guest)
	case guest.After(after):
		skew = guest.Sub(after)
	}
	return guestIdentity{hostname: f[0], etcHostname: f[1], hosts: f[2], machineID: f[3], bootID: f[4], random: f[5], clockSkew: skew}
}

// TestMemoryStart: once two vm or gvisor sandboxes of a shape have booted,
// the node saves a booted machine of that shape, and later sandboxes of it
// start from that memory instead of booting, as does a warm pool's refill.
// Every one of them is a machine of its own: its hostname (and the files
// that name it), machine ID, boot ID (a vm's) and random stream are its
// own, and its clock is the host's, not the saved machine's. (The kernel of a vm
// guest less than 2 minutes up reseeds its generator every uptime/2
// seconds by itself, so the random streams of copies of this young image
// would part even without the node's seed; it is an older image, a live
// fork of a long-running sandbox, whose copies would share theirs for up
// to a minute.)
func TestMemoryStart(t *testing.T) {
	for _, rt := range []string{"gvisor", "vm"} {
		t.Run(rt, func(t *testing.T) {
			needRuntime(t, rt)
			testMemoryStart(t, rt)
		})
	}
}

func testMemoryStart(t *testing.T, rt string) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", shared.log.tail(40))
		}
	})
	ctx := context.Background()
	c := shared.client()
	create := func() api.Sandbox {
		t.Helper()
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
			Runtime: rt, MemoryMB: memoryStartMB, TimeoutSeconds: 300,
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
		t.Logf("create %s: %v", sb.ID, time.Since(t0).Round(time.Millisecond))
		return *sb
	}
	// The second boot of a shape has the node prepare its image.
	first, second := create(), create()
	var img api.MemoryImage
	wait.For(t, 90*time.Second, "the memory image ready", func() bool {
		var ok bool
		img, ok = memoryImage(t, rt, memoryStartMB)
		if ok && img.State == "failed" {
			t.Fatalf("memory image failed: %+v\ndaemon log:\n%s", img, shared.log.tail(30))
		}
		return ok && img.State == "ready"
	})
	t.Logf("image: %+v", img)
	if img.Bytes <= 0 || img.Starts != 0 {
		t.Errorf("image %+v: want its bytes counted and no start yet", img)
	}

	// The image ages, so that a clock left as it was saved would show.
	time.Sleep(2 * time.Second)
	ids := []string{first.ID, second.ID}
	for range 3 {
		ids = append(ids, create().ID)
	}
	if now, _ := memoryImage(t, rt, memoryStartMB); now.Starts != 3 {
		t.Errorf("image starts after 3 creates: %d, want 3 (the creates booted)", now.Starts)
	}

	// A pool refills from the image.
	if _, err := c.SetPool(ctx, "default", api.PoolSpec{Runtime: rt, Min: 1, MemoryMB: memoryStartMB, CPUs: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeletePool(context.Background(), "default", rt) })
	wait.For(t, 60*time.Second, "the pool's member ready", func() bool {
		pools, err := c.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pools {
			if p.Runtime == rt && p.Ready == 1 {
				return true
			}
		}
		return false
	})
	if now, _ := memoryImage(t, rt, memoryStartMB); now.Starts != 4 {
		t.Errorf("image starts after the pool filled: %d, want 4 (the member booted)", now.Starts)
	}
	ids = append(ids, create().ID)

	seen := map[string]string{}
	unique := func(what, v, id string) {
		if other, ok := seen[what+v]; ok {
			t.Errorf("%s and %s share their %s %q", other, id, what, v)
		}
		seen[what+v] = id
	}
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, id := range ids {
		g := identityOf(t, id)
		t.Logf("%s: %+v", id, g)
		if g.hostname != id || g.etcHostname != id || g.hosts != "1" {
			t.Errorf("%s: hostname %q, /etc/hostname %q, /etc/hosts lines naming it %s: want its ID, and one line", id, g.hostname, g.etcHostname, g.hosts)
		}
		if !hex.MatchString(g.machineID) {
			t.Errorf("%s: machine ID %q, want 32 hex digits", id, g.machineID)
		}
		if g.clockSkew > time.Second {
			t.Errorf("%s: clock %v from the host's, want within 1 s", id, g.clockSkew)
		}
		unique("machine ID", g.machineID, id)
		if rt == "vm" {
			// gVisor's kernel draws its boot ID as it starts and keeps it
			// in its saved state: sandboxes from one gvisor image share
			// it (docs/SECURITY.md).
			unique("boot ID", g.bootID, id)
		}
		unique("random stream", g.random, id)
	}
}

// TestLiveFork: a fork of a running vm or gvisor sandbox keeps its
// memory: a process of the parent runs on in each of 4 children with what
// it held in memory, on the parent's disks (root and workspace) as they
// were, while each child is a machine of its own (hostname, machine ID,
// random stream, the host's time) and the parent runs on, stopped only
// while its memory was saved and its disk cloned.
func TestLiveFork(t *testing.T) {
	for _, rt := range []string{"gvisor", "vm"} {
		t.Run(rt, func(t *testing.T) {
			needRuntime(t, rt)
			testLiveFork(t, rt)
		})
	}
}

func testLiveFork(t *testing.T, rt string) {
	ctx := context.Background()
	c := shared.client()
	const mem = 416 // a shape of its own: no memory image
	parent, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
		Runtime: rt, MemoryMB: mem, WorkspaceMB: 64, TimeoutSeconds: 300, Env: map[string]string{"ROLE": "parent"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), parent.ID) })
	shared.sh(t, parent.ID, "echo kept > /workspace/w.txt")
	// The process keeps a secret in its memory only, and writes it to a
	// file named after itself every 0.2 s.
	pid := strings.TrimSpace(shared.sh(t, parent.ID, `head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' > /root/disk-secret
		nohup sh -c 'x=$(cat /root/disk-secret); rm /root/disk-secret; while :; do echo "$x" > /root/mem-$$; sleep 0.2; done' >/dev/null 2>&1 &
		echo $!`))
	secret := func(id string) string {
		t.Helper()
		var got string
		wait.For(t, 30*time.Second, "the process's file in "+id, func() bool {
			got = strings.TrimSpace(shared.sh(t, id, "cat /root/mem-"+pid+" 2>/dev/null; true"))
			return got != ""
		})
		return got
	}
	want := secret(parent.ID)

	if _, err := c.Fork(ctx, parent.ID, api.ForkRequest{Count: 1, SandboxSpec: api.SandboxSpec{MemoryMB: mem + 64}}); err == nil {
		t.Error("a live fork with another memory size was not refused")
	}
	t0 := time.Now()
	res, err := c.Fork(ctx, parent.ID, api.ForkRequest{Count: 4})
	if err != nil {
		t.Fatalf("fork: %v\ndaemon log:\n%s", err, shared.log.tail(30))
	}
	t.Logf("fork of 4: %v; the parent was stopped %.1f ms", time.Since(t0).Round(time.Millisecond), res.PausedMs)
	if len(res.Sandboxes) != 4 || res.PausedMs <= 0 {
		t.Fatalf("fork = %+v; want 4 children and the pause", res)
	}
	ids := []string{parent.ID}
	for _, kid := range res.Sandboxes {
		t.Cleanup(func() { c.DeleteSandbox(context.Background(), kid.ID) })
		ids = append(ids, kid.ID)
		if kid.Runtime != rt || kid.MemoryMB != mem || kid.WorkspaceMB != 64 || kid.Origin != res.Snapshot.ID {
			t.Errorf("child %+v: want a %s sandbox of %d MiB with a 64 MiB workspace from %s", kid, rt, mem, res.Snapshot.ID)
		}
		// The process runs on with its memory: its file, removed, comes
		// back with the secret that is on no disk.
		shared.sh(t, kid.ID, "rm -f /root/mem-"+pid)
		if got := secret(kid.ID); got != want {
			t.Errorf("child %s: the parent's process wrote %q, want %q", kid.ID, got, want)
		}
		if got := shared.sh(t, kid.ID, "printenv ROLE; test -e /root/disk-secret && echo on-disk || echo gone; cat /workspace/w.txt; echo "+kid.ID+" > /workspace/w.txt"); got != "parent\ngone\nkept\n" {
			t.Errorf("child %s: env, disk and workspace = %q", kid.ID, got)
		}
	}
	seen := map[string]string{}
	unique := func(what, v, id string) {
		if other, ok := seen[what+v]; ok {
			t.Errorf("%s and %s share their %s %q", other, id, what, v)
		}
		seen[what+v] = id
	}
	for _, id := range ids {
		g := identityOf(t, id)
		t.Logf("%s: %+v", id, g)
		if g.hostname != id || g.etcHostname != id || g.hosts != "1" {
			t.Errorf("%s: hostname %q, /etc/hostname %q, /etc/hosts lines naming it %s", id, g.hostname, g.etcHostname, g.hosts)
		}
		if g.clockSkew > time.Second {
			t.Errorf("%s: clock %v from the host's, want within 1 s", id, g.clockSkew)
		}
		unique("machine ID", g.machineID, id)
		unique("random stream", g.random, id)
	}
	// The parent runs on, its workspace its own.
	if got := shared.sh(t, parent.ID, "cat /workspace/w.txt"); got != "kept\n" {
		t.Errorf("the parent's workspace after its children wrote theirs: %q", got)
	}
	shared.sh(t, parent.ID, "rm -f /root/mem-"+pid)
	if got := secret(parent.ID); got != want {
		t.Errorf("the parent after the fork: %q, want %q", got, want)
	}
}
