package resolver

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"warren/api"
	"warren/internal/network/policy"
)

// zone is the test upstreams' data, in the zone file format.
const zone = `
a.w.test.        300   IN A     192.0.2.1
a.w.test.        300   IN A     192.0.2.2
short.w.test.    5     IN A     192.0.2.3
long.w.test.     86400 IN A     192.0.2.4
chain.w.test.    600   IN CNAME mid.w.test.
mid.w.test.      100   IN CNAME cdn.example.
cdn.example.     300   IN A     198.51.100.7
bad.w.test.      120   IN A     203.0.113.9
bad.w.test.      120   IN TXT   "bad"
txt.w.test.      300   IN TXT   "hello"
v6.w.test.       300   IN AAAA  2001:db8::1
slow.w.test.     300   IN A     192.0.2.5
tc.w.test.       300   IN A     192.0.2.6
private.w.test.  300   IN A     10.1.2.3
mixed.w.test.    300   IN A     10.1.2.3
mixed.w.test.    300   IN A     192.0.2.7
meta.w.test.     300   IN A     169.254.169.254
mx.w.test.       300   IN MX    10 mail.w.test.
mail.w.test.     300   IN A     10.9.9.9
4.3.2.1.in-addr.arpa. 300 IN PTR one.example.
com.             300   IN NS    a.gtld.example.
`

// upstream is a DNS server on 127.0.0.1, over UDP and TCP on one port,
// that answers from zone and records what it is asked. slow.w.test is
// answered after slowDelay; tc.w.test is truncated (TC, no records) over
// UDP; big.w.test has 60 A records.
type upstream struct {
	addr  netip.AddrPort
	rrs   map[string]map[uint16][]dns.RR
	rcode int // if not 0, every answer has this rcode and no records
	delay time.Duration
	// release ends the waits of slow.w.test (closed by releaseSlow).
	release     chan struct{}
	releaseOnce sync.Once

	mu                sync.Mutex // guards the fields below
	queries           []seen
	inflight, maxSlow int
}

type seen struct {
	name  string
	qtype uint16
	tcp   bool
}

const slowDelay = 500 * time.Millisecond

// startUpstream starts an upstream, with opts applied before it serves.
func startUpstream(t *testing.T, opts ...func(*upstream)) *upstream {
	t.Helper()
	u := &upstream{rrs: map[string]map[uint16][]dns.RR{}, delay: slowDelay, release: make(chan struct{})}
	for _, o := range opts {
		o(u)
	}
	zp := dns.NewZoneParser(strings.NewReader(zone), "", "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		u.add(rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		u.add(&dns.A{Hdr: dns.RR_Header{Name: "big.w.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, byte(100+i))})
	}
	pc, l := listenPair(t)
	u.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: l, Handler: u}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	t.Cleanup(u.releaseSlow)
	return u
}

func (u *upstream) releaseSlow() { u.releaseOnce.Do(func() { close(u.release) }) }

func (u *upstream) add(rr dns.RR) {
	name := dns.CanonicalName(rr.Header().Name)
	if u.rrs[name] == nil {
		u.rrs[name] = map[uint16][]dns.RR{}
	}
	u.rrs[name][rr.Header().Rrtype] = append(u.rrs[name][rr.Header().Rrtype], rr)
}

// listenPair binds UDP and TCP on one free port of 127.0.0.1.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", l.Addr().String())
		if err == nil {
			return pc, l
		}
		l.Close()
	}
	t.Fatal("no free port pair")
	return nil, nil
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	tcp := w.LocalAddr().Network() == "tcp"
	name := dns.CanonicalName(q.Name)
	u.mu.Lock()
	u.queries = append(u.queries, seen{name, q.Qtype, tcp})
	u.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	switch {
	case u.rcode != 0:
		m.Rcode = u.rcode
	case name == "slow.w.test.":
		u.mu.Lock()
		u.inflight++
		u.maxSlow = max(u.maxSlow, u.inflight)
		u.mu.Unlock()
		select {
		case <-time.After(u.delay):
		case <-u.release:
		}
		u.mu.Lock()
		u.inflight--
		u.mu.Unlock()
		m.Answer, m.Rcode = u.resolve(name, q.Qtype)
	case name == "tc.w.test." && !tcp:
		m.Truncated = true
	default:
		m.Answer, m.Rcode = u.resolve(name, q.Qtype)
		for _, rr := range m.Answer { // glue
			if mx, ok := rr.(*dns.MX); ok {
				m.Extra = append(m.Extra, u.rrs[dns.CanonicalName(mx.Mx)][dns.TypeA]...)
			}
		}
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
		// What a resolver should not pass on to sandboxes.
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID, Nsid: "75706c696e6b"})
	}
	if !tcp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

// resolve follows CNAMEs as a recursive server would.
func (u *upstream) resolve(name string, qtype uint16) ([]dns.RR, int) {
	if u.rrs[name] == nil {
		return nil, dns.RcodeNameError
	}
	var answer []dns.RR
	for range 8 {
		if rrs := u.rrs[name][qtype]; len(rrs) > 0 {
			return append(answer, rrs...), dns.RcodeSuccess
		}
		c := u.rrs[name][dns.TypeCNAME]
		if len(c) == 0 {
			break
		}
		answer = append(answer, c[0])
		name = dns.CanonicalName(c[0].(*dns.CNAME).Target)
	}
	return answer, dns.RcodeSuccess
}

