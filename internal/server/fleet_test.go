package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"warren/internal/control"
	"warren/internal/pki"
	"warren/internal/pki/pkitest"
	"warren/internal/reqid"
	"warren/internal/wait"
)

// TestEveryRouteHasAFleetRule: every route says which node of a fleet
// answers it, for the fleet's front, which routes by this table alone
// (control.Rule; NewFront refuses a route without one).
func TestEveryRouteHasAFleetRule(t *testing.T) {
	s := New(nil, nil, nil, slog.New(slog.DiscardHandler), Options{})
	for _, rt := range s.RouteTable() {
		if rt.Rule == control.NoRule || strings.HasPrefix(rt.Rule.String(), "Rule(") {
			t.Errorf("route %s has no fleet rule: give it the control.Rule that says which node of a fleet answers it", rt)
		}
	}
}

// testCerts are a fleet's certificates, parsed: a control replica's and a
// node's.
func testCerts(t *testing.T) (ctl, node *x509.Certificate) {
	t.Helper()
	ca, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	parse := func(id pki.Identity) *x509.Certificate {
		certPEM, _, err := ca.Issue(id, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(certPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return parse(pki.Identity{Role: pki.Control, Name: "c1"}), parse(pki.Identity{Role: pki.Node, Name: "n1"})
}

// TestRequestIDFromControlOnly: a node takes the request ID a control
// replica sent in reqid.FleetHeader over the fleet's mutual TLS when it has
// the form a replica gives, and gives a new one otherwise; the header
// goes no further either way.
func TestRequestIDFromControlOnly(t *testing.T) {
	ctl, node := testCerts(t)
	verified := func(c *x509.Certificate) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
	}
	const sent = "0123456789abcdef"
	for _, tc := range []struct {
		name   string
		conn   *tls.ConnectionState
		header []string
		taken  bool
	}{
		{"a control replica's", verified(ctl), []string{sent}, true},
		{"plain HTTP (a single machine)", nil, []string{sent}, false},
		{"a node's certificate", verified(node), []string{sent}, false},
		{"a certificate no one verified", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{ctl}}, []string{sent}, false},
		{"upper case", verified(ctl), []string{strings.ToUpper(sent)}, false},
		{"too long", verified(ctl), []string{sent + "00"}, false},
		{"too short", verified(ctl), []string{sent[:15]}, false},
		{"a line break", verified(ctl), []string{sent[:15] + "\n"}, false},
		{"two of them", verified(ctl), []string{sent, sent}, false},
		{"none", verified(ctl), nil, false},
	} {
		r := httptest.NewRequest("GET", "/v1/info", nil)
		r.TLS = tc.conn
		for _, v := range tc.header {
			r.Header.Add(reqid.FleetHeader, v)
		}
		got := requestIDOf(r)
		if (got == sent) != tc.taken || !reqid.Valid(got) {
			t.Errorf("%s: request ID %q; want the one sent: %v", tc.name, got, tc.taken)
		}
		if v := r.Header.Values(reqid.FleetHeader); len(v) != 0 {
			t.Errorf("%s: the request still carries %s %q", tc.name, reqid.FleetHeader, v)
		}
	}
}

// TestRequestIDThroughTheFleet: a request through a control replica (its
// middleware and the front) to a node (its API behind the fleet's mutual
// TLS, as warren node serves it) has one ID: the answer carries one
// X-Request-Id, and the node's log lines name it, its access line and the
// detail of an internal error alike.
func TestRequestIDThroughTheFleet(t *testing.T) {
	ca := pkitest.CA(t, "test")
	member := func(id pki.Identity) *pki.Member { return pkitest.Member(t, ca, id) }
	// The node's API, its log in e.logs, served as daemon.Run serves a
	// fleet node's: its connection limits over the fleet's TLS.
	e := newTestEnv(t, deadAgent(t), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = e.srv.Limit(tls.NewListener(ln, member(pki.Identity{Role: pki.Node, Name: "n1"}).ServerConfig(pki.Control)))
	node := e.srv.HTTPServer(e.srv.Handler(), nil)
	go node.Serve(ln)
	t.Cleanup(func() { node.Close() })

	replicaLogs := &syncBuffer{}
	replica := New(nil, nil, e.keys, slog.New(slog.NewTextHandler(replicaLogs, nil)), Options{})
	n1 := control.Remote(member(pki.Identity{Role: pki.Control, Name: "c1"}), "n1", ln.Addr().String(),
		slog.New(slog.DiscardHandler), replica.WriteError)
	front := httptest.NewServer(replica.Wrap(control.NewFront(control.One(n1), control.Options{
		Routes: replica.RouteTable(), Preview: replica.PreviewSandbox, WriteError: replica.WriteError,
		Authenticate: func(r *http.Request) (string, error) { k, err := replica.Authenticate(r); return k.Tenant, err },
		MaxBody:      DefaultMaxBodyBytes, Local: replica.Routes(),
	})))
	t.Cleanup(front.Close)

	for _, tc := range []struct {
		method, path, body string
		status             int
		logged             string // what the node's line with the ID says
	}{
		{"GET", "/v1/info", "", http.StatusOK, "path=/v1/info status=200"},
		{"POST", "/v1/sandboxes", `{"template":"explode"}`, http.StatusInternalServerError, "disk exploded at /var/lib/secret"},
	} {
		req, _ := http.NewRequest(tc.method, front.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		req.Header.Set(reqid.FleetHeader, "0123456789abcdef") // a client's is never taken
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ids := resp.Header.Values(reqid.Header)
		if resp.StatusCode != tc.status || len(ids) != 1 || !reqid.Valid(ids[0]) || ids[0] == "0123456789abcdef" {
			t.Errorf("%s %s: %d with X-Request-Id %q; want %d with one ID of the replica's", tc.method, tc.path, resp.StatusCode, ids, tc.status)
			continue
		}
		// Each process writes its access line once it has answered.
		id := ids[0]
		wait.For(t, 5*time.Second, "the node's log line naming "+id+" and saying "+tc.logged, func() bool {
			for l := range strings.SplitSeq(e.logs.String(), "\n") {
				if strings.Contains(l, "request_id="+id) && strings.Contains(l, tc.logged) {
					return true
				}
			}
			return false
		})
		wait.For(t, 5*time.Second, "the replica's access line naming "+id, func() bool {
			return strings.Contains(replicaLogs.String(), "request_id="+id)
		})
	}
	// A 404 of the node's own: still the one ID.
	resp, err := http.Get(front.URL + "/v1/nosuch")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ids := resp.Header.Values(reqid.Header); resp.StatusCode != http.StatusNotFound || len(ids) != 1 {
		t.Errorf("GET /v1/nosuch: %d with X-Request-Id %q; want 404 with one", resp.StatusCode, ids)
	}
}
