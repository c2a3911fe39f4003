//go:build linux

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"warren/internal/osthread"
)

// The suite's own internet: a network namespace on this machine holding
// every address a sandbox is sent to in a test. Its HTTP servers also
// serve /bytes?n=N (N zero bytes) and /sink (reads the body), for
// throughput. Its addresses are picked when the suite starts from blocks
// the host does not use (hostnet_test.go), and only the suite's sandboxes
// are routed to them: a rule sends packets from the pools of the suite's
// daemons to a table of the suite's, which holds a /32 for each served
// address, a throw route for each pool (the host's own traffic to its
// sandboxes keeps the main table) and an unreachable default, so that a
// test sandbox's packet lands in the namespace or nowhere, never off this
// machine, whatever the policy under test does. The daemons' resolvers ask
// its DNS server, never the host's.
var (
	// inetAllowed and inetDenied serve HTTP on port 80 (answering their
	// own address), as do the metadata address and inetPrivate.
	inetAllowed, inetDenied, inetPrivate netip.Addr
	inetMeta                             = netip.MustParseAddr("169.254.169.254")
	// inetDNS answers the names of testNames, and refuses others. It is
	// the far end of the link to the namespace.
	inetDNS netip.AddrPort
	// testNames are the test internet's DNS names.
	testNames map[string]netip.Addr
)

// internet is the running test internet.
type internet struct {
	ns       string
	hostEnd  string
	hostAddr netip.Addr // the host end's address
	table    int        // the suite's routing table
	pref     int        // the priority of its rules
	host     *hostUse   // what the host used when the suite started
	servers  []interface{ Close() error }

	mu       sync.Mutex
	accepted map[string]int    // connections each HTTP address accepted
	pools    []netip.Prefix    // the suite's daemons' pools, routed here
	files    map[string][]byte // what its HTTP servers serve under /files/ (serve)
	seen     []seenRequest     // what its secure servers received (secure_inet_test.go)
	caDir    string            // holds secureCAFile
}

// serve makes every HTTP server of the test internet answer GET path
// (under /files/) with body.
func (in *internet) serve(path string, body []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.files == nil {
		in.files = map[string][]byte{}
	}
	in.files[path] = body
}

// inet is the suite's test internet, set up by runMain.
var inet *internet

// served are the addresses the test internet answers on.
func (in *internet) served() []netip.Addr {
	return []netip.Addr{inetAllowed, inetDenied, inetPrivate, inetMeta, inetDNS.Addr(), inetSecure, inetUntrusted}
}

// startInternet picks the test internet's addresses, makes its namespace,
// the link to it and the suite's table, and starts its HTTP and DNS
// servers. A collision it cannot avoid fails at once, saying why.
func startInternet() (_ *internet, err error) {
	b := make([]byte, 4)
	rand.Read(b)
	in := &internet{ns: "wtest-inet-" + hex.EncodeToString(b), accepted: map[string]int{}}
	in.hostEnd = "wti" + hex.EncodeToString(b)
	nsEnd := in.hostEnd + "n"
	removeStaleInternets()
	removeStaleRoutes()
	if in.host, err = readHostUse(); err != nil {
		return nil, err
	}
	pub, err := in.host.pick("public addresses", inetPublic)
	if err != nil {
		return nil, err
	}
	priv, err := in.host.pick("private address", inetPrivateBlocks)
	if err != nil {
		return nil, err
	}
	if slices.Contains(in.host.addrs, inetMeta) {
		return nil, fmt.Errorf("test internet: %s is an address of this host, so no test can route it to the test internet", inetMeta)
	}
	nth := func(p netip.Prefix, n byte) netip.Addr {
		a := p.Addr().As4()
		a[3] = n
		return netip.AddrFrom4(a)
	}
	in.hostAddr, inetDNS = nth(pub, 1), netip.AddrPortFrom(nth(pub, 2), 53)
	inetAllowed, inetDenied, inetPrivate = nth(pub, 10), nth(pub, 11), nth(priv, 10)
	inetSecure, inetUntrusted = nth(pub, 12), nth(pub, 13)
	testNames = map[string]netip.Addr{
		"allowed.test.":     inetAllowed,
		"denied.test.":      inetDenied,
		"metadata.test.":    inetMeta,
		"private.test.":     inetPrivate,
		untrustedName + ".": inetUntrusted,
	}
	for _, n := range secureNames {
		testNames[n+"."] = inetSecure
	}
	if in.table, in.pref, err = freeTable(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			in.stop()
		}
	}()
	far := inetDNS.Addr().String()
	table := fmt.Sprint(in.table)
	steps := [][]string{
		{"netns", "add", in.ns},
		{"link", "add", in.hostEnd, "type", "veth", "peer", "name", nsEnd},
		{"link", "set", nsEnd, "netns", in.ns},
		// /32s with a peer: the main table gains only the route to far.
		{"addr", "add", in.hostAddr.String() + "/32", "peer", far + "/32", "dev", in.hostEnd},
		{"link", "set", in.hostEnd, "up"},
		{"-n", in.ns, "addr", "add", far + "/32", "peer", in.hostAddr.String() + "/32", "dev", nsEnd},
		{"-n", in.ns, "link", "set", nsEnd, "up"},
		{"-n", in.ns, "link", "set", "lo", "up"},
		{"-n", in.ns, "route", "add", "default", "via", in.hostAddr.String()},
		{"route", "add", "unreachable", "default", "table", table, "proto", fmt.Sprint(routeProto)},
	}
	for _, a := range in.served() {
		if a != inetDNS.Addr() {
			steps = append(steps, []string{"-n", in.ns, "addr", "add", a.String() + "/32", "dev", "lo"})
		}
		via := []string{"via", far}
		if a == inetDNS.Addr() {
			via = nil // the far end itself
		}
		steps = append(steps, append(append([]string{"route", "add", a.String() + "/32"}, via...),
			"dev", in.hostEnd, "table", table, "proto", fmt.Sprint(routeProto)))
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("test internet: ip %v: %v: %s", s, err, out)
		}
	}
	for _, a := range []netip.Addr{inetAllowed, inetDenied, inetPrivate, inetMeta} {
		ln, err := in.listen("tcp", netip.AddrPortFrom(a, 80).String())
		if err != nil {
			return nil, err
		}
		addr := a.String()
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/bytes": // n zero bytes, for throughput
					n, _ := strconv.Atoi(r.URL.Query().Get("n"))
					w.Header().Set("Content-Length", strconv.Itoa(n))
					io.CopyN(w, zeros{}, int64(n))
				case "/sink": // reads the body, answers its size
					n, _ := io.Copy(io.Discard, r.Body)
					fmt.Fprintf(w, "%d\n", n)
				case "/files/" + strings.TrimPrefix(r.URL.Path, "/files/"):
					in.mu.Lock()
					body, ok := in.files[r.URL.Path]
					in.mu.Unlock()
					if !ok {
						http.NotFound(w, r)
						return
					}
					w.Write(body)
				default:
					fmt.Fprintf(w, "hello from %s\n", addr)
				}
			}),
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					in.mu.Lock()
					in.accepted[addr]++
					in.mu.Unlock()
				}
			},
		}
		go srv.Serve(ln.(net.Listener))
		in.servers = append(in.servers, srv)
	}
	if err := in.startSecure(); err != nil {
		return nil, err
	}
	for _, network := range []string{"udp", "tcp"} {
		l, err := in.listen(network, inetDNS.String())
		if err != nil {
			return nil, err
		}
		srv := &dns.Server{Handler: dns.HandlerFunc(answerTestName)}
		if pc, ok := l.(net.PacketConn); ok {
			srv.PacketConn = pc
		} else {
			srv.Listener = l.(net.Listener)
		}
		go srv.ActivateAndServe()
		in.servers = append(in.servers, shutdown{srv})
	}
	return in, nil
}

