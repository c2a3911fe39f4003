package store

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"warren/internal/listing"
)

// TestRevocations (issue 35, row 9): deleting a key and rotating a
// tenant's agent tokens each move the revocation count on, which other
// processes poll; MissingKeys names the revoked keys; a rotation gives
// each of the tenant's sandboxes a new token of its own and leaves other
// tenants' alone.
func TestRevocations(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		count := func() int64 {
			t.Helper()
			n, err := s.Revocations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		n0 := count()
		for _, tenant := range []string{"acme", "acme"} {
			if _, err := s.CreateKey(ctx, Key{Tenant: tenant}); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := s.ListKeys(ctx, listing.Page{})
		if err != nil || len(keys) != 2 {
			t.Fatalf("keys: %v, %v", keys, err)
		}
		if err := s.DeleteKey(ctx, keys[0].ID); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != n0+1 {
			t.Errorf("revocations after a delete: %d, want %d", n, n0+1)
		}
		if err := s.DeleteKey(ctx, keys[0].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleting it again: %v, want ErrNotFound", err)
		}
		if n := count(); n != n0+1 {
			t.Errorf("revocations after a failed delete: %d, want %d", n, n0+1)
		}
		missing, err := s.MissingKeys(ctx, []string{keys[0].ID, keys[1].ID, "key-never"})
		if err != nil || !slices.Equal(missing, []string{keys[0].ID, "key-never"}) {
			t.Errorf("MissingKeys: %v, %v; want the deleted one and the unknown one", missing, err)
		}

		tokens := map[string]string{}
		for _, sb := range []struct{ id, tenant string }{{"sb-1", "acme"}, {"sb-2", "acme"}, {"sb-3", "other"}} {
			rec := newSandbox(sb.id, sb.tenant)
			rec.AgentToken = "old-" + sb.id
			if err := s.InsertSandbox(ctx, rec); err != nil {
				t.Fatal(err)
			}
			tokens[sb.id] = rec.AgentToken
		}
		ids, err := s.RotateAgentTokens(ctx, "acme")
		slices.Sort(ids)
		if err != nil || !slices.Equal(ids, []string{"sb-1", "sb-2"}) {
			t.Fatalf("RotateAgentTokens(acme): %v, %v; want sb-1 and sb-2", ids, err)
		}
		if n := count(); n != n0+2 {
			t.Errorf("revocations after a rotation: %d, want %d", n, n0+2)
		}
		seen := map[string]bool{}
		for id, old := range tokens {
			rec, err := s.GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if id == "sb-3" {
				if rec.AgentToken != old {
					t.Errorf("another tenant's token changed: %q", rec.AgentToken)
				}
				continue
			}
			if raw, err := hex.DecodeString(rec.AgentToken); err != nil || len(raw) != 32 || seen[rec.AgentToken] {
				t.Errorf("%s: token %q after a rotation, want 64 hex digits of its own", id, rec.AgentToken)
			}
			seen[rec.AgentToken] = true
		}
	})
}
