package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// TestServer: the server answers on its socket only, each Database is
// empty and its own, a dropped one is gone, and Stop ends the process and
// removes the directory.
func TestServer(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	var dsns []string
	for range 2 {
		dsns = append(dsns, s.Database(t))
	}
	if dsns[0] == dsns[1] {
		t.Fatalf("two databases with one DSN %s", dsns[0])
	}
	dbs := make([]*sql.DB, 2)
	for i, dsn := range dsns {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	if _, err := dbs[0].ExecContext(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := dbs[1].QueryRowContext(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the second database sees %d tables t (%v), want 0", n, err)
	}
	var listen string
	if err := dbs[0].QueryRowContext(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "" {
		t.Errorf("listen_addresses = %q (%v), want none: no TCP port", listen, err)
	}
	var user string
	if err := dbs[0].QueryRowContext(ctx, "SELECT current_user").Scan(&user); err != nil || user != superuser {
		t.Errorf("current_user = %q (%v), want %s", user, err, superuser)
	}
	for _, db := range dbs {
		db.Close()
	}

	pid := s.cmd.Process.Pid
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postgres (pid %d) after Stop: kill 0 = %v, want no such process", pid, err)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s after Stop: %v, want it gone", s.dir, err)
	}
}

// TestDatabaseDropped: a test's database is dropped when the test ends.
func TestDatabaseDropped(t *testing.T) {
	s := Start(t)
	var dsn string
	t.Run("user", func(t *testing.T) { dsn = s.Database(t) })
	name := dsn[len("postgres:///"):strings.IndexByte(dsn, '?')]
	var n int
	err := s.admin.QueryRowContext(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
	if err != nil || n != 0 {
		t.Errorf("database %s after its test: %d of it (%v), want dropped", name, n, err)
	}
}

func TestIdentPart(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestX/postgres", "testxpostgres"},
		{"Test_a-b c#1", "test_abc1"},
		{strings.Repeat("a", 50), strings.Repeat("a", 40)},
	} {
		if got := identPart(tc.in); got != tc.want {
			t.Errorf("identPart(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
