package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"warren/api"
	"warren/internal/store"
)

// Preview access (docs/API.md, "Exposed ports"): every sandbox has an
// access token, made at launch (create and restore alike, so a fork never
// shares its origin's), which opens its ports on the node's preview host
// names unless its previews are public. The server checks it; the manager
// only keeps it.

// tokenBytes is the size of an access token (a preview token, an agent
// token) before hex encoding.
const tokenBytes = 32

// newToken returns a fresh access token: 32 random bytes in hex.
func newToken() string {
	b := make([]byte, tokenBytes)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return hex.EncodeToString(b)
}

// previewView is the API's picture of a sandbox's preview access; the
// server fills in the URL, which depends on its preview domain.
func previewView(rec store.Sandbox) api.Preview {
	return api.Preview{Public: rec.PreviewPublic, Token: rec.PreviewToken}
}

// Preview returns one of tenant's sandboxes' preview access, in any state.
func (m *Manager) Preview(ctx context.Context, tenant, id string) (api.Preview, error) {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Preview{}, err
	}
	return previewView(rec), nil
}

// SetPreview makes one of tenant's sandboxes' previews public or private
// (req.Public nil: as they are) and, with req.RotateToken, replaces its
// access token; the old token stops working with the next request. Both
// change in one store statement, so concurrent calls do not undo each
// other.
func (m *Manager) SetPreview(ctx context.Context, tenant, id string, req api.SetPreviewRequest) (api.Preview, error) {
	rec, err := m.record(ctx, tenant, id)
	if err != nil {
		return api.Preview{}, err
	}
	token := ""
	if req.RotateToken || rec.PreviewToken == "" {
		token = newToken()
	}
	rec, err = m.deps.Store.SetSandboxPreview(ctx, id, req.Public, token)
	if errors.Is(err, store.ErrNotFound) {
		return api.Preview{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return api.Preview{}, fmt.Errorf("set preview: %w", err)
	}
	m.log.Info("sandbox preview access changed", "sandbox", id, "public", rec.PreviewPublic, "token_rotated", token != "")
	return previewView(rec), nil
}

// PreviewAccess returns the tenant of sandbox id, its access token and
// whether its previews are public, for a request on a preview host name,
// which carries no API key. CodeNotFound for an unknown sandbox. What it
// returns is for the server's access check only, never for the caller.
func (m *Manager) PreviewAccess(ctx context.Context, id string) (tenant, token string, public bool, err error) {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", "", false, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return "", "", false, fmt.Errorf("get sandbox: %w", err)
	}
	return rec.Tenant, rec.PreviewToken, rec.PreviewPublic, nil
}

// AgentAccess returns the tenant of sandbox id and its agent token, for a
// call of its agent routes that carries the token instead of an API key.
// CodeNotFound for an unknown sandbox. What it returns is for the server's
// access check only.
func (m *Manager) AgentAccess(ctx context.Context, id string) (tenant, token string, err error) {
	rec, err := m.deps.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", "", api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return "", "", fmt.Errorf("get sandbox: %w", err)
	}
	return rec.Tenant, rec.AgentToken, nil
}
