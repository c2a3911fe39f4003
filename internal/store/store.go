// Package store keeps a node's metadata in SQLite: API keys, sandbox
// records and snapshot records. It is the single-machine store; the schema is plain SQL so that a
// PostgreSQL store for a fleet can mirror it.
//
// It records what the rest of warren decides: it does not create sandboxes,
// check quotas or validate the content of a record beyond what the schema
// needs (the manager validates requests, the runtime owns RuntimeState).
//
// A Store is safe for concurrent use; SQLite serializes writers, even in
// other processes.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is returned when a key, sandbox or snapshot does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when a record with the same ID exists already.
var ErrExists = errors.New("already exists")

// Store is the SQLite metadata store of a node.
type Store struct {
	db *sql.DB
}

// busyTimeoutMs is how long a statement waits for another writer's lock
// before it fails with SQLITE_BUSY.
const busyTimeoutMs = 10000

// migrations are the schema steps, applied in order. PRAGMA user_version
// holds how many have been applied. Never edit a released step; append one.
var migrations = []string{
	`CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		hash       BLOB NOT NULL UNIQUE,
		tenant     TEXT NOT NULL,
		admin      INTEGER NOT NULL,
		created_at INTEGER NOT NULL
	);
	CREATE TABLE sandboxes (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		template      TEXT NOT NULL,
		runtime       TEXT NOT NULL,
		state         TEXT NOT NULL,
		error         TEXT NOT NULL,
		cpus          REAL NOT NULL,
		memory_mb     INTEGER NOT NULL,
		pids          INTEGER NOT NULL,
		disk_mb       INTEGER NOT NULL,
		env           TEXT NOT NULL,
		metadata      TEXT NOT NULL,
		runtime_state BLOB,
		created_at    INTEGER NOT NULL,
		expires_at    INTEGER,
		updated_at    INTEGER NOT NULL
	);
	CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at);
	CREATE INDEX sandboxes_created ON sandboxes (created_at);`,
	`ALTER TABLE sandboxes ADD COLUMN origin TEXT NOT NULL DEFAULT '';
	CREATE TABLE snapshots (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		sandbox_id    TEXT NOT NULL,
		parent        TEXT NOT NULL,
		template      TEXT NOT NULL,
		state         TEXT NOT NULL,
		error         TEXT NOT NULL,
		disk_bytes    INTEGER NOT NULL,
		changed_bytes INTEGER NOT NULL,
		stored_bytes  INTEGER NOT NULL,
		ack_ns        INTEGER NOT NULL,
		upload_ns     INTEGER NOT NULL,
		created_at    INTEGER NOT NULL,
		durable_at    INTEGER
	);
	CREATE INDEX snapshots_tenant_created ON snapshots (tenant, created_at);
	CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);
	CREATE INDEX snapshots_parent ON snapshots (parent);`,
	`ALTER TABLE sandboxes ADD COLUMN workspace_mb INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN workspace_origin TEXT NOT NULL DEFAULT '';
	ALTER TABLE snapshots ADD COLUMN scope TEXT NOT NULL DEFAULT 'root';`,
	`ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE sandboxes ADD COLUMN net_slot INTEGER NOT NULL DEFAULT 0;`,
	// Exposed ports: each sandbox's preview access token and whether its
	// preview hosts are public. Sandboxes recorded before get a token of
	// 32 random bytes (SQLite's CSPRNG, seeded from the OS), in hex as the
	// manager makes them.
	`ALTER TABLE sandboxes ADD COLUMN preview_token TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN preview_public INTEGER NOT NULL DEFAULT 0;
	UPDATE sandboxes SET preview_token = lower(hex(randomblob(32)));`,
	// The state machine's compare-and-set (lifecycle.go): every change of a
	// sandbox's record counts up its version.
	`ALTER TABLE sandboxes ADD COLUMN version INTEGER NOT NULL DEFAULT 1;`,
	// An ended sandbox keeps no environment (Transition): forget the ones
	// recorded before.
	`UPDATE sandboxes SET env = 'null' WHERE state IN ` + finalStates + `;`,
}

// Open opens (creating if needed) the database at path and brings its
// schema up to date. The database runs in WAL mode with foreign keys on.
func Open(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
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
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	// One connection: SQLite runs one writer at a time anyway, and writers
	// that queue here wait their turn in order, where writers on several
	// connections would poll the lock with sleeps of up to 100 ms each (a
	// burst of 100 creates took seconds to record). Every statement is
	// short; none is issued while another's rows are open.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database. The Store must not be used afterwards.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// migrate applies the migrations the database has not seen yet, each in its
// own transaction together with the user_version that records it.
func (s *Store) migrate(ctx context.Context) error {
	for {
		done, err := s.migrateOne(ctx)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next pending migration; done is true when none is
// left.
func (s *Store) migrateOne(ctx context.Context) (done bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case version > len(migrations):
		return false, fmt.Errorf("schema version %d is newer than this binary knows (%d)", version, len(migrations))
	case version == len(migrations):
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, migrations[version]); err != nil {
		return false, fmt.Errorf("migration %d: %w", version+1, err)
	}
	// PRAGMA takes no bound parameters; version is an int we computed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version+1)); err != nil {
		return false, fmt.Errorf("migration %d: %w", version+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migration %d: %w", version+1, err)
	}
	return false, nil
}
