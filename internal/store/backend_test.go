package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"warren/internal/pgtest"
)

// pg is the PostgreSQL server of this test binary, started by the first
// test that needs it; each test gets a database of its own on it.
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := pg.Stop(); err != nil && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// A backend is a database the suite runs on: dsn makes a new empty one
// for t.
type backend struct {
	name string
	dsn  func(t testing.TB) string
}

var backends = []backend{
	{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "warren.db") }},
	{"postgres", func(t testing.TB) string { return pg.Database(t) }},
}

// forEachBackend runs test once per backend, as subtests named for them.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// openTest opens a store on a new database of b, closed when t ends, and
// returns it with its DSN.
func openTest(t testing.TB, b backend) (*Store, string) {
	t.Helper()
	dsn := b.dsn(t)
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}

// setSchemaVersion records that the store's database has run n
// migrations, as an older (or newer) binary would have left it.
func setSchemaVersion(t *testing.T, s *Store, n int) {
	t.Helper()
	if err := s.setSchemaVersion(context.Background(), s.db.sql, n); err != nil {
		t.Fatal(err)
	}
}
