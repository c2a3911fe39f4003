package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/listing"
)

func newSandbox(id, tenant string) *Sandbox {
	return &Sandbox{
		ID: id, Tenant: tenant, Template: "default", Runtime: "container", State: api.StateStarting,
		CPUs: 1.5, MemoryMB: 512, Pids: 100, DiskMB: 1024,
	}
}

// TestOpenSQLitePragmas: a SQLite database runs in WAL mode with foreign
// keys on.
func TestOpenSQLitePragmas(t *testing.T) {
	s, _ := openTest(t, backends[0])
	ctx := context.Background()
	var mode string
	var fk int
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || fk != 1 {
		t.Errorf("journal_mode=%q foreign_keys=%d, want wal 1", mode, fk)
	}
}

func TestOpenRecordsSchemaVersion(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		if v, err := s.schemaVersion(context.Background(), s.db.sql); err != nil || v != len(migrations) {
			t.Errorf("schema version %d (%v), want %d", v, err, len(migrations))
		}
	})
}

func TestOpenPathWithSpecialCharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?#%", "w.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at %s: %v", path, err)
	}
}

func TestOpenRejectsNewerSchema(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, path := openTest(t, b)
		setSchemaVersion(t, s, len(migrations)+1)
		s.Close()
		if s2, err := Open(context.Background(), path); err == nil {
			s2.Close()
			t.Fatal("Open of a newer schema succeeded")
		}
	})
}

func TestKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		key, err := s.CreateKey(ctx, Key{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(key, "wk_") || len(key) < 40 {
			t.Errorf("key %q: want wk_ and at least 256 bits", key)
		}
		k, err := s.LookupKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if k.Tenant != "acme" || k.Admin || k.ID == "" || time.Since(k.CreatedAt) > time.Minute {
			t.Errorf("LookupKey = %+v", k)
		}
		admin, err := s.CreateKey(ctx, Key{Tenant: "ops", Admin: true})
		if err != nil {
			t.Fatal(err)
		}
		if k, err := s.LookupKey(ctx, admin); err != nil || !k.Admin || k.Tenant != "ops" {
			t.Errorf("admin LookupKey = %+v, %v", k, err)
		}
		for _, bad := range []string{"", "wk_", key + "x", key[:len(key)-1], strings.ToUpper(key)} {
			if _, err := s.LookupKey(ctx, bad); !errors.Is(err, ErrNotFound) {
				t.Errorf("LookupKey(%q) err = %v, want ErrNotFound", bad, err)
			}
		}
		if _, err := s.CreateKey(ctx, Key{Tenant: ""}); err == nil {
			t.Error("CreateKey with empty tenant succeeded")
		}
		// Only the hash is kept.
		hash := sha256.Sum256([]byte(key))
		var stored []byte
		if err := s.db.QueryRowContext(ctx, `SELECT hash FROM api_keys WHERE id = ?`, k.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stored, hash[:]) {
			t.Errorf("stored hash %x, want sha256 of the key", stored)
		}
		// Found (and, on SQLite, kept in memory) before it is deleted, a
		// key authenticates nothing after.
		if err := s.DeleteKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LookupKey(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("LookupKey after DeleteKey: %v, want ErrNotFound", err)
		}
	})
}

func TestEnsureAdminKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "keys", "admin.key")
		key, created, err := s.EnsureAdminKey(ctx, path)
		if err != nil || !created {
			t.Fatalf("first EnsureAdminKey = %q, %v, %v", key, created, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", fi.Mode().Perm())
		}
		k, err := s.LookupKey(ctx, key)
		if err != nil || !k.Admin || k.Tenant != api.AdminTenant {
			t.Errorf("LookupKey(admin) = %+v, %v", k, err)
		}
		again, created, err := s.EnsureAdminKey(ctx, path)
		if err != nil || created || again != key {
			t.Errorf("second EnsureAdminKey = %q, %v, %v; want %q, false", again, created, err, key)
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Errorf("directory holds %d entries, want only the key file", len(entries))
		}

		// A file whose key the store does not know (a new database) is replaced.
		if err := os.WriteFile(path, []byte("wk_stale\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fresh, created, err := s.EnsureAdminKey(ctx, path)
		if err != nil || !created || fresh == key {
			t.Errorf("EnsureAdminKey over a stale file = %q, %v, %v", fresh, created, err)
		}
		held, _ := os.ReadFile(path)
		if strings.TrimSpace(string(held)) != fresh {
			t.Errorf("file holds %q, want %q", held, fresh)
		}

		// A tenant key in the file is not promoted to admin.
		user, _ := s.CreateKey(ctx, Key{Tenant: "acme"})
		if err := os.WriteFile(path, []byte(user), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, created, err := s.EnsureAdminKey(ctx, path); err != nil || !created || got == user {
			t.Errorf("EnsureAdminKey over a tenant key = %q, %v, %v", got, created, err)
		}
	})
}

func TestSandboxRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		sb := newSandbox("sb-1", "acme")
		sb.Env = map[string]string{"A": "1"}
		sb.Metadata = map[string]string{"run": "42"}
		sb.RuntimeState = []byte(`{"pid":7}`)
		sb.ExpiresAt = time.Now().Add(time.Hour)
		sb.Network = api.NetworkPolicy{Allow: []string{"pypi.org", "10.1.0.0/16"}, Deny: []string{"10.1.2.3"}}
		sb.Persistence = api.PersistenceAlways
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if sb.CreatedAt.IsZero() || sb.UpdatedAt.IsZero() {
			t.Errorf("after insert: created %v updated %v", sb.CreatedAt, sb.UpdatedAt)
		}
		got, err := s.GetSandbox(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		if !sandboxEqual(got, *sb) {
			t.Errorf("GetSandbox = %+v\nwant %+v", got, *sb)
		}
		if _, err := s.GetSandbox(ctx, "sb-nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetSandbox(missing) err = %v, want ErrNotFound", err)
		}
		if err := s.InsertSandbox(ctx, newSandbox("sb-1", "acme")); !errors.Is(err, ErrExists) {
			t.Errorf("duplicate InsertSandbox: %v, want ErrExists", err)
		}
		bad := newSandbox("sb-2", "acme")
		bad.State = "dancing"
		if err := s.InsertSandbox(ctx, bad); err == nil {
			t.Error("InsertSandbox with an invalid state succeeded")
		}

		before := got.UpdatedAt
		slot, none := 17, time.Time{}
		moved, err := s.Transition(ctx, "sb-1", Transition{From: []string{api.StateStarting}, To: api.StateFailed,
			Error: "boom", RuntimeState: []byte(`{"pid":8}`), NetSlot: &slot, Expires: &none})
		if err != nil {
			t.Fatal(err)
		}
		if !moved.UpdatedAt.After(before) || moved.Version != got.Version+1 {
			t.Errorf("UpdatedAt %v (was %v), version %d (was %d)", moved.UpdatedAt, before, moved.Version, got.Version)
		}
		again, _ := s.GetSandbox(ctx, "sb-1")
		if again.State != api.StateFailed || again.Error != "boom" || !again.ExpiresAt.IsZero() ||
			string(again.RuntimeState) != `{"pid":8}` || again.Template != "default" || again.NetSlot != 17 ||
			!reflect.DeepEqual(again.Network, sb.Network) || again.Env != nil {
			t.Errorf("after the move: %+v", again)
		}
		if err := s.SetSandboxNetwork(ctx, "sb-1", api.NetworkPolicy{None: true}); err != nil {
			t.Fatal(err)
		}
		if again, _ := s.GetSandbox(ctx, "sb-1"); !again.Network.None || again.Network.Allow != nil {
			t.Errorf("after SetSandboxNetwork: %+v", again.Network)
		}
		if err := s.SetSandboxNetwork(ctx, "sb-missing", api.NetworkPolicy{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetSandboxNetwork(missing) err = %v, want ErrNotFound", err)
		}
		if _, err := s.Transition(ctx, "sb-missing", Transition{From: Live, To: api.StateStopped}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Transition(missing) err = %v, want ErrNotFound", err)
		}

		if err := s.DeleteSandbox(ctx, "sb-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSandbox(ctx, "sb-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second DeleteSandbox err = %v, want ErrNotFound", err)
		}
		if _, err := s.GetSandbox(ctx, "sb-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetSandbox after delete err = %v", err)
		}
	})
}

