package resolver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

const resolvConf = "/etc/resolv.conf"

// Upstreams reads the name servers of a resolv.conf file, in its order, on
// port 53. Loopback servers are kept: a systemd-resolved stub (127.0.0.53)
// is reachable from the daemon, which is what forwards. To skip the stub's
// own answers (/etc/hosts, the host's name, LLMNR, mDNS; see names.go), pass
// /run/systemd/resolve/resolv.conf, which lists the servers behind it.
func Upstreams(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ups []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue // as the C library does
		}
		if up := netip.AddrPortFrom(a.Unmap(), 53); !slices.Contains(ups, up) {
			ups = append(ups, up)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("%s lists no nameserver", path)
	}
	return ups, nil
}

// errUpstream is the error of an upstream's unusable answer.
var errUpstream = errors.New("unusable answer")

// forward asks the upstreams q, in order, until one answers it: over TCP
// if tcp, else over UDP and then, if the answer is truncated, over TCP.
// Each try is bounded by cfg.Timeout; a server that fails (no answer, an
// answer to another question, SERVFAIL, REFUSED…) passes to the next.
func (s *Server) forward(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	var errs []error
	for _, up := range s.cfg.Upstreams {
		r, err := s.ask(ctx, up, q, tcp)
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%v: %w", up, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (s *Server) ask(ctx context.Context, up netip.AddrPort, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	if !tcp {
		r, err := s.exchangeOnce(ctx, up, q, "udp")
		if err != nil || !r.Truncated {
			return r, err
		}
	}
	return s.exchangeOnce(ctx, up, q, "tcp")
}

// aLongTimeAgo is a deadline that cuts short any I/O.
var aLongTimeAgo = time.Unix(1, 0)

// exchangeOnce is one try of one upstream, on a connection of its own (a
// fresh UDP port for every query).
func (s *Server) exchangeOnce(ctx context.Context, up netip.AddrPort, q *dns.Msg, network string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// miekg/dns obeys the context's deadline but not its cancellation.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(aLongTimeAgo) })
	defer stop()
	c := dns.Client{Net: network, Timeout: s.cfg.Timeout}
	r, _, err := c.ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: nc})
	if err != nil {
		return nil, err
	}
	if err := usable(q, r); err != nil {
		return nil, err
	}
	return r, nil
}

// usable checks that r answers q: a response to the same question, with a
// final rcode (an error rcode makes forward try the next server).
func usable(q, r *dns.Msg) error {
	if !r.Response || r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		return fmt.Errorf("%w: not a response to a query", errUpstream)
	}
	a, b := q.Question[0], r.Question[0]
	if !strings.EqualFold(a.Name, b.Name) || a.Qtype != b.Qtype || a.Qclass != b.Qclass {
		return fmt.Errorf("%w: answers another question", errUpstream)
	}
	switch r.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeYXDomain:
		return nil
	}
	return fmt.Errorf("%w: %s", errUpstream, dns.RcodeToString[r.Rcode])
}
