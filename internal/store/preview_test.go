package store

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

func TestSandboxPreview(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		sb := newSandbox("sb-1", "acme")
		sb.PreviewToken, sb.AgentToken = "tok1", "agent1"
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSandbox(ctx, "sb-1")
		if err != nil || got.PreviewToken != "tok1" || got.PreviewPublic || got.AgentToken != "agent1" {
			t.Fatalf("GetSandbox = %+v, %v; want token tok1, private, agent token agent1", got, err)
		}
		updated := got.UpdatedAt

		yes, no := true, false
		for _, step := range []struct {
			public     *bool
			token      string
			wantToken  string
			wantPublic bool
		}{
			{&yes, "", "tok1", true},     // public only
			{nil, "tok2", "tok2", true},  // token only
			{nil, "", "tok2", true},      // nothing
			{&no, "tok3", "tok3", false}, // both
		} {
			got, err := s.SetSandboxPreview(ctx, "sb-1", step.public, step.token)
			if err != nil {
				t.Fatal(err)
			}
			if got.PreviewToken != step.wantToken || got.PreviewPublic != step.wantPublic {
				t.Errorf("SetSandboxPreview(%v, %q) = token %q public %v, want %q %v",
					step.public, step.token, got.PreviewToken, got.PreviewPublic, step.wantToken, step.wantPublic)
			}
			if !got.UpdatedAt.Equal(updated) {
				t.Errorf("SetSandboxPreview moved UpdatedAt from %v to %v", updated, got.UpdatedAt)
			}
		}

		// A move of the state machine leaves the preview alone.
		got, _ = s.GetSandbox(ctx, "sb-1")
		if _, err := s.Transition(ctx, "sb-1", Transition{From: []string{got.State}, To: api.StateStopped}); err != nil {
			t.Fatal(err)
		}
		if again, _ := s.GetSandbox(ctx, "sb-1"); again.PreviewToken != "tok3" || again.PreviewPublic {
			t.Errorf("after a transition: token %q public %v, want tok3 and private", again.PreviewToken, again.PreviewPublic)
		}
		if _, err := s.SetSandboxPreview(ctx, "sb-missing", &yes, "x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetSandboxPreview(missing) err = %v, want ErrNotFound", err)
		}
	})
}

// The migrations that add the preview columns and the agent token give
// every sandbox recorded before them tokens of its own: 32 random bytes in
// hex, as the manager makes them.
func TestMigrationGivesOldSandboxesPreviewTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		dsn := b.dsn(t)
		old, _, err := connect(dsn)
		if err != nil {
			t.Fatal(err)
		}
		// The database as the release before the preview tokens left it.
		before := slices.IndexFunc(migrations, func(m migration) bool {
			return strings.Contains(m.sqlite, "ADD COLUMN preview_token") && strings.Contains(m.postgres, "ADD COLUMN preview_token")
		})
		if before < 0 {
			t.Fatal("no migration adds preview_token")
		}
		if err := old.migrateTo(ctx, before); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"sb-old1", "sb-old2"} {
			_, err := old.db.ExecContext(ctx, `INSERT INTO sandboxes (id, tenant, template, runtime, state, error, cpus,
			memory_mb, pids, disk_mb, env, metadata, created_at, updated_at)
			VALUES (?, 'acme', 'default', 'container', 'running', '', 1, 512, 100, 1024, 'null', 'null', ?, ?)`,
				id, time.Now().UnixNano(), time.Now().UnixNano())
			if err != nil {
				t.Fatal(err)
			}
		}
		old.Close()

		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		list, err := s.ListSandboxes(ctx, "", nil, listing.Page{})
		if err != nil || len(list) != 2 {
			t.Fatalf("ListSandboxes = %d sandboxes, %v", len(list), err)
		}
		seen := map[string]bool{}
		for _, sb := range list {
			raw, err := hex.DecodeString(sb.PreviewToken)
			if err != nil || len(raw) != 32 || seen[sb.PreviewToken] || sb.PreviewPublic {
				t.Errorf("%s: token %q (public %v), want 64 hex digits of its own, private", sb.ID, sb.PreviewToken, sb.PreviewPublic)
			}
			seen[sb.PreviewToken] = true
			raw, err = hex.DecodeString(sb.AgentToken)
			if err != nil || len(raw) != 32 || seen[sb.AgentToken] {
				t.Errorf("%s: agent token %q, want 64 hex digits of its own", sb.ID, sb.AgentToken)
			}
			seen[sb.AgentToken] = true
		}
	})
}