func sandboxEqual(a, b Sandbox) bool {
	ta := []time.Time{a.CreatedAt, a.ExpiresAt, a.UpdatedAt}
	tb := []time.Time{b.CreatedAt, b.ExpiresAt, b.UpdatedAt}
	for i := range ta {
		if !ta[i].Equal(tb[i]) {
			return false
		}
	}
	a.CreatedAt, a.ExpiresAt, a.UpdatedAt = time.Time{}, time.Time{}, time.Time{}
	b.CreatedAt, b.ExpiresAt, b.UpdatedAt = time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestListSandboxes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		base := time.Now()
		for i, tenant := range []string{"a", "b", "a", "b", "a"} {
			sb := newSandbox(fmt.Sprintf("sb-%d", i), tenant)
			// Inserted out of creation order: the list must sort.
			sb.CreatedAt = base.Add(time.Duration(10-i) * time.Second)
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		ids := func(list []Sandbox) []string {
			var out []string
			for _, sb := range list {
				out = append(out, sb.ID)
			}
			return out
		}
		for _, tc := range []struct {
			tenant string
			want   []string
		}{
			{"a", []string{"sb-4", "sb-2", "sb-0"}},
			{"b", []string{"sb-3", "sb-1"}},
			{"", []string{"sb-4", "sb-3", "sb-2", "sb-1", "sb-0"}},
			{"nobody", nil},
		} {
			list, err := s.ListSandboxes(ctx, tc.tenant, nil, listing.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(list); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ListSandboxes(%q) = %v, want %v", tc.tenant, got, tc.want)
			}
		}
	})
}

func TestConcurrentInserts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		const n = 50
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.InsertSandbox(ctx, newSandbox(fmt.Sprintf("sb-%d", i), "acme"))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("insert %d: %v", i, err)
			}
		}
		all, err := s.ListSandboxes(ctx, "acme", nil, listing.Page{})
		if err != nil || len(all) != n {
			t.Fatalf("listed %d sandboxes (err %v), want %d", len(all), err, n)
		}
	})
}

func TestReopenKeepsData(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, path := openTest(t, b)
		ctx := context.Background()
		key, err := s.CreateKey(ctx, Key{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		sb := newSandbox("sb-keep", "acme")
		sb.Metadata = map[string]string{"k": "v"}
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if k, err := s2.LookupKey(ctx, key); err != nil || k.Tenant != "acme" {
			t.Errorf("LookupKey after reopen = %+v, %v", k, err)
		}
		got, err := s2.GetSandbox(ctx, "sb-keep")
		if err != nil || !sandboxEqual(got, *sb) {
			t.Errorf("GetSandbox after reopen = %+v, %v\nwant %+v", got, err, *sb)
		}
	})
}