// saw counts the queries for name (any type if qtype is 0) over tcp or not.
func (u *upstream) saw(name string, qtype uint16) (udp, tcp int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.queries {
		if s.name == name && (qtype == 0 || s.qtype == qtype) {
			if s.tcp {
				tcp++
			} else {
				udp++
			}
		}
	}
	return udp, tcp
}

func (u *upstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queries)
}

// deadUpstream is an address where nothing listens: tries fail at once.
func deadUpstream(t *testing.T) netip.AddrPort {
	pc, l := listenPair(t)
	addr := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	pc.Close()
	l.Close()
	return addr
}

// blackhole is a UDP server that never answers: tries time out.
func blackhole(t *testing.T) netip.AddrPort {
	pc, l := listenPair(t)
	l.Close()
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// sandbox is a fake Client that records the calls to Pin and Denied.
type sandbox struct {
	policy   policy.Policy
	pinErr   error
	pinDelay time.Duration

	mu     sync.Mutex // guards the fields below
	pins   []pinCall
	denied int
	events []string // "pin" when Pin returns, in order with what tests append
}

type pinCall struct {
	v     policy.Verdict
	addrs []netip.Addr
	ttl   time.Duration
}

func (p pinCall) String() string { return fmt.Sprintf("%v %v for %v", p.v, p.addrs, p.ttl) }

func newSandbox(t *testing.T, p api.NetworkPolicy) *sandbox {
	t.Helper()
	pol, err := policy.Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	return &sandbox{policy: pol}
}

func (sb *sandbox) client() Client {
	return Client{
		ID:     "sb-test",
		Policy: &sb.policy,
		Pin: func(v policy.Verdict, addrs []netip.Addr, ttl time.Duration) error {
			time.Sleep(sb.pinDelay)
			sb.mu.Lock()
			defer sb.mu.Unlock()
			if sb.pinErr != nil {
				return sb.pinErr
			}
			sb.pins = append(sb.pins, pinCall{v, slices.Clone(addrs), ttl})
			sb.events = append(sb.events, "pin")
			return nil
		},
		Denied: func() {
			sb.mu.Lock()
			sb.denied++
			sb.mu.Unlock()
		},
	}
}

func (sb *sandbox) event(e string) {
	sb.mu.Lock()
	sb.events = append(sb.events, e)
	sb.mu.Unlock()
}

func (sb *sandbox) state() ([]pinCall, int, []string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return slices.Clone(sb.pins), sb.denied, slices.Clone(sb.events)
}

var (
	src1 = netip.MustParseAddr("127.0.0.1")
	src2 = netip.MustParseAddr("127.0.0.2")
	src3 = netip.MustParseAddr("127.0.0.3")
)

// startResolver serves on 127.0.0.1 the sandboxes of clients, by source.
func startResolver(t *testing.T, ups []netip.AddrPort, clients map[netip.Addr]*sandbox, tweak ...func(*Config)) *Server {
	t.Helper()
	cfg := Config{
		Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
		Upstreams: ups,
		Lookup: func(src netip.Addr) (Client, bool) {
			sb, ok := clients[src]
			if !ok {
				return Client{}, false
			}
			return sb.client(), true
		},
		Timeout: 300 * time.Millisecond,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// query is a question to put to the resolver.
type query struct {
	name    string
	qtype   uint16
	tcp     bool
	src     netip.Addr    // default src1
	timeout time.Duration // default 3s
	noEDNS  bool
}

func (q query) ask(s *Server) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	if !q.noEDNS {
		m.SetEdns0(4096, false)
	}
	c := &dns.Client{Timeout: cmp.Or(q.timeout, 3*time.Second), UDPSize: 4096}
	src := q.src
	if !src.IsValid() {
		src = src1
	}
	if q.tcp {
		c.Net = "tcp"
		c.Dialer = &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	} else {
		c.Dialer = &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	}
	r, _, err := c.Exchange(m, s.Addr().String())
	if err == nil && (r.Id != m.Id || len(r.Question) != 1 || r.Question[0] != m.Question[0]) {
		return r, errMismatch
	}
	return r, err
}

var errMismatch = errors.New("the answer does not match the query")

func (q query) must(t *testing.T, s *Server) *dns.Msg {
	t.Helper()
	r, err := q.ask(s)
	if err != nil {
		t.Fatalf("%s %s: %v", q.name, dns.TypeToString[q.qtype], err)
	}
	return r
}

// ede is the extended error of r, if any.
func ede(r *dns.Msg) *dns.EDNS0_EDE {
	if opt := r.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	return nil
}

func addrsOf(rrs []dns.RR) []netip.Addr {
	var out []netip.Addr
	for _, rr := range rrs {
		if a, ok := rr.(*dns.A); ok {
			addr, _ := netip.AddrFromSlice(a.A.To4())
			out = append(out, addr)
		}
	}
	return out
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}
