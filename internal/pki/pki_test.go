package pki

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fleet is a CA and a way to make its members.
type fleet struct {
	t  *testing.T
	ca *CA
}

func newFleet(t *testing.T, name string) fleet {
	t.Helper()
	ca, err := NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return fleet{t, ca}
}

// member issues id a certificate valid for lifetime from now+shift and
// loads it.
func (f fleet) member(id Identity, shift, lifetime time.Duration) *Member {
	f.t.Helper()
	cert, key, err := f.ca.Issue(id, time.Now().Add(shift), lifetime)
	if err != nil {
		f.t.Fatal(err)
	}
	if shift == 0 {
		m, err := LoadMember(cert, key, f.ca.CertPEM)
		if err != nil {
			f.t.Fatal(err)
		}
		return m
	}
	// A certificate out of its validity, as one that expired while its
	// member ran: LoadMember refuses to load it.
	if _, err := LoadMember(cert, key, f.ca.CertPEM); err == nil || !strings.Contains(err.Error(), "expired or is not yet valid") {
		f.t.Fatalf("LoadMember of a certificate out of its validity: err = %v", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		f.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.CertPEM)
	return &Member{cert: pair, roots: roots, ID: id}
}

// serve starts an HTTPS server of m for clients of role client; it answers
// with the caller's identity.
func serve(t *testing.T, m *Member, client Role) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := PeerIdentity(*r.TLS)
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		io.WriteString(w, id.String())
	}))
	srv.TLS = m.ServerConfig(client)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// call GETs url over cfg (nil: no client certificate) with a tenant's API
// key, and returns the body or the error.
func call(url string, cfg *tls.Config) (string, error) {
	if cfg == nil {
		cfg = &tls.Config{InsecureSkipVerify: true}
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer wk_a_tenants_key")
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestOnlyTheFleetsControlReachesANode: a node serves a control replica
// of its own fleet, and fails the handshake of every other caller: no
// certificate (a tenant with an API key), a certificate from another CA
// naming the same replica, another node, and an expired replica.
func TestOnlyTheFleetsControlReachesANode(t *testing.T) {
	f := newFleet(t, "prod")
	n1 := Identity{Node, "n1"}
	url := serve(t, f.member(n1, 0, time.Hour), Control)
	c1 := f.member(Identity{Control, "c1"}, 0, time.Hour)

	if got, err := call(url, c1.ClientConfig(n1)); err != nil || got != "warren://control/c1" {
		t.Fatalf("control replica's call = %q, %v; want its identity", got, err)
	}
	forged := newFleet(t, "prod").member(Identity{Control, "c1"}, 0, time.Hour)
	for name, cfg := range map[string]*tls.Config{
		"no certificate":          nil,
		"another fleet's CA":      forged.ClientConfig(n1),
		"a node":                  f.member(Identity{Node, "n2"}, 0, time.Hour).ClientConfig(n1),
		"an expired certificate":  f.member(Identity{Control, "c2"}, -2*time.Hour, time.Hour).ClientConfig(n1),
		"a certificate not valid": f.member(Identity{Control, "c3"}, time.Hour, time.Hour).ClientConfig(n1),
	} {
		if got, err := call(url, cfg); err == nil {
			t.Errorf("%s: the node answered %q; want a failed handshake", name, got)
		}
	}
}

// TestAControlReplicaChecksTheNodeItMeant: a client refuses a server that
// is another member than the one it dialled, or from another fleet.
func TestAControlReplicaChecksTheNodeItMeant(t *testing.T) {
	f := newFleet(t, "prod")
	c1 := f.member(Identity{Control, "c1"}, 0, time.Hour)
	n2 := serve(t, f.member(Identity{Node, "n2"}, 0, time.Hour), Control)
	if _, err := call(n2, c1.ClientConfig(Identity{Node, "n1"})); err == nil || !strings.Contains(err.Error(), "not warren://node/n1") {
		t.Errorf("calling n1 at n2's address: err = %v; want the identity refused", err)
	}
	other := serve(t, newFleet(t, "other").member(Identity{Node, "n1"}, 0, time.Hour), Control)
	if _, err := call(other, c1.ClientConfig(Identity{Node, "n1"})); err == nil {
		t.Error("another fleet's n1 was accepted")
	}
}

// TestCARoundTrip: a CA saved as PEM issues members its original trusts;
// a member from another CA does not load against it.
func TestCARoundTrip(t *testing.T) {
	f := newFleet(t, "prod")
	key, err := f.ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(f.ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, mkey, err := again.Issue(Identity{Node, "n1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := LoadMember(cert, mkey, f.ca.CertPEM); err != nil || m.ID != (Identity{Node, "n1"}) {
		t.Fatalf("LoadMember = %+v, %v", m, err)
	}
	if _, err := LoadMember(cert, mkey, newFleet(t, "x").ca.CertPEM); err == nil || !strings.Contains(err.Error(), "not from the fleet's CA") {
		t.Errorf("a member against another CA: err = %v", err)
	}
	if _, err := LoadCA(cert, mkey); err == nil {
		t.Error("a member's certificate loaded as a CA")
	}
}

// TestIssueRefusesBadIdentities: names and roles outside the scheme are
// refused with the rule.
func TestIssueRefusesBadIdentities(t *testing.T) {
	f := newFleet(t, "prod")
	for _, id := range []Identity{{"admin", "x"}, {Node, ""}, {Node, "a/b"}, {Node, "UPPER"}, {Control, strings.Repeat("a", 64)}} {
		if _, _, err := f.ca.Issue(id, time.Now(), time.Hour); err == nil {
			t.Errorf("Issue(%+v) succeeded", id)
		}
	}
	if _, _, err := f.ca.Issue(Identity{Node, "n1"}, time.Now(), 0); err == nil {
		t.Error("Issue with no lifetime succeeded")
	}
}
