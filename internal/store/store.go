// Package store keeps warren's metadata: API keys, sandbox records and
// snapshot records, in SQLite for a single machine or in PostgreSQL for a
// fleet, behind the one Store type. Open picks the database by its DSN. Both
// run one schema (migrations.go) and the same query text: ? placeholders,
// numbered $1, $2… for PostgreSQL (rebind), and SQL both dialects read.
// Times are Unix nanoseconds in 64-bit integers on both.
//
// It records what the rest of warren decides: it does not create sandboxes,
// check quotas or validate the content of a record beyond what the schema
// needs (the manager validates requests, the runtime owns RuntimeState).
//
// A Store is safe for concurrent use, and so is a database shared by
// several processes (control-plane replicas on one PostgreSQL database):
// every change is one statement, never a read and a write back, which
// SQLite's single writer and PostgreSQL's READ COMMITTED row locks both
// keep whole. A sandbox's moves are compare-and-set (lifecycle.go), and so
// are a snapshot's (snapshots.go); an insert refuses a taken ID
// (ErrExists), and migrations run once under a lock (migrate).
// SetSandboxNetwork writes its fields unconditionally: the last writer
// wins.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned when a key, sandbox or snapshot does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when a record with the same ID exists already.
var ErrExists = errors.New("already exists")

// Store is the metadata store, on SQLite or PostgreSQL.
type Store struct {
	db   *db
	bell bell      // rung when events are recorded (events.go)
	keys *keyCache // nil on PostgreSQL (keys.go)
}

// busyTimeoutMs is how long a SQLite statement waits for another writer's
// lock before it fails with SQLITE_BUSY.
const busyTimeoutMs = 10000

// pgMaxConns bounds a Store's connections to PostgreSQL: enough for the
// node's concurrent requests, few enough that several replicas stay well
// under the server's max_connections (100 by default).
const pgMaxConns = 16

// Open opens the database dsn names and brings its schema up to date:
//
//   - a postgres:// or postgresql:// URL is a PostgreSQL database, opened
//     through pgx (for example
//     postgres://warren:PASSWORD@db.example:5432/warren?sslmode=verify-full,
//     or postgres:///warren?host=/run/postgresql for a unix socket). The
//     database must exist; Open creates the tables.
//   - anything else is the path of a SQLite file, created if needed, run in
//     WAL mode with foreign keys on.
//
// Errors name the database without its password.
func Open(ctx context.Context, dsn string) (*Store, error) {
	s, name, err := connect(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", name, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.sql.Close()
		return nil, fmt.Errorf("open store %s: %w", name, err)
	}
	return s, nil
}

// connect opens the database dsn names without touching its schema; name
// is how errors name the database.
func connect(dsn string) (s *Store, name string, err error) {
	if !isPostgres(dsn) {
		d, err := openSQLite(dsn)
		return &Store{db: d, keys: newKeyCache()}, dsn, err
	}
	d, err := openPostgres(dsn)
	return &Store{db: d}, redacted(dsn), err
}

// isPostgres reports whether dsn names a PostgreSQL database.
func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// redacted is dsn with its password, in the user info or the query, hidden.
func redacted(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres URL" // pgx's parse error shows it, redacted
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

func openPostgres(dsn string) (*db, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors print the DSN with its password redacted.
		return nil, err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	sqlDB.SetMaxOpenConns(pgMaxConns)
	sqlDB.SetMaxIdleConns(pgMaxConns)
	return &db{sql: sqlDB, postgres: true}, nil
}

func openSQLite(path string) (*db, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMs))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	// Every transaction takes the write lock at BEGIN: a read-then-write
	// transaction cannot then fail half-way on a lock upgrade.
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
	sqlDB, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	// One connection: SQLite runs one writer at a time anyway, and writers
	// that queue here wait their turn in order, where writers on several
	// connections would poll the lock with sleeps of up to 100 ms each (a
	// burst of 100 creates took seconds to record). Every statement is
	// short; none is issued while another's rows are open.
	sqlDB.SetMaxOpenConns(1)
	return &db{sql: sqlDB}, nil
}

// Close closes the database. The Store must not be used afterwards.
func (s *Store) Close() error {
	if err := s.db.sql.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// db runs the store's queries on either database. Query text is written
// once, with ? placeholders; for PostgreSQL they are numbered (rebind).
type db struct {
	sql      *sql.DB
	postgres bool
}

func (d *db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.sql.ExecContext(ctx, d.rebind(query), args...)
}

func (d *db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return d.sql.QueryContext(ctx, d.rebind(query), args...)
}

func (d *db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return d.sql.QueryRowContext(ctx, d.rebind(query), args...)
}

// rebind numbers the ? placeholders of query $1, $2… for PostgreSQL, and
// leaves it alone for SQLite. The store's queries hold no ? anywhere else
// (no string literal, identifier or comment has one).
func (d *db) rebind(query string) string {
	if !d.postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// isUniqueViolation reports whether err is a unique or primary key
// constraint refusing a row, on either database.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505" // unique_violation
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		code := sqliteErr.Code()
		return code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || code == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	}
	return false
}
