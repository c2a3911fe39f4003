package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// pageAll lists every page of list, limit at a time, calling between
// before each page after the first; it returns the IDs in the order listed.
func pageAll(t *testing.T, limit int, list func(listing.Page) ([]string, listing.Cursor), between func(page int)) []string {
	t.Helper()
	var got []string
	page := listing.Page{Limit: limit}
	for n := 0; ; n++ {
		if n > 0 && between != nil {
			between(n)
		}
		ids, last := list(page)
		if len(ids) > limit {
			t.Fatalf("page %d has %d records, limit %d", n, len(ids), limit)
		}
		got = append(got, ids...)
		if len(ids) < limit {
			return got
		}
		page.After = last
	}
}

// TestListSandboxesPages: keyset pages answer every record once, in
// creation order (ties broken by id), however records are inserted and
// deleted between pages: a record present throughout is listed exactly
// once, and none twice.
func TestListSandboxesPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		base := time.Now()
		insert := func(id string, at time.Time) {
			sb := newSandbox(id, "acme")
			sb.CreatedAt = at
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 10 {
			// Pairs created at the same instant: the id orders them.
			insert(fmt.Sprintf("sb-%02d", i), base.Add(time.Duration(i/2)*time.Second))
		}
		list := func(p listing.Page) ([]string, listing.Cursor) {
			recs, err := s.ListSandboxes(ctx, "acme", nil, p)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			var last listing.Cursor
			for _, r := range recs {
				ids = append(ids, r.ID)
				last = listing.Cursor{CreatedAt: r.CreatedAt, ID: r.ID}
			}
			return ids, last
		}
		want := []string{"sb-00", "sb-01", "sb-02", "sb-03", "sb-04", "sb-05", "sb-06", "sb-07", "sb-08", "sb-09"}
		if got := pageAll(t, 3, list, nil); !slices.Equal(got, want) {
			t.Errorf("pages = %v, want %v", got, want)
		}
		// Between pages: delete one already listed and one not yet, insert one
		// before the cursor and one after it.
		got := pageAll(t, 3, list, func(page int) {
			if page != 1 {
				return
			}
			for _, id := range []string{"sb-01", "sb-07"} {
				if err := s.DeleteSandbox(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			insert("sb-early", base.Add(-time.Hour))
			insert("sb-late", base.Add(time.Hour))
		})
		want = []string{"sb-00", "sb-01", "sb-02", "sb-03", "sb-04", "sb-05", "sb-06", "sb-08", "sb-09", "sb-late"}
		if !slices.Equal(got, want) {
			t.Errorf("pages with inserts and deletes between = %v, want %v", got, want)
		}
	})
}

func TestListSandboxesByState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		for i, state := range []string{api.StateRunning, api.StateStopped, api.StatePaused, api.StateFailed, api.StateRunning} {
			sb := newSandbox(fmt.Sprintf("sb-%d", i), "acme")
			sb.State = state
			sb.CreatedAt = time.Now().Add(time.Duration(i) * time.Second)
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			states []string
			want   []string
		}{
			{nil, []string{"sb-0", "sb-1", "sb-2", "sb-3", "sb-4"}},
			{[]string{api.StateRunning}, []string{"sb-0", "sb-4"}},
			{[]string{api.StateStopped, api.StateFailed}, []string{"sb-1", "sb-3"}},
			{[]string{api.StateStarting}, nil},
		} {
			recs, err := s.ListSandboxes(ctx, "", tc.states, listing.Page{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ListSandboxes(states %v) = %v, want %v", tc.states, got, tc.want)
			}
		}
	})
}

// TestEndedSandboxForgetsEnv pins the 4.5 MB list of five create/delete
// cycles: a record kept after its sandbox ended kept its environment (up
// to the 1 MiB of a request body) for an hour. The env must leave the
// store itself, not only the answer.
func TestEndedSandboxForgetsEnv(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, final := range []string{api.StateStopped, api.StateFailed} {
			t.Run(final, func(t *testing.T) {
				s, _ := openTest(t, b)
				ctx := context.Background()
				sb := newSandbox("sb-env", "acme")
				sb.Env = map[string]string{"BIG": string(make([]byte, 1<<16))}
				sb.Metadata = map[string]string{"k": "v"}
				if err := s.InsertSandbox(ctx, sb); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Transition(ctx, sb.ID, Transition{From: []string{api.StateStarting}, To: api.StateRunning}); err != nil {
					t.Fatal(err)
				}
				if got, _ := s.GetSandbox(ctx, sb.ID); len(got.Env) != 1 {
					t.Fatalf("running sandbox lost its env: %v", got.Env)
				}
				moved, err := s.Transition(ctx, sb.ID, Transition{From: []string{api.StateRunning}, To: final})
				if err != nil {
					t.Fatal(err)
				}
				if moved.Env != nil {
					t.Errorf("record after the move keeps env of %d entries", len(moved.Env))
				}
				got, err := s.GetSandbox(ctx, sb.ID)
				if err != nil || got.Env != nil || got.Metadata["k"] != "v" {
					t.Errorf("GetSandbox = env %d entries, metadata %v, %v; want no env, the metadata", len(got.Env), got.Metadata, err)
				}
				var stored int
				if err := s.db.QueryRowContext(ctx, `SELECT length(env) FROM sandboxes WHERE id = ?`, sb.ID).Scan(&stored); err != nil || stored > len("null") {
					t.Errorf("stored env is %d bytes (%v), want null", stored, err)
				}
			})
		}
	})
}