func TestExpiredAndPurge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		now := time.Now()
		mk := func(id, state string, expires time.Time) *Sandbox {
			sb := newSandbox(id, "acme")
			sb.State = state
			sb.ExpiresAt = expires
			sb.Node = "n1"
			if id == "sb-elsewhere" {
				sb.Node = "n2"
			}
			if err := s.InsertSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
			return sb
		}
		mk("sb-past", api.StateRunning, now.Add(-time.Minute))
		mk("sb-now", api.StateStarting, now)
		mk("sb-future", api.StateRunning, now.Add(time.Minute))
		mk("sb-never", api.StateRunning, time.Time{})
		mk("sb-stopped", api.StateStopped, now.Add(-time.Hour))
		mk("sb-failed", api.StateFailed, now.Add(-time.Hour)) // keeps its disks until they are dropped
		mk("sb-failed-bare", api.StateFailed, time.Time{})
		mk("sb-elsewhere", api.StateRunning, now.Add(-time.Minute)) // another node's to reap

		expired, err := s.ExpiredSandboxes(ctx, "n1", now)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sb := range expired {
			got = append(got, sb.ID)
		}
		if want := []string{"sb-past", "sb-now", "sb-failed"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ExpiredSandboxes = %v, want %v", got, want)
		}

		n, err := s.PurgeFinal(ctx, now.Add(-time.Hour))
		if err != nil || n != 0 {
			t.Errorf("PurgeFinal(an hour ago) = %d, %v; want 0", n, err)
		}
		n, err = s.PurgeFinal(ctx, time.Now().Add(time.Second))
		if err != nil || n != 2 {
			t.Errorf("PurgeFinal(now) = %d, %v; want 2", n, err)
		}
		list, _ := s.ListSandboxes(ctx, "", nil, listing.Page{})
		if len(list) != 6 {
			t.Errorf("%d sandboxes left, want 6", len(list))
		}
		for _, sb := range list {
			if isFinal(sb.State) && sb.ID != "sb-failed" {
				t.Errorf("%s in state %s survived the purge", sb.ID, sb.State)
			}
		}
		// Once its disks are dropped (no expiry), a failed sandbox goes too.
		if _, err := s.SetExpiry(ctx, "sb-failed", time.Time{}, api.StateFailed); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PurgeFinal(ctx, time.Now().Add(time.Second)); err != nil || n != 1 {
			t.Errorf("PurgeFinal(now) after the failed sandbox's disks went = %d, %v; want 1", n, err)
		}
	})
}

// TestOpenBadPostgresDSN: a DSN that cannot work says what is wrong with
// it, and never shows its password.
func TestOpenBadPostgresDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:s3cret@host:notaport/db", "invalid port"},
		{"postgres://u:s3cret@host/db?sslmode=bogus", "sslmode is invalid"},
		{"postgresql://u:s3cret@host/db?connect_timeout=x", "invalid connect_timeout"},
		{"postgres://u:s3%zzcret@host/db", "invalid percent-encoded token in password"},
		{"postgres://u:s3cret@/db?host=/nonexistent", "no such file or directory"},
		{"postgres:///db?host=/nonexistent&password=s3cret", "no such file or directory"},
	} {
		s, err := Open(context.Background(), tc.dsn)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tc.dsn)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3") {
			t.Errorf("Open(%q): %v; want it to say %q, without the password", tc.dsn, err, tc.want)
		}
	}
}

func TestRebind(t *testing.T) {
	pg, lite := &db{postgres: true}, &db{}
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"WHERE id = ? AND state IN (?, ?) LIMIT ?", "WHERE id = $1 AND state IN ($2, $3) LIMIT $4"},
	} {
		if got := pg.rebind(tc.in); got != tc.want {
			t.Errorf("postgres rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := lite.rebind(tc.in); got != tc.in {
			t.Errorf("sqlite rebind(%q) = %q, want it unchanged", tc.in, got)
		}
	}
}

func TestKeyCache(t *testing.T) {
	c := newKeyCache()
	h := sha256.Sum256([]byte("wk_a"))
	k := Key{ID: "key-a", Tenant: "acme"}
	gen := c.generation()
	c.put(h, k, gen)
	if got, ok := c.get(h); !ok || got != k {
		t.Fatalf("get = %+v, %v; want %+v", got, ok, k)
	}
	// A lookup that read the database before a delete cleared the cache
	// does not put back what the delete removed.
	c.clear()
	c.put(h, k, gen)
	if _, ok := c.get(h); ok {
		t.Error("a put older than a clear was kept")
	}
	c.put(h, k, c.generation())
	c.keys[h] = cachedKey{key: k, expires: time.Now().Add(-time.Millisecond)}
	if _, ok := c.get(h); ok {
		t.Error("an expired entry was returned")
	}
	for i := range keyCacheSize + 1 {
		c.put(sha256.Sum256([]byte{byte(i), byte(i >> 8)}), k, c.generation())
	}
	if len(c.keys) > keyCacheSize {
		t.Errorf("cache holds %d keys, over its %d", len(c.keys), keyCacheSize)
	}
	var none *keyCache // PostgreSQL's
	none.put(h, k, none.generation())
	if _, ok := none.get(h); ok {
		t.Error("a nil cache returned a key")
	}
	none.clear()
}
