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
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"warren/internal/osthread"
)

// The suite's own internet: a network namespace on this machine holding
// every address a sandbox is sent to in a test, routed there from the host
// before any daemon starts. Its HTTP servers also serve /bytes?n=N (N zero
// bytes) and /sink (reads the body), for throughput. Whatever the policy under test does, a packet
// to one of these addresses lands in that namespace, never off this
// machine; and the daemons' resolvers ask its DNS server, never the
// host's.
var (
	// inetAllowed and inetDenied serve HTTP on port 80 (answering their
	// own address), as do the metadata address and inetPrivate.
	inetAllowed = netip.MustParseAddr("203.0.113.10")
	inetDenied  = netip.MustParseAddr("203.0.113.11")
	inetPrivate = netip.MustParseAddr("10.254.0.10")
	inetMeta    = netip.MustParseAddr("169.254.169.254")
	// inetDNS answers the names of testNames, and refuses others.
	inetDNS = netip.MustParseAddrPort("203.0.113.53:53")
)

// testNames are the test internet's DNS names.
var testNames = map[string]netip.Addr{
	"allowed.test.":  inetAllowed,
	"denied.test.":   inetDenied,
	"metadata.test.": inetMeta,
	"private.test.":  inetPrivate,
}

// inetRoutes are routed from the host to the test internet.
var inetRoutes = []string{"203.0.113.0/24", inetMeta.String() + "/32", inetPrivate.String() + "/32"}

// internet is the running test internet.
type internet struct {
	ns       string
	hostEnd  string
	servers  []interface{ Close() error }
	mu       sync.Mutex
	accepted map[string]int // connections each HTTP address accepted
}

// inet is the suite's test internet, set up by runMain.
var inet *internet

// startInternet makes the namespace, its addresses, the host's routes to
// them, and starts its HTTP and DNS servers.
func startInternet() (_ *internet, err error) {
	b := make([]byte, 4)
	rand.Read(b)
	in := &internet{ns: "wtest-inet-" + hex.EncodeToString(b), accepted: map[string]int{}}
	in.hostEnd = "wti" + hex.EncodeToString(b)
	nsEnd := in.hostEnd + "n"
	defer func() {
		if err != nil {
			in.stop()
		}
	}()
	removeStaleInternets()
	steps := [][]string{
		{"netns", "add", in.ns},
		{"link", "add", in.hostEnd, "type", "veth", "peer", "name", nsEnd},
		{"link", "set", nsEnd, "netns", in.ns},
		{"addr", "add", "198.51.100.1/30", "dev", in.hostEnd},
		{"link", "set", in.hostEnd, "up"},
		{"-n", in.ns, "addr", "add", "198.51.100.2/30", "dev", nsEnd},
		{"-n", in.ns, "link", "set", nsEnd, "up"},
		{"-n", in.ns, "link", "set", "lo", "up"},
		{"-n", in.ns, "route", "add", "default", "via", "198.51.100.1"},
	}
	for _, a := range []netip.Addr{inetAllowed, inetDenied, inetPrivate, inetMeta, inetDNS.Addr()} {
		steps = append(steps, []string{"-n", in.ns, "addr", "add", a.String() + "/32", "dev", "lo"})
	}
	for _, r := range inetRoutes {
		// replace: a run killed before its cleanup may have left them.
		steps = append(steps, []string{"route", "replace", r, "via", "198.51.100.2"})
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
	for _, r := range inetRoutes {
		exec.Command("ip", "route", "del", r).Run()
	}
	exec.Command("ip", "link", "del", in.hostEnd).Run()
	exec.Command("ip", "netns", "del", in.ns).Run()
}

// removeStaleInternets removes the test internets of runs killed before
// their cleanup (their namespaces are named for it; their links die with
// them).
func removeStaleInternets() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "wtest-inet-") {
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// daemonNetFlags are the network flags of a daemon on dataDir: the test
// internet's DNS server, a pool of its own (the same one again when the
// daemon restarts on the same data directory), and previewDomain.
func daemonNetFlags(dataDir string) []string {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	p, ok := pools[dataDir]
	if !ok {
		p = fmt.Sprintf("10.%d.0.0/16", 201+len(pools))
		pools[dataDir] = p
	}
	return []string{"--dns-upstream", inetDNS.String(), "--net-pool", p, "--preview-domain", previewDomain}
}

// previewDomain is the suite's preview domain: requests name it in their
// Host header; no DNS is involved.
const previewDomain = "preview.test"

var (
	poolsMu sync.Mutex
	pools   = map[string]string{}
)
