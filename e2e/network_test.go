//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// probeScript tries each target from inside a sandbox and prints one JSON
// object per target: a TCP connect (and an HTTP GET when it connects) to
// host:port, or a name lookup for "dns:name". It never waits more than 3 s
// per target.
const probeScript = `
import json, socket, sys, time
for t in sys.argv[1:]:
    r = {"target": t}
    t0 = time.monotonic()
    try:
        if t.startswith("dns:"):
            r["addr"] = socket.gethostbyname(t[4:])
        else:
            host, port = t.rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=3)
            s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            s.settimeout(3)
            r["body"] = s.recv(4096).decode(errors="replace").split("\r\n\r\n", 1)[-1].strip()
            s.close()
        r["ok"] = True
    except Exception as e:
        r["ok"] = False
        r["error"] = "%s: %s" % (e.__class__.__name__, e)
    r["ms"] = int((time.monotonic() - t0) * 1000)
    print(json.dumps(r))
`

// probeResult is one line of probeScript.
type probeResult struct {
	Target string `json:"target"`
	OK     bool   `json:"ok"`
	Addr   string `json:"addr"`
	Body   string `json:"body"`
	Error  string `json:"error"`
	MS     int    `json:"ms"`
}

// probe runs probeScript in sandbox id against targets.
func probe(t *testing.T, id string, targets ...string) map[string]probeResult {
	t.Helper()
	res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{
		Cmd: append([]string{"python3", "-c", probeScript}, targets...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("probe exited %d: %s", res.ExitCode, res.Stderr)
	}
	out := map[string]probeResult{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		var r probeResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("probe output %q: %v", line, err)
		}
		out[r.Target] = r
	}
	return out
}

// wantReached checks that a probe got through (and, for HTTP, got the
// test host's answer).
func wantReached(t *testing.T, got map[string]probeResult, target string) {
	t.Helper()
	r := got[target]
	if !r.OK {
		t.Errorf("%s: not reached: %s", target, r.Error)
	}
}

// wantRefused checks that a probe was refused by policy, and quickly: a
// denied connection fails at once with "No route to host" (the router's
// ICMP admin-prohibited), not by timing out or by a reset from a host that
// was reached; a denied name does not resolve.
func wantRefused(t *testing.T, got map[string]probeResult, target string) {
	t.Helper()
	r := got[target]
	want := "[Errno 113]" // EHOSTUNREACH
	if strings.HasPrefix(target, "dns:") {
		want = "gaierror"
	}
	switch {
	case r.OK:
		t.Errorf("%s: reached (%q %q), want refused", target, r.Addr, r.Body)
	case !strings.Contains(r.Error, want):
		t.Errorf("%s: failed with %q, want %s", target, r.Error, want)
	case r.MS > 1000:
		t.Errorf("%s: refused after %d ms (%s), want at once", target, r.MS, r.Error)
	}
}

func hostPort(a fmt.Stringer, port int) string { return net.JoinHostPort(a.String(), fmt.Sprint(port)) }

