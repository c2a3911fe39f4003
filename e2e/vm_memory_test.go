//go:build linux

package e2e

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/wait"
)

// memoryStartMB is the memory of the vm sandboxes of TestVMMemoryStart: a
// shape no other test asks for, so that the image is this test's alone.
const memoryStartMB = 448

// memoryImage is the shared daemon's memory image of the default template
// with memoryMB, or ok false.
func memoryImage(t testing.TB, memoryMB int64) (api.MemoryImage, bool) {
	t.Helper()
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range info.MemoryImages {
		if img.Template == "default" && img.MemoryMB == memoryMB && img.VCPUs == 1 {
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
// the host's.
func identityOf(t *testing.T, id string) guestIdentity {
	t.Helper()
	before := time.Now()
	out := shared.sh(t, id, `hostname; cat /etc/hostname; grep -c "$(hostname)" /etc/hosts; cat /etc/machine-id;
		cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo; date +%s.%N`)
	after := time.Now()
	f := strings.Split(strings.TrimSpace(out), "\n")
	if len(f) != 7 {
		t.Fatalf("identity of %s: %q", id, out)
	}
	secs, err := strconv.ParseFloat(f[6], 64)
	if err != nil {
		t.Fatalf("date in %s: %q", id, f[6])
	}
	guest := time.Unix(0, int64(secs*1e9))
	mid := before.Add(after.Sub(before) / 2)
	return guestIdentity{hostname: f[0], etcHostname: f[1], hosts: f[2], machineID: f[3], bootID: f[4], random: f[5],
		clockSkew: time.Duration(math.Abs(float64(guest.Sub(mid))))}
}

// TestVMMemoryStart: once two vm sandboxes of a shape have booted, the
// node saves a booted machine of that shape, and later sandboxes of it start
// from that memory instead of booting, as does a vm warm pool's refill.
// Every one of them is a machine of its own: its hostname (and the files
// that name it), machine ID, boot ID and random stream are its own, and
// its clock is the host's, not the saved machine's. (The kernel of a
// guest less than 2 minutes up reseeds its generator every uptime/2
// seconds by itself, so the random streams of copies of this young image
// would part even without the node's seed; it is an older image, a live
// fork of a long-running sandbox, whose copies would share theirs for up
// to a minute.)
func TestVMMemoryStart(t *testing.T) {
	needVM(t)
	ctx := context.Background()
	c := shared.client()
	create := func() api.Sandbox {
		t.Helper()
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
			Runtime: "vm", MemoryMB: memoryStartMB, TimeoutSeconds: 300,
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
		img, ok = memoryImage(t, memoryStartMB)
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
	if now, _ := memoryImage(t, memoryStartMB); now.Starts != 3 {
		t.Errorf("image starts after 3 creates: %d, want 3 (the creates booted)", now.Starts)
	}

	// A vm pool refills from the image.
	if _, err := c.SetPool(ctx, "default", api.PoolSpec{Runtime: "vm", Min: 1, MemoryMB: memoryStartMB, CPUs: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeletePool(context.Background(), "default", "vm") })
	wait.For(t, 60*time.Second, "the vm pool's member ready", func() bool {
		pools, err := c.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pools {
			if p.Runtime == "vm" && p.Ready == 1 {
				return true
			}
		}
		return false
	})
	if now, _ := memoryImage(t, memoryStartMB); now.Starts != 4 {
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
		unique("boot ID", g.bootID, id)
		unique("random stream", g.random, id)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", shared.log.tail(40))
	}
}
