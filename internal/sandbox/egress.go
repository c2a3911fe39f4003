package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/network"
	"warren/internal/network/egress"
	"warren/internal/network/policy"
)

// Secrets resolves the tenants' secrets that egress rules name (package
// secrets' Vault).
type Secrets interface {
	// Check returns nil if tenant has a secret of each of names, else a
	// CodeBadRequest error naming one it lacks.
	Check(ctx context.Context, tenant string, names []string) error
	// Resolve returns the values of tenant's secrets of these names, for
	// its sandbox; a name without a secret is a CodeBadRequest error
	// naming it.
	Resolve(ctx context.Context, sandbox, tenant string, names []string) (map[string]string, error)
}

// Where a sandbox with egress rules trusts its CA (docs/NETWORK.md,
// "Secrets at egress"): its own file, and a block of the system bundle
// that curl, OpenSSL and Python read; Node.js reads NODE_EXTRA_CA_CERTS.
const (
	egressCAFile   = "/usr/local/share/ca-certificates/warren-egress.crt"
	systemBundle   = "/etc/ssl/certs/ca-certificates.crt"
	bundleBegin    = "# warren egress CA: this sandbox's own (docs/NETWORK.md)\n"
	bundleEnd      = "# end of warren egress CA\n"
	maxBundleBytes = 8 << 20
	caStateFile    = "egress-ca.pem"
)

// egressEnv is what processes of a sandbox created with rules get besides
// its env.
var egressEnv = map[string]string{"NODE_EXTRA_CA_CERTS": egressCAFile}

// checkRules refuses rules a node cannot serve for tenant: secrets it
// does not have, or a node without secrets or networking.
func (m *Manager) checkRules(ctx context.Context, tenant string, p api.NetworkPolicy) error {
	if len(p.Rules) == 0 {
		return nil
	}
	pol, err := policy.Parse(p)
	if err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	names := pol.SecretNames()
	if len(names) == 0 {
		return nil
	}
	if m.deps.Secrets == nil {
		return errNoSecrets
	}
	return m.deps.Secrets.Check(ctx, tenant, names)
}

var errNoSecrets = api.Errorf(api.CodeBadRequest, "network.rules: this node resolves no secrets (a fleet node needs --control-secrets)")

// egressOf is what the rules of tenant's sandbox id need of the node: its
// CA (the one in its state directory, else a new one) and its secrets'
// values. A policy without rules needs nothing.
func (m *Manager) egressOf(ctx context.Context, id, tenant string, pol policy.Policy) (network.Egress, error) {
	if len(pol.Rules) == 0 {
		return network.Egress{}, nil
	}
	var values map[string]string
	if names := pol.SecretNames(); len(names) > 0 {
		if m.deps.Secrets == nil {
			return network.Egress{}, errNoSecrets
		}
		var err error
		if values, err = m.deps.Secrets.Resolve(ctx, id, tenant, names); err != nil {
			return network.Egress{}, err
		}
	}
	ca, err := egress.LoadCA(filepath.Join(m.stateDir(id), caStateFile))
	if errors.Is(err, os.ErrNotExist) { // its first rules
		ca, err = egress.NewCA(id)
	}
	if err != nil {
		return network.Egress{}, fmt.Errorf("egress CA: %w", err)
	}
	return network.Egress{CA: ca, Secrets: values}, nil
}

// trustEgressCA makes the sandbox trust its CA (once its network has
// one): its file, and its block of the system bundle, replacing an
// earlier block (a sandbox woken elsewhere has a new CA); the CA is kept
// in the sandbox's state directory for a restarted daemon.
func (m *Manager) trustEgressCA(ctx context.Context, id string, conn *agentconn.Conn) error {
	s, ok := m.lookupNetwork(id)
	if !ok {
		return nil
	}
	pem := s.EgressCA()
	if pem == nil {
		return nil
	}
	if err := s.SaveEgressCA(filepath.Join(m.stateDir(id), caStateFile)); err != nil {
		return fmt.Errorf("keep egress CA: %w", err)
	}
	if _, err := conn.WriteFile(ctx, egressCAFile, 0o644, "", bytes.NewReader(pem)); err != nil {
		return fmt.Errorf("write %s: %w", egressCAFile, err)
	}
	var bundle []byte
	r, _, err := conn.ReadFile(ctx, systemBundle, "")
	switch {
	case err == nil:
		bundle, err = io.ReadAll(io.LimitReader(r, maxBundleBytes))
		r.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", systemBundle, err)
		}
	case connect.CodeOf(err) != connect.CodeNotFound:
		return fmt.Errorf("read %s: %w", systemBundle, err)
	}
	if i := bytes.Index(bundle, []byte(bundleBegin)); i >= 0 {
		rest := bundle[i:]
		if j := bytes.Index(rest, []byte(bundleEnd)); j >= 0 {
			bundle = append(bundle[:i:i], rest[j+len(bundleEnd):]...)
		}
	}
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	bundle = append(append(append(bundle, bundleBegin...), pem...), bundleEnd...)
	if _, err := conn.WriteFile(ctx, systemBundle, 0o644, "", bytes.NewReader(bundle)); err != nil {
		return fmt.Errorf("write %s: %w", systemBundle, err)
	}
	return nil
}
