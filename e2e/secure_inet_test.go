//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The test internet's HTTPS: inetSecure serves HTTPS (443) and HTTP (80)
// for secureNames with a certificate of the suite's own CA, which the
// suite's daemons trust for egress (--egress-trust secureCAFile) and
// nothing else does; inetUntrusted serves HTTPS for untrustedName with a
// certificate of another CA that no one trusts. Both answer:
//   - /headers: a JSON object of the request's header names (lower case)
//     to the hex SHA-256 of their values, and "host": the Host header, so
//     that a sandbox learns which headers arrived without seeing a value;
//   - /redirect?to=URL: 302 to URL;
//   - anything else: "secure hello".
//
// Every request's headers are kept (secureSeen) for the tests to check.
var (
	inetSecure, inetUntrusted netip.Addr
	secureCAFile              string
	secureNames               = []string{"api.secrets.test", "other.secrets.test", "a.wild.test", "b.a.wild.test",
		"wild.test", "wild.test.evil.test"}
	untrustedName = "untrusted.secrets.test"
)

// seenRequest is a request a secure server received.
type seenRequest struct {
	Addr   netip.Addr
	TLS    bool
	Host   string
	Path   string
	Header http.Header
}

// secureSeen returns the requests the secure servers received, oldest
// first.
func (in *internet) secureSeen() []seenRequest {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]seenRequest(nil), in.seen...)
}

// hashHeader is how /headers shows a header's value.
func hashHeader(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:])
}

// startSecure starts the secure servers on their addresses (served by the
// namespace already) and writes the trusted CA to a directory of its own,
// which stop removes.
func (in *internet) startSecure() (err error) {
	trusted, err := newTestCA("warren e2e test internet")
	if err != nil {
		return err
	}
	untrusted, err := newTestCA("nobody trusts this")
	if err != nil {
		return err
	}
	if in.caDir, err = os.MkdirTemp("", "warren-e2e-inet-"); err != nil {
		return err
	}
	secureCAFile = filepath.Join(in.caDir, "test-internet-ca.pem")
	if err := os.WriteFile(secureCAFile, trusted.pem, 0o644); err != nil {
		return err
	}
	for _, s := range []struct {
		addr  netip.Addr
		ca    *testCA
		names []string
	}{{inetSecure, trusted, secureNames}, {inetUntrusted, untrusted, []string{untrustedName}}} {
		cert, err := s.ca.leaf(s.names)
		if err != nil {
			return err
		}
		addr := s.addr
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in.mu.Lock()
			in.seen = append(in.seen, seenRequest{Addr: addr, TLS: r.TLS != nil, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()})
			in.mu.Unlock()
			switch r.URL.Path {
			case "/headers":
				out := map[string]string{"host": r.Host}
				for k, v := range r.Header {
					out[strings.ToLower(k)] = hashHeader(strings.Join(v, ", "))
				}
				json.NewEncoder(w).Encode(out)
			case "/redirect":
				http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			default:
				fmt.Fprintln(w, "secure hello")
			}
		})
		for _, port := range []int{80, 443} {
			ln, err := in.listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
			if err != nil {
				return err
			}
			l := ln.(net.Listener)
			if port == 443 {
				l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{*cert}})
			}
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(l)
			in.servers = append(in.servers, srv)
		}
	}
	return nil
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(name string) (*testCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (ca *testCA) leaf(names []string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
