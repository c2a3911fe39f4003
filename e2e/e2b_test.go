//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// e2bNode is the node.js the e2b SDK runs on (20.18.1 or later), and the
// folder its pinned packages are installed in (scripts/test.sh runs npm ci
// there).
func e2bNode(t testing.TB) (node, dir string) {
	t.Helper()
	node = nodeJS(t, "the e2b SDK", 20, 18, 1)
	dir, err := filepath.Abs("e2b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		t.Fatalf("the e2b SDK is not installed in %s: run `npm ci --prefix e2e/e2b` (scripts/test.sh does): %v", dir, err)
	}
	return node, dir
}

// runE2B runs the e2b SDK's test file of the suite (nodeTests).
func runE2B(t *testing.T, node, dir string, flags, env []string) {
	t.Helper()
	nodeTests(t, node, dir, "sdk.test.mjs", flags, env)
}

// e2bSecretsHost is the test internet's HTTPS host name (port 443) that
// the SDK's egress rules name (secure_inet_test.go).
var e2bSecretsHost = secureNames[0]

// TestE2BSDK drives the shared daemon with the real e2b SDK from npm,
// unmodified, in E2B's single-URL mode: the control API at /e2b and the
// sandbox API at the same URL with the E2b-Sandbox-Id header.
func TestE2BSDK(t *testing.T) {
	need(t)
	node, dir := e2bNode(t)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "e2b-sdk"})
	if err != nil {
		t.Fatal(err)
	}
	runE2B(t, node, dir, nil, []string{
		"E2B_API_KEY=" + k.Key,
		"E2B_API_URL=" + shared.url + "/e2b",
		"E2B_SANDBOX_URL=" + shared.url + "/e2b",
		"WARREN_E2B_SECRETS_HOST=" + e2bSecretsHost,
	})
}

// TestE2BSDKHostNames drives the shared daemon with the real e2b SDK as it
// runs against E2B's cloud: the control API on https://api.<domain>, each
// sandbox's API on https://49983-ID.<domain> and its ports on
// https://PORT-ID.<domain>, through a TLS front of the test's own (as a
// deployment puts one before warren) on port 443 of a loopback address
// nothing else uses, the names resolved there by a preload of node's.
func TestE2BSDKHostNames(t *testing.T) {
	need(t)
	node, dir := e2bNode(t)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "e2b-hosts"})
	if err != nil {
		t.Fatal(err)
	}
	addr, caFile := tlsFront(t, previewDomain, shared.url)
	// The other tests ran in single-URL mode already: here what the names
	// change.
	runE2B(t, node, dir, []string{"--import", "./loopback-dns.mjs", "--test-name-pattern", "^(create|commands|pty|a port)"}, []string{
		"E2B_API_KEY=" + k.Key,
		"E2B_DOMAIN=" + previewDomain,
		"NODE_EXTRA_CA_CERTS=" + caFile,
		"WARREN_E2B_DOMAIN=" + previewDomain,
		"WARREN_E2B_ADDRESS=" + addr,
	})
}

// tlsFront serves https on port 443 of a loopback address of its own, for
// domain and every name under it, passing each request (its Host kept) on
// to backend, streaming. It returns the address and the file of the CA
// that signed its certificate.
func tlsFront(t *testing.T, domain, backend string) (addr, caFile string) {
	t.Helper()
	ca, cert := testCertificates(t, domain)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for range 20 {
		b := make([]byte, 3)
		rand.Read(b)
		addr = fmt.Sprintf("127.%d.%d.%d", 1+b[0]%250, b[1], 1+b[2]%250)
		var err error
		if ln, err = net.Listen("tcp", addr+":443"); err == nil {
			break
		}
	}
	if ln == nil {
		t.Fatal("no free loopback address for port 443")
	}
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return addr, caFile
}

// testCertificates makes a CA (returned as PEM) and a certificate it
// signed for domain and *.domain.
func testCertificates(t *testing.T, domain string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: domain},
		DNSNames:  []string{domain, "*." + domain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestE2BSDKVM pauses and resumes a vm sandbox through the e2b SDK (its
// headers option asks for the vm runtime, which warren's default picks by
// itself only where hardware virtualization works).
func TestE2BSDKVM(t *testing.T) {
	need(t)
	needVM(t)
	node, dir := e2bNode(t)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "e2b-vm"})
	if err != nil {
		t.Fatal(err)
	}
	runE2B(t, node, dir, []string{"--test-name-pattern", "^vm"}, []string{
		"E2B_API_KEY=" + k.Key,
		"E2B_API_URL=" + shared.url + "/e2b",
		"E2B_SANDBOX_URL=" + shared.url + "/e2b",
		"WARREN_E2B_VM=1",
	})
}

// e2bFleet creates a sandbox from snapshot through E2B's API on the
// replica at create, calls its envd through the replica at call (a Stat of
// /root, which the node that runs it answers) and kills it there.
func e2bFleet(t *testing.T, create, call, key, snapshot string) {
	t.Helper()
	send := func(method, url string, header map[string]string, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, b := send("POST", create+"/e2b/sandboxes", nil, `{"templateID":"`+snapshot+`"}`)
	var sb struct{ SandboxID, EnvdAccessToken string }
	if code != http.StatusCreated || json.Unmarshal(b, &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("E2B create through %s: %d %s", create, code, b)
	}
	code, b = send("POST", call+"/e2b/filesystem.Filesystem/Stat", map[string]string{
		"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken, "Content-Type": "application/json",
	}, `{"path":"/root"}`)
	if code != http.StatusOK || !strings.Contains(string(b), `"FILE_TYPE_DIRECTORY"`) {
		t.Errorf("envd Stat through %s: %d %s", call, code, b)
	}
	for _, want := range []int{http.StatusNoContent, http.StatusNotFound} {
		if code, b = send("DELETE", call+"/e2b/sandboxes/"+sb.SandboxID, nil, ""); code != want {
			t.Errorf("E2B kill of %s through %s: %d %s, want %d", sb.SandboxID, call, code, b, want)
		}
	}
}
