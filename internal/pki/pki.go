// Package pki makes and checks the certificates with which a fleet's
// control replicas and nodes authenticate each other (mutual TLS).
//
// A fleet has one certificate authority of its own, made by warren (NewCA):
// no public CA, and no other fleet's, can vouch for a member. Every member
// holds a certificate from it that names its role and name in one URI
// subject alternative name, warren://ROLE/NAME: warren://node/n1,
// warren://control/c1. A TLS server of the fleet takes only clients of the
// role it serves (a node, only control replicas), and a client checks that
// the server is the very member it meant to reach, by role and name, rather
// than by host name: a node's address may change, its name may not. A
// tenant's API key is nothing on these connections; without a certificate
// from the fleet's CA, the handshake fails before any request is read.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"time"
)

// Role is what a fleet member does.
type Role string

// The roles of a fleet.
const (
	Control Role = "control"
	Node    Role = "node"
)

// Identity is who a certificate names.
type Identity struct {
	Role Role
	Name string
}

func (id Identity) String() string { return "warren://" + string(id.Role) + "/" + id.Name }

// validName is what a member may be called: a host-name-like label.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,62}$`)

func (id Identity) valid() error {
	if id.Role != Control && id.Role != Node {
		return fmt.Errorf("role must be %q or %q, got %q", Control, Node, id.Role)
	}
	if !validName.MatchString(id.Name) {
		return fmt.Errorf("name must be 1-63 characters of a-z, 0-9, '.' and '-', starting with a letter or digit, got %q", id.Name)
	}
	return nil
}

// CA is a fleet's certificate authority.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// CertPEM is the CA's certificate, which every member trusts.
	CertPEM []byte
}

// caLifetime is how long a fleet's CA is valid.
const caLifetime = 10 * 365 * 24 * time.Hour

// NewCA makes a new certificate authority for the fleet called fleet.
func NewCA(fleet string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"warren fleet " + fleet}, CommonName: "warren fleet CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	return &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA from its certificate and key in PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	if !pair.Leaf.IsCA {
		return nil, errors.New("load CA: the certificate is not a CA's")
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("load CA: the key cannot sign")
	}
	return &CA{cert: pair.Leaf, key: key, CertPEM: certPEM}, nil
}

// KeyPEM is the CA's private key in PEM: whoever holds it can make fleet
// members. Keep it with the operator, not on the nodes.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// Issue makes a certificate and key (both PEM) for the member id, valid
// from now for lifetime, for both ends of a TLS connection.
func (ca *CA) Issue(id Identity, now time.Time, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := id.valid(); err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	if lifetime <= 0 {
		return nil, nil, fmt.Errorf("issue certificate: lifetime must be positive, got %v", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	u, err := url.Parse(id.String())
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.String()},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

// Member is one fleet member's credentials: its certificate and key, and
// the fleet CA it trusts.
type Member struct {
	cert  tls.Certificate
	roots *x509.CertPool
	// ID is who the certificate names.
	ID Identity
}

// LoadMember reads a member's certificate and key and the fleet's CA
// certificate, all PEM.
func LoadMember(certPEM, keyPEM, caPEM []byte) (*Member, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load fleet certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("load fleet certificate: no CA certificate in the CA file")
	}
	id, err := identityOf(pair.Leaf)
	if err != nil {
		return nil, fmt.Errorf("load fleet certificate: %w", err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("load fleet certificate: not from the fleet's CA: %w", err)
	}
	return &Member{cert: pair, roots: roots, ID: id}, nil
}

// ServerConfig is the TLS configuration of a member serving clients of
// role client: any other caller fails the handshake.
func (m *Member) ServerConfig(client Role) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := PeerIdentity(cs)
			if err != nil {
				return err
			}
			if id.Role != client {
				return fmt.Errorf("fleet peer %s: only %s members may call", id, client)
			}
			return nil
		},
	}
}

// ClientConfig is the TLS configuration of a member calling the member
// server, whoever answers at the address it dials.
func (m *Member) ClientConfig(server Identity) *tls.Config {
	return m.clientConfig(func(id Identity) error {
		if id != server {
			return fmt.Errorf("fleet peer is %s, not %s", id, server)
		}
		return nil
	})
}

// ClientConfigFor is the TLS configuration of a member calling any member
// of role: the control replicas behind one address, say.
func (m *Member) ClientConfigFor(role Role) *tls.Config {
	return m.clientConfig(func(id Identity) error {
		if id.Role != role {
			return fmt.Errorf("fleet peer is %s, not a %s member", id, role)
		}
		return nil
	})
}

func (m *Member) clientConfig(check func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.cert},
		// The server is checked below against the fleet's CA and by the
		// identity it names, not by host name: Go's own check would need
		// every node's addresses in its certificate.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("fleet peer sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: m.roots, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("fleet peer: %w", err)
			}
			id, err := identityOf(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			return check(id)
		},
	}
}

// PeerIdentity is who the verified certificate of a TLS peer names.
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("fleet peer sent no certificate")
	}
	return identityOf(cs.PeerCertificates[0])
}

// identityOf reads the one warren:// URI of a member's certificate.
func identityOf(c *x509.Certificate) (Identity, error) {
	if len(c.URIs) != 1 || c.URIs[0].Scheme != "warren" {
		return Identity{}, errors.New("not a fleet member's certificate: it must name one warren://ROLE/NAME")
	}
	u := c.URIs[0]
	id := Identity{Role: Role(u.Host), Name: u.Path}
	if len(id.Name) > 0 && id.Name[0] == '/' {
		id.Name = id.Name[1:]
	}
	if err := id.valid(); err != nil {
		return Identity{}, fmt.Errorf("not a fleet member's certificate: %w", err)
	}
	return id, nil
}

// serial is a random certificate serial number (128 bits).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	return n
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
