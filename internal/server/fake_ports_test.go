package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"warren/api"
)

// The exposed-port half of fakeSandboxes: preview access per sandbox, and
// ports pointed at real local listeners.

// addBox adds a running sandbox of tenant with the given id (a real-looking
// one, for preview host names) and returns it.
func (f *fakeSandboxes) addBox(tenant, id string) api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now().UTC()
	sb := api.Sandbox{ID: id, Template: "default", Runtime: "container", Isolation: "container (shared host kernel)",
		State: api.StateRunning, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if f.boxes == nil {
		f.boxes = map[string]fakeBox{}
	}
	f.boxes[id] = fakeBox{tenant: tenant, sb: sb}
	return sb
}

// setState sets a sandbox's state.
func (f *fakeSandboxes) setState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[id]
	b.sb.State = state
	f.boxes[id] = b
}

// exposePort makes DialPort of the sandbox's port connect to addr.
func (f *fakeSandboxes) exposePort(id string, port int, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ports == nil {
		f.ports = map[string]string{}
	}
	f.ports[fmt.Sprintf("%s:%d", id, port)] = addr
}

// dialExposed connects to the listener the sandbox's port points at.
func (f *fakeSandboxes) dialExposed(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	addr, ok := f.ports[fmt.Sprintf("%s:%d", id, port)]
	f.mu.Unlock()
	if !ok {
		return nil, api.Errorf(api.CodeConflict, "no network in the fake")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// preview returns the sandbox's preview access, made on first use; f.mu
// is held.
func (f *fakeSandboxes) previewLocked(id string) *api.Preview {
	if f.previews == nil {
		f.previews = map[string]*api.Preview{}
	}
	p := f.previews[id]
	if p == nil {
		p = &api.Preview{Token: fakeToken()}
		f.previews[id] = p
	}
	return p
}

func fakeToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (f *fakeSandboxes) Preview(ctx context.Context, tenant, id string) (api.Preview, error) {
	if _, err := f.lookup(tenant, id); err != nil {
		return api.Preview{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.previewLocked(id), nil
}

func (f *fakeSandboxes) SetPreview(ctx context.Context, tenant, id string, req api.SetPreviewRequest) (api.Preview, error) {
	if _, err := f.lookup(tenant, id); err != nil {
		return api.Preview{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.previewLocked(id)
	if req.Public != nil {
		p.Public = *req.Public
	}
	if req.RotateToken {
		p.Token = fakeToken()
	}
	return *p, nil
}

func (f *fakeSandboxes) PreviewAccess(ctx context.Context, id string) (tenant, token string, public bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return "", "", false, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	p := f.previewLocked(id)
	return b.tenant, p.Token, p.Public, nil
}

func (f *fakeSandboxes) AgentAccess(ctx context.Context, id string) (tenant, token string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return "", "", api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	return b.tenant, b.sb.AgentToken, nil
}

func (s *fuzzSandboxes) AgentAccess(ctx context.Context, id string) (string, string, error) {
	return s.current().AgentAccess(ctx, id)
}

func (s *fuzzSandboxes) Preview(ctx context.Context, tenant, id string) (api.Preview, error) {
	return s.calledFor(tenant).Preview(ctx, tenant, id)
}

func (s *fuzzSandboxes) SetPreview(ctx context.Context, tenant, id string, req api.SetPreviewRequest) (api.Preview, error) {
	return s.calledFor(tenant).SetPreview(ctx, tenant, id, req)
}

// PreviewAccess has no tenant: the fuzzed server has no preview domain, so
// nothing calls it.
func (s *fuzzSandboxes) PreviewAccess(ctx context.Context, id string) (string, string, bool, error) {
	return s.current().PreviewAccess(ctx, id)
}
