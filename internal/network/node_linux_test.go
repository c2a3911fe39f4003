//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"warren/api"
	"warren/internal/guest"
	"warren/internal/network/policy"
	"warren/internal/wait"
)

// testPool is a pool of three sandbox slots that nothing on the host uses:
// no address, route or live warren server's pool (checked at first use),
// and testUpstreams a resolver upstream nothing answers on (no query leaves
// the machine).
var (
	testPool = sync.OnceValue(func() netip.Prefix {
		for i := range 256 {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, byte(i), 0}), 28)
			if checkPoolFree(DefaultRunDir, p, false) == nil {
				return p
			}
		}
		panic("no /28 of 10.250.0.0/16 is free on this host for the network tests")
	})
	testUpstreams = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}
)

func newTestNode(t *testing.T, runDir string) *Node {
	t.Helper()
	return newTestNodeWith(t, Config{RunDir: runDir})
}

// newTestNodeWith starts a node on testPool with cfg's other settings.
func newTestNodeWith(t *testing.T, cfg Config) *Node {
	t.Helper()
	cfg.Pool, cfg.Upstreams = testPool(), testUpstreams
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cleanupNode removes what a test node leaves on the host for good: its
// host table, the resolver's address and its run directory.
func cleanupNode(n *Node) {
	n.Close()
	Release(n.cfg.RunDir, n.cfg.Pool)
}

// testSandboxNS makes a network namespace standing for a container's.
func testSandboxNS(t *testing.T, name string) string {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return "/run/netns/" + name
}

// TestNodeLifecycle attaches routers until the pool is full, plugs one
// into a sandbox namespace, detaches, adopts after a "restart" and sweeps,
// and checks that the host keeps nothing of a sandbox that is gone.
func TestNodeLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces, links and nftables rules")
	}
	runDir := t.TempDir()
	n := newTestNode(t, runDir)
	t.Cleanup(func() {
		for _, id := range []string{"sb-aaaaaaaaaaaaaaaaaaaa", "sb-bbbbbbbbbbbbbbbbbbbb", "sb-cccccccccccccccccccc"} {
			if s, ok := n.Lookup(id); ok {
				n.Detach(s)
			}
		}
		cleanupNode(n)
	})
	if _, err := New(Config{Pool: testPool(), RunDir: runDir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second node on the same pool: %v, want refused", err)
	}

	ctx := context.Background()
	ids := []string{"sb-aaaaaaaaaaaaaaaaaaaa", "sb-bbbbbbbbbbbbbbbbbbbb", "sb-cccccccccccccccccccc"}
	var sbs []*Sandbox
	for i, id := range ids {
		s, err := n.Attach(ctx, id, policy.Policy{}, Egress{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Slot() != i+1 {
			t.Errorf("%s got slot %d, want %d", id, s.Slot(), i+1)
		}
		sbs = append(sbs, s)
	}
	if _, err := n.Attach(ctx, "sb-dddddddddddddddddddd", policy.Policy{}, Egress{}); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("attach beyond the pool: %v, want full", err)
	}

	// The sandbox's side of a plugged namespace.
	path := testSandboxNS(t, "wtest-node-a")
	if err := sbs[0].PlugNetNS(path); err != nil {
		t.Fatal(err)
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	eth, err := h.LinkByName(guest.Iface)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := h.AddrList(eth, netlink.FAMILY_V4)
	if len(addrs) != 1 || !addrs[0].IP.Equal(guest.Address.AsSlice()) {
		t.Errorf("sandbox interface addresses %v, want %s", addrs, guest.Address)
	}

	// A policy change reaches the router; counters read.
	pol, _ := policy.Parse(api.NetworkPolicy{Allow: []string{"example.com"}})
	if err := sbs[0].SetPolicy(pol, Egress{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs[0].Counters(); err != nil {
		t.Fatal(err)
	}

	// Detach leaves nothing, and frees the slot.
	if err := n.Detach(sbs[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(sbs[1].host); err == nil {
		t.Error("detached sandbox's host link is still there")
	}
	if _, err := os.Stat(filepath.Join(n.dir, ids[1])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("detached sandbox's router file: %v", err)
	}
	if err := sbs[1].SetPolicy(policy.Policy{}, Egress{}); !errors.Is(err, errDetached) {
		t.Errorf("policy of a detached sandbox: %v, want errDetached", err)
	}

	// A restart: a new node adopts the routers at their slots; one no
	// sandbox took back is swept.
	n.Close()
	n = newTestNode(t, runDir)
	a, err := n.Adopt(ids[0], 1, pol, Egress{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Adopt(ids[1], 2, pol, Egress{}); err == nil {
		t.Error("adopted a detached sandbox's router")
	}
	if err := n.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.dir, ids[2])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("swept sandbox's router file: %v", err)
	}
	if _, err := netlink.LinkByName(sbs[2].host); err == nil {
		t.Error("swept sandbox's host link is still there")
	}
	if _, err := netlink.LinkByName(sbs[0].host); err != nil {
		t.Errorf("kept sandbox's host link: %v", err)
	}
	if s, err := n.Attach(ctx, "sb-dddddddddddddddddddd", policy.Policy{}, Egress{}); err != nil || s.Slot() != 2 {
		t.Errorf("attach after the sweep: slot %v, %v; want the lowest free slot, 2", s, err)
	} else {
		n.Detach(s)
	}
	if err := n.Detach(a); err != nil {
		t.Fatal(err)
	}
}

// TestNodeWarm keeps two routers ready: an attach takes one (its file
// renamed to the sandbox's ID), with its policy applied when it is not the
// default; the pool makes another; Close removes the ready ones and leaves
// attached ones.
func TestNodeWarm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces, links and nftables rules")
	}
	runDir := t.TempDir()
	n := newTestNodeWith(t, Config{RunDir: runDir, Warm: 2})
	closed := false
	t.Cleanup(func() {
		if !closed {
			cleanupNode(n)
		}
	})
	n.StartWarm()
	waitWarm := func(want int) {
		t.Helper()
		wait.For(t, 10*time.Second, fmt.Sprintf("%d warm routers", want), func() bool { return len(n.pool.Ready()) == want })
	}
	waitWarm(2)
	pol, _ := policy.Parse(api.NetworkPolicy{None: true})
	s, err := n.Attach(context.Background(), "sb-aaaaaaaaaaaaaaaaaaaa", pol, Egress{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Slot() != 1 && s.Slot() != 2 {
		t.Errorf("attach took slot %d, want a warm one (1 or 2)", s.Slot())
	}
	if _, err := os.Stat(filepath.Join(n.dir, "sb-aaaaaaaaaaaaaaaaaaaa")); err != nil {
		t.Errorf("taken router's file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.dir, fmt.Sprintf("warm-%d", s.Slot()))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("taken router's warm file: %v", err)
	}
	s.mu.Lock()
	none := s.pol.None
	s.mu.Unlock()
	if !none {
		t.Error("the taken router kept the default policy")
	}
	if got, ok := n.Lookup("sb-aaaaaaaaaaaaaaaaaaaa"); !ok || got != s {
		t.Error("the taken router is not the sandbox's")
	}
	waitWarm(2) // slot 3, the pool's last
	if _, ok := n.lookup(slotAddr(testPool(), 3, 2)); ok {
		t.Error("the resolver knows a warm router as a sandbox")
	}
	warmHost := n.pool.Ready()[0].host
	closed = true
	cleanupNode(n)
	if _, err := netlink.LinkByName(warmHost); err == nil {
		t.Error("Close left a warm router's link")
	}
	entries, _ := os.ReadDir(n.dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "lock sb-aaaaaaaaaaaaaaaaaaaa" {
		t.Errorf("after Close the run dir holds %v, want the lock and the attached router", names)
	}
	if _, err := netlink.LinkByName(s.host); err != nil {
		t.Errorf("Close removed an attached router's link: %v", err)
	}
	s.destroy()
	if err := Release(runDir, testPool()); err != nil {
		t.Errorf("release once the last router is gone: %v", err)
	}
}