// TestMigrationForgetsEndedEnv: records that ended before the migration
// lose their env with it; live ones keep theirs.
func TestMigrationForgetsEndedEnv(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		for _, id := range []string{"sb-live", "sb-ended"} {
			sb := newSandbox(id, "acme")
			sb.Env = map[string]string{"A": "b"}
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		// As an older binary left it: ended, env kept. Then the step runs.
		if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = 'stopped' WHERE id = 'sb-ended'`); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(migrations, func(m migration) bool { return strings.Contains(m.sqlite, "SET env = 'null'") })
		step := migrations[i].sqlite
		if b.name == "postgres" {
			step = migrations[i].postgres
		}
		if _, err := s.db.sql.ExecContext(ctx, step); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
		live, _ := s.GetSandbox(ctx, "sb-live")
		ended, _ := s.GetSandbox(ctx, "sb-ended")
		if live.Env["A"] != "b" || ended.Env != nil {
			t.Errorf("after migration: live env %v, ended env %v; want {A:b}, nil", live.Env, ended.Env)
		}
	})
}

func TestListSnapshotsPagesAndStates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		base := time.Now()
		states := []string{api.SnapshotDurable, api.SnapshotPending, api.SnapshotFailed, api.SnapshotDurable, api.SnapshotDurable}
		for i, state := range states {
			sb := "sb-a"
			if i%2 == 1 {
				sb = "sb-b"
			}
			sn := &Snapshot{ID: fmt.Sprintf("sn-%d", i), Tenant: "acme", SandboxID: sb, State: state, CreatedAt: base.Add(time.Duration(i) * time.Second)}
			if err := s.InsertSnapshot(ctx, sn); err != nil {
				t.Fatal(err)
			}
		}
		other := &Snapshot{ID: "sn-other", Tenant: "other", SandboxID: "sb-a", State: api.SnapshotDurable}
		if err := s.InsertSnapshot(ctx, other); err != nil {
			t.Fatal(err)
		}
		list := func(sandbox string, states []string) func(listing.Page) ([]string, listing.Cursor) {
			return func(p listing.Page) ([]string, listing.Cursor) {
				sns, err := s.ListSnapshots(ctx, "acme", sandbox, states, p)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				var last listing.Cursor
				for _, sn := range sns {
					ids = append(ids, sn.ID)
					last = listing.Cursor{CreatedAt: sn.CreatedAt, ID: sn.ID}
				}
				return ids, last
			}
		}
		for _, tc := range []struct {
			sandbox string
			states  []string
			want    []string
		}{
			{"", nil, []string{"sn-0", "sn-1", "sn-2", "sn-3", "sn-4"}},
			{"sb-a", nil, []string{"sn-0", "sn-2", "sn-4"}},
			{"", []string{api.SnapshotDurable}, []string{"sn-0", "sn-3", "sn-4"}},
			{"sb-b", []string{api.SnapshotDurable, api.SnapshotPending}, []string{"sn-1", "sn-3"}},
		} {
			if got := pageAll(t, 2, list(tc.sandbox, tc.states), nil); !slices.Equal(got, tc.want) {
				t.Errorf("ListSnapshots(%q, %v) pages = %v, want %v", tc.sandbox, tc.states, got, tc.want)
			}
		}
	})
}

func TestListKeysPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		for range 5 {
			if _, err := s.CreateKey(ctx, Key{Tenant: "acme"}); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.ListKeys(ctx, listing.Page{})
		if err != nil || len(all) != 5 {
			t.Fatalf("ListKeys = %d keys, %v", len(all), err)
		}
		var want []string
		for _, k := range all {
			want = append(want, k.ID)
		}
		got := pageAll(t, 2, func(p listing.Page) ([]string, listing.Cursor) {
			keys, err := s.ListKeys(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			var last listing.Cursor
			for _, k := range keys {
				ids = append(ids, k.ID)
				last = listing.Cursor{CreatedAt: k.CreatedAt, ID: k.ID}
			}
			return ids, last
		}, nil)
		if !slices.Equal(got, want) {
			t.Errorf("key pages = %v, want %v", got, want)
		}
	})
}
