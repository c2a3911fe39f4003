package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/network/policy"
)

const secretValue = "s3cr3t-value-for-tests"

// upstream is a server of the test's: it answers each request with the
// Authorization header it got.
func upstream(t *testing.T, tlsOn bool, names ...string) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "https://elsewhere.test/", http.StatusFound)
			return
		}
		io.WriteString(w, "auth="+r.Header.Get("Authorization"))
	}))
	if !tlsOn {
		srv.Start()
		t.Cleanup(srv.Close)
		return srv, nil
	}
	ca, err := NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.leaf(names[0])
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	return srv, roots
}

// proxyFor starts a proxy whose every connection is headed for dest.
func proxyFor(t *testing.T, dest netip.AddrPort, roots *x509.CertPool, pol policy.Policy, values map[string]string, log *slog.Logger) (*Proxy, *CA, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA("sb-test")
	if err != nil {
		t.Fatal(err)
	}
	p := Start(Config{
		Sandbox: "sb-test", Listener: ln, CA: ca, Roots: roots, Log: log,
		Dial: func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a.String())
		},
		Destination: func(net.Conn) (netip.AddrPort, error) { return dest, nil },
	})
	p.Set(pol, values)
	t.Cleanup(func() { p.Close() })
	return p, ca, ln.Addr().String()
}

func rulesFor(t *testing.T, dest, header string) policy.Policy {
	t.Helper()
	pol, err := policy.Parse(api.NetworkPolicy{Rules: map[string][]api.NetworkRule{
		dest: {{Transform: &api.Transform{Headers: map[string]string{"Authorization": header}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// get fetches path through the proxy at addr, as server name name,
// trusting roots, with the header Authorization: mine.
func get(t *testing.T, addr, name string, roots *x509.CertPool, path string) (int, string, error) {
	t.Helper()
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", addr) },
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name},
	}
	defer tr.CloseIdleConnections()
	scheme := "https"
	if roots == nil {
		scheme = "http"
	}
	req, _ := http.NewRequest("GET", scheme+"://"+name+path, nil)
	req.Header.Set("Authorization", "mine")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func addrOf(t *testing.T, srv *httptest.Server) netip.AddrPort {
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func sandboxRoots(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func TestInjectsOverTLS(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, roots := upstream(t, true, "api.example.test")
	_, ca, addr := proxyFor(t, addrOf(t, srv), roots, rulesFor(t, "*.example.test", "Bearer ${secrets.tok}"),
		map[string]string{"tok": secretValue}, log)
	code, body, err := get(t, addr, "api.example.test", sandboxRoots(ca), "/")
	if err != nil || code != 200 || body != "auth=Bearer "+secretValue {
		t.Fatalf("got %d %q %v, want the rule's header in place of the sandbox's", code, body, err)
	}
	// A redirect is passed back, not followed.
	if code, _, err := get(t, addr, "api.example.test", sandboxRoots(ca), "/redirect"); err != nil || code != http.StatusFound {
		t.Errorf("a redirect: %d %v", code, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "headers set") || strings.Contains(logs.String(), secretValue) {
		t.Errorf("debug log:\n%s\nwant the header set, never its value", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// A server name without a rule passes through untouched: the client
// verifies the real server's certificate, and gets its own header there.
func TestPassesThroughOtherNames(t *testing.T) {
	srv, roots := upstream(t, true, "other.test")
	_, _, addr := proxyFor(t, addrOf(t, srv), roots, rulesFor(t, "api.example.test", "${secrets.tok}"),
		map[string]string{"tok": secretValue}, nil)
	code, body, err := get(t, addr, "other.test", roots, "/")
	if err != nil || code != 200 || body != "auth=mine" {
		t.Fatalf("got %d %q %v, want the server's own certificate and no header of the rules", code, body, err)
	}
	// The apex of a wildcard is not below it.
	_, _, addr = proxyFor(t, addrOf(t, srv), roots, rulesFor(t, "*.other.test", "${secrets.tok}"),
		map[string]string{"tok": secretValue}, nil)
	if code, body, err := get(t, addr, "other.test", roots, "/"); err != nil || body != "auth=mine" {
		t.Fatalf("apex of a wildcard: %d %q %v", code, body, err)
	}
}

// An upstream that fails verification gets nothing: the sandbox gets 502.
func TestRefusesUnverifiedUpstream(t *testing.T) {
	srv, _ := upstream(t, true, "api.example.test")
	_, ca, addr := proxyFor(t, addrOf(t, srv), x509.NewCertPool(), rulesFor(t, "api.example.test", "${secrets.tok}"),
		map[string]string{"tok": secretValue}, nil)
	code, body, err := get(t, addr, "api.example.test", sandboxRoots(ca), "/")
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, "failed verification") || strings.Contains(body, secretValue) {
		t.Fatalf("got %d %q %v, want a 502 that says why", code, body, err)
	}
}

// A secret deleted before the rule was set: the request is refused, not
// sent without it.
func TestRefusesMissingSecret(t *testing.T) {
	srv, roots := upstream(t, true, "api.example.test")
	_, ca, addr := proxyFor(t, addrOf(t, srv), roots, rulesFor(t, "api.example.test", "${secrets.tok}"), nil, nil)
	code, body, err := get(t, addr, "api.example.test", sandboxRoots(ca), "/")
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, "Authorization") {
		t.Fatalf("got %d %q %v, want a 502 naming the header", code, body, err)
	}
}

// Plain HTTP gets the header only at an address answered for its Host.
func TestPlainHTTPNeedsTheAnswer(t *testing.T) {
	srv, _ := upstream(t, false)
	dest := addrOf(t, srv)
	p, _, addr := proxyFor(t, dest, nil, rulesFor(t, "api.example.test", "${secrets.tok}"),
		map[string]string{"tok": secretValue}, nil)
	if _, body, err := get(t, addr, "api.example.test", nil, "/"); err != nil || body != "auth=mine" {
		t.Fatalf("before the answer: %q %v, want no header", body, err)
	}
	p.Answered("API.example.test.", []netip.Addr{dest.Addr()}, time.Minute)
	if _, body, err := get(t, addr, "api.example.test", nil, "/"); err != nil || body != "auth="+secretValue {
		t.Fatalf("after the answer: %q %v, want the header", body, err)
	}
	if _, body, err := get(t, addr, "other.test", nil, "/"); err != nil || body != "auth=mine" {
		t.Fatalf("another Host: %q %v, want no header", body, err)
	}
}

func TestCASaveLoad(t *testing.T) {
	ca, err := NewCA("sb-x")
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/ca.pem"
	if err := ca.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadCA(path)
	if err != nil || !bytes.Equal(back.CertPEM(), ca.CertPEM()) || !back.key.Equal(ca.key) {
		t.Fatalf("loaded %v, want the same CA", err)
	}
}
