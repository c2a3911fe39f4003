package daemon

import (
	"crypto/x509"
	"fmt"
	"os"
)

// egressRoots is the host's trust store and the certificates of the PEM
// file at path; nil (the host's alone) when path is "".
func egressRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("egress trust: the host's trust store: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egress trust: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("egress trust: %s holds no PEM certificate", path)
	}
	return pool, nil
}
