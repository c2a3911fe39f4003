package sandbox

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"warren/api"
	"warren/internal/store"
)

func TestNewPreviewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := newToken()
		raw, err := hex.DecodeString(tok)
		if err != nil || len(raw) != tokenBytes || seen[tok] {
			t.Fatalf("token %q: want %d random bytes in hex, each new", tok, tokenBytes)
		}
		seen[tok] = true
	}
}

func TestPreview(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := &Manager{log: slog.New(slog.NewTextHandler(io.Discard, nil)), deps: Deps{Store: st}}
	rec := store.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", Tenant: "acme", Template: "default", Runtime: "container",
		State: api.StateRunning, PreviewToken: newToken()}
	if err := st.InsertSandbox(ctx, &rec); err != nil {
		t.Fatal(err)
	}

	p, err := m.Preview(ctx, "acme", rec.ID)
	if err != nil || p.Token != rec.PreviewToken || p.Public || p.URL != nil {
		t.Fatalf("Preview = %+v, %v; want the record's token, private, no URL", p, err)
	}
	for _, tenant := range []string{"other", ""} {
		if _, err := m.Preview(ctx, tenant, rec.ID); !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("Preview for tenant %q: %v, want not_found", tenant, err)
		}
		if _, err := m.SetPreview(ctx, tenant, rec.ID, api.SetPreviewRequest{RotateToken: true}); !api.IsCode(err, api.CodeNotFound) {
			t.Errorf("SetPreview for tenant %q: %v, want not_found", tenant, err)
		}
	}

	yes, no := true, false
	p, err = m.SetPreview(ctx, "acme", rec.ID, api.SetPreviewRequest{Public: &yes})
	if err != nil || !p.Public || p.Token != rec.PreviewToken {
		t.Errorf("make public: %+v, %v; want public with the same token", p, err)
	}
	p, err = m.SetPreview(ctx, "acme", rec.ID, api.SetPreviewRequest{RotateToken: true})
	if err != nil || !p.Public || p.Token == rec.PreviewToken || len(p.Token) != 2*tokenBytes {
		t.Errorf("rotate: %+v, %v; want still public with a new token", p, err)
	}
	rotated := p.Token
	p, err = m.SetPreview(ctx, "acme", rec.ID, api.SetPreviewRequest{Public: &no})
	if err != nil || p.Public || p.Token != rotated {
		t.Errorf("make private: %+v, %v; want private with the rotated token", p, err)
	}

	tenant, token, public, err := m.PreviewAccess(ctx, rec.ID)
	if err != nil || tenant != "acme" || token != rotated || public {
		t.Errorf("PreviewAccess = %q %q %v %v", tenant, token, public, err)
	}
	if _, _, _, err := m.PreviewAccess(ctx, "sb-bbbbbbbbbbbbbbbbbbbb"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("PreviewAccess of an unknown sandbox: %v, want not_found", err)
	}
}