// TestNetworkDefault is the default policy: the internet (the test
// internet) is reachable by name and address; private ranges, the metadata
// address, the host, other sandboxes and other DNS servers are not, and
// every refusal fails fast and is counted.
func TestNetworkDefault(t *testing.T) {
	need(t)
	ctx := context.Background()
	a, b := shared.newSandbox(t), shared.newSandbox(t)
	cl := shared.client()

	// b serves on 8080; a must not reach it by any address it could know.
	if _, err := cl.StartProcess(ctx, b, api.ExecRequest{Shell: "python3 -m http.server 8080 >/dev/null 2>&1"}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, b, 8080)
	// A listener on the host, on every address: the sandbox must not reach
	// the host's services.
	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	hostSvc := hostLn.Addr().(*net.TCPAddr).Port
	u, _ := url.Parse(shared.url)
	_, apiPort, _ := net.SplitHostPort(u.Host)
	bNode := nodeAddress(t, b)

	before := inet.hits(inetMeta) + inet.hits(inetPrivate) + inet.hits(inetDenied)
	got := probe(t, a,
		"dns:allowed.test", hostPort(inetAllowed, 80), "allowed.test:80",
		hostPort(inetMeta, 80), hostPort(inetPrivate, 80),
		bNode+":8080", "10.0.2.2:8080", "10.0.2.2:"+apiPort,
		"198.51.100.1:"+fmt.Sprint(hostSvc), hostGateway(t)+":"+fmt.Sprint(hostSvc),
		hostPort(inetDNS.Addr(), 53),
	)
	if r := got["dns:allowed.test"]; r.Addr != inetAllowed.String() {
		t.Errorf("allowed.test resolved to %q (%s), want %s", r.Addr, r.Error, inetAllowed)
	}
	for _, target := range []string{hostPort(inetAllowed, 80), "allowed.test:80"} {
		wantReached(t, got, target)
		if r := got[target]; !strings.Contains(r.Body, "hello from "+inetAllowed.String()) {
			t.Errorf("%s answered %q", target, r.Body)
		}
	}
	for _, target := range []string{
		hostPort(inetMeta, 80), hostPort(inetPrivate, 80), bNode + ":8080", "10.0.2.2:8080", "10.0.2.2:" + apiPort,
		"198.51.100.1:" + fmt.Sprint(hostSvc), hostGateway(t) + ":" + fmt.Sprint(hostSvc), hostPort(inetDNS.Addr(), 53),
	} {
		wantRefused(t, got, target)
	}
	if after := inet.hits(inetMeta) + inet.hits(inetPrivate) + inet.hits(inetDenied); after != before {
		t.Errorf("the metadata, private or denied test hosts accepted %d connections from a sandbox", after-before)
	}
	st, err := cl.Network(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if st.Address != "10.0.2.15" || st.Gateway != "10.0.2.2" || st.Denied < 3 {
		t.Errorf("network status %+v: want the sandbox's address and at least 3 denials", st)
	}
	// Inside, the sandbox sees its own address and resolver.
	res, err := cl.Exec(ctx, a, api.ExecRequest{Shell: "cat /etc/resolv.conf; grep $(hostname) /etc/hosts; cat /proc/net/route | wc -l"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "nameserver 10.0.2.2") || !strings.Contains(res.Stdout, "10.0.2.15\t"+a) {
		t.Errorf("resolv.conf and hosts: %q", res.Stdout)
	}
}

// TestNetworkPolicy sets policies at create and changes them live.
func TestNetworkPolicy(t *testing.T) {
	need(t)
	ctx := context.Background()
	cl := shared.client()
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"allowed.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.DeleteSandbox(context.Background(), sb.ID) })
	if len(sb.Network.Allow) != 1 {
		t.Errorf("created sandbox shows network %+v", sb.Network)
	}
	// Allow-list: the allowed name resolves and is reachable; its address
	// was pinned by the answer. Everything else is refused, by name too.
	got := probe(t, sb.ID, "allowed.test:80", "dns:denied.test", hostPort(inetDenied, 80))
	wantReached(t, got, "allowed.test:80")
	wantRefused(t, got, "dns:denied.test")
	wantRefused(t, got, hostPort(inetDenied, 80))

	// A deny CIDR overrides the allowed name.
	if _, err := cl.SetNetwork(ctx, sb.ID, api.NetworkPolicy{Allow: []string{"allowed.test"}, Deny: []string{inetAllowed.String() + "/32"}}); err != nil {
		t.Fatal(err)
	}
	got = probe(t, sb.ID, "allowed.test:80")
	wantRefused(t, got, "allowed.test:80")

	// An allow CIDR opens a private range, by address.
	if _, err := cl.SetNetwork(ctx, sb.ID, api.NetworkPolicy{Allow: []string{"10.254.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	got = probe(t, sb.ID, hostPort(inetPrivate, 80), hostPort(inetAllowed, 80), hostPort(inetMeta, 80))
	wantReached(t, got, hostPort(inetPrivate, 80))
	wantRefused(t, got, hostPort(inetAllowed, 80))
	wantRefused(t, got, hostPort(inetMeta, 80))

	// No policy opens the metadata address.
	if _, err := cl.SetNetwork(ctx, sb.ID, api.NetworkPolicy{Allow: []string{"169.254.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, probe(t, sb.ID, hostPort(inetMeta, 80)), hostPort(inetMeta, 80))

	// none: nothing, DNS included.
	st, err := cl.SetNetwork(ctx, sb.ID, api.NetworkPolicy{None: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Policy.None {
		t.Errorf("status after none: %+v", st)
	}
	got = probe(t, sb.ID, "dns:allowed.test", hostPort(inetAllowed, 80))
	wantRefused(t, got, "dns:allowed.test")
	wantRefused(t, got, hostPort(inetAllowed, 80))

	// Back to the default.
	if _, err := cl.SetNetwork(ctx, sb.ID, api.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	wantReached(t, probe(t, sb.ID, "allowed.test:80"), "allowed.test:80")

	// Bad policies are refused with the entry named, and change nothing.
	for _, bad := range []api.NetworkPolicy{
		{Allow: []string{"not a name"}}, {Deny: []string{"2001:db8::/32"}}, {Allow: []string{"10.0.0.0/33"}},
	} {
		_, err := cl.SetNetwork(ctx, sb.ID, bad)
		if !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("SetNetwork(%+v) = %v, want bad_request", bad, err)
		}
		if _, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &bad}); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("create with %+v = %v, want bad_request", bad, err)
		}
	}
	if st, err := cl.Network(ctx, sb.ID); err != nil || st.Policy.None || len(st.Policy.Allow) != 0 {
		t.Errorf("after refused changes: %+v, %v", st, err)
	}
}

// nodeAddress is a sandbox's node-side address (its router's uplink), read
// off the host's link to it.
func nodeAddress(t *testing.T, id string) string {
	t.Helper()
	ifc, err := net.InterfaceByName("ws" + strings.TrimPrefix(id, "sb-")[:13])
	if err != nil {
		t.Fatalf("host link of %s: %v", id, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil || len(addrs) == 0 {
		t.Fatalf("host link of %s has no address: %v", id, err)
	}
	ip := addrs[0].(*net.IPNet).IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

// hostGateway is an address of the host on its uplink (or any non-loopback
// interface), which a sandbox must not reach.
func hostGateway(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "10.2") {
			return ipn.IP.String()
		}
	}
	t.Fatal("the host has no IPv4 address but loopback")
	return ""
}

// waitServing waits until something listens on port in sandbox id.
func waitServing(t *testing.T, id string, port int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("port %d of %s listening", port, id), func() bool {
		res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{
			Cmd: []string{"python3", "-c", fmt.Sprintf("import socket; socket.create_connection(('127.0.0.1', %d), timeout=1)", port)},
		})
		return err == nil && res.ExitCode == 0
	})
}