// routePool sends the sandboxes of a daemon's pool to the test internet
// (once per pool): a throw route first, so that the host's own packets
// to the pool's addresses, which come from the pool too, keep the main
// table.
func (in *internet) routePool(pool netip.Prefix) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if slices.Contains(in.pools, pool) {
		return nil
	}
	table := fmt.Sprint(in.table)
	for _, s := range [][]string{
		{"route", "add", "throw", pool.String(), "table", table, "proto", fmt.Sprint(routeProto)},
		{"rule", "add", "from", pool.String(), "lookup", table, "pref", fmt.Sprint(in.pref)},
	} {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("test internet: ip %v: %v: %s", s, err, out)
		}
	}
	in.pools = append(in.pools, pool)
	return nil
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type shutdown struct{ s *dns.Server }

func (s shutdown) Close() error { return s.s.Shutdown() }

// listen opens a listening socket inside the test internet's namespace:
// a socket belongs to the namespace of the thread that makes it.
func (in *internet) listen(network, addr string) (l any, err error) {
	osthread.Throwaway(func() {
		ns, err2 := netns.GetFromName(in.ns)
		if err2 != nil {
			err = err2
			return
		}
		defer ns.Close()
		if err = netns.Set(ns); err != nil {
			return
		}
		if network == "udp" {
			l, err = net.ListenPacket(network, addr)
		} else {
			l, err = net.Listen(network, addr)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("test internet: listen %s %s: %w", network, addr, err)
	}
	return l, nil
}

// answerTestName is the test internet's DNS server.
func answerTestName(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	qs := q.Question[0]
	addr, ok := testNames[strings.ToLower(qs.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case qs.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: qs.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A:   addr.AsSlice(),
		})
	}
	w.WriteMsg(m)
}

// hits is how many connections the address's HTTP server accepted.
func (in *internet) hits(addr netip.Addr) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.accepted[addr.String()]
}

func (in *internet) stop() {
	for _, s := range in.servers {
		s.Close()
	}
	if in.table != 0 {
		for exec.Command("ip", "rule", "del", "table", fmt.Sprint(in.table)).Run() == nil {
		}
		exec.Command("ip", "route", "flush", "table", fmt.Sprint(in.table)).Run()
	}
	exec.Command("ip", "link", "del", in.hostEnd).Run()
	exec.Command("ip", "netns", "del", in.ns).Run()
	if in.caDir != "" {
		os.RemoveAll(in.caDir)
	}
}

// removeStaleInternets removes the test internets of runs killed before
// their cleanup (their namespaces are named for it). Their host ends go
// first: a link would die with its namespace, but only once the kernel
// gets round to destroying it, and until then its addresses are in the
// way of this run's.
func removeStaleInternets() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "wtest-inet-") {
			exec.Command("ip", "link", "del", "wti"+strings.TrimPrefix(f[0], "wtest-inet-")).Run()
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// daemonNetFlags are the network flags of a daemon: the test internet's
// DNS server, a pool of its own that nothing else on the host uses (picked
// by the daemon at its first start on a data directory, the same one again
// when it restarts there; startDaemonWith routes it to the test internet),
// previewDomain, and the test internet's own CA for egress rules.
func daemonNetFlags() []string {
	return []string{"--dns-upstream", inetDNS.String(), "--net-pool", "auto", "--preview-domain", previewDomain,
		"--egress-trust", secureCAFile}
}

// previewDomain is the suite's preview domain: requests name it in their
// Host header; no DNS is involved.
const previewDomain = "preview.test"
