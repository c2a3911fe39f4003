package store

import (
	"context"
	"database/sql"
	"fmt"
)

// A migration is one schema step in each database's SQL: the same text
// on both (same), or, where types or functions differ, each spelled out.
// The types map one way: SQLite's INTEGER (64 bits) is BIGINT, REAL is
// DOUBLE PRECISION, BLOB is BYTEA, and an INTEGER that holds a Go bool is
// BOOLEAN. The SQLite text of a released step never changes: existing
// databases ran it, and their user_version counts the steps they ran.
type migration struct {
	sqlite, postgres string
}

func same(q string) migration { return migration{sqlite: q, postgres: q} }

// migrations are the schema steps, applied in order. Never edit a released
// step; append one.
var migrations = []migration{
	{
		sqlite: `CREATE TABLE api_keys (
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
		postgres: `CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		hash       BYTEA NOT NULL UNIQUE,
		tenant     TEXT NOT NULL,
		admin      BOOLEAN NOT NULL,
		created_at BIGINT NOT NULL
	);
	CREATE TABLE sandboxes (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		template      TEXT NOT NULL,
		runtime       TEXT NOT NULL,
		state         TEXT NOT NULL,
		error         TEXT NOT NULL,
		cpus          DOUBLE PRECISION NOT NULL,
		memory_mb     BIGINT NOT NULL,
		pids          BIGINT NOT NULL,
		disk_mb       BIGINT NOT NULL,
		env           TEXT NOT NULL,
		metadata      TEXT NOT NULL,
		runtime_state BYTEA,
		created_at    BIGINT NOT NULL,
		expires_at    BIGINT,
		updated_at    BIGINT NOT NULL
	);
	CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at);
	CREATE INDEX sandboxes_created ON sandboxes (created_at);`,
	},
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN origin TEXT NOT NULL DEFAULT '';
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
		postgres: `ALTER TABLE sandboxes ADD COLUMN origin TEXT NOT NULL DEFAULT '';
	CREATE TABLE snapshots (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		sandbox_id    TEXT NOT NULL,
		parent        TEXT NOT NULL,
		template      TEXT NOT NULL,
		state         TEXT NOT NULL,
		error         TEXT NOT NULL,
		disk_bytes    BIGINT NOT NULL,
		changed_bytes BIGINT NOT NULL,
		stored_bytes  BIGINT NOT NULL,
		ack_ns        BIGINT NOT NULL,
		upload_ns     BIGINT NOT NULL,
		created_at    BIGINT NOT NULL,
		durable_at    BIGINT
	);
	CREATE INDEX snapshots_tenant_created ON snapshots (tenant, created_at);
	CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);
	CREATE INDEX snapshots_parent ON snapshots (parent);`,
	},
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN workspace_mb INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN workspace_origin TEXT NOT NULL DEFAULT '';
	ALTER TABLE snapshots ADD COLUMN scope TEXT NOT NULL DEFAULT 'root';`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN workspace_mb BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN workspace_origin TEXT NOT NULL DEFAULT '';
	ALTER TABLE snapshots ADD COLUMN scope TEXT NOT NULL DEFAULT 'root';`,
	},
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE sandboxes ADD COLUMN net_slot INTEGER NOT NULL DEFAULT 0;`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE sandboxes ADD COLUMN net_slot BIGINT NOT NULL DEFAULT 0;`,
	},
	// Exposed ports: each sandbox's preview access token and whether its
	// preview hosts are public. Sandboxes recorded before get a token of
	// 32 random bytes in hex, as the manager makes them: from SQLite's
	// CSPRNG (seeded from the OS); PostgreSQL has no random bytes without
	// pgcrypto, so there the SHA-256 of two gen_random_uuid()s (244 bits
	// from its CSPRNG).
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN preview_token TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN preview_public INTEGER NOT NULL DEFAULT 0;
	UPDATE sandboxes SET preview_token = lower(hex(randomblob(32)));`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN preview_token TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN preview_public BOOLEAN NOT NULL DEFAULT FALSE;
	UPDATE sandboxes SET preview_token = encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex');`,
	},
	// The state machine's compare-and-set (lifecycle.go): every change of a
	// sandbox's record counts up its version.
	{
		sqlite:   `ALTER TABLE sandboxes ADD COLUMN version INTEGER NOT NULL DEFAULT 1;`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN version BIGINT NOT NULL DEFAULT 1;`,
	},
	// An ended sandbox keeps no environment (Transition): forget the ones
	// recorded before.
	same(`UPDATE sandboxes SET env = 'null' WHERE state IN ` + finalStates + `;`),
	// The fleet: its nodes (nodes.go), the node each sandbox runs on and
	// each snapshot was taken on ("" for a single machine's from before,
	// which ClaimUnowned gives to the node).
	{
		sqlite: `CREATE TABLE nodes (
		id           TEXT PRIMARY KEY,
		addr         TEXT NOT NULL,
		region       TEXT NOT NULL,
		cluster      TEXT NOT NULL,
		labels       TEXT NOT NULL,
		state        TEXT NOT NULL,
		epoch        INTEGER NOT NULL,
		report       BLOB,
		heartbeat_at INTEGER NOT NULL,
		created_at   INTEGER NOT NULL
	);
	ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_node ON sandboxes (node, state);
	ALTER TABLE snapshots ADD COLUMN node TEXT NOT NULL DEFAULT '';`,
		postgres: `CREATE TABLE nodes (
		id           TEXT PRIMARY KEY,
		addr         TEXT NOT NULL,
		region       TEXT NOT NULL,
		cluster      TEXT NOT NULL,
		labels       TEXT NOT NULL,
		state        TEXT NOT NULL,
		epoch        BIGINT NOT NULL,
		report       BYTEA,
		heartbeat_at BIGINT NOT NULL,
		created_at   BIGINT NOT NULL
	);
	ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_node ON sandboxes (node, state);
	ALTER TABLE snapshots ADD COLUMN node TEXT NOT NULL DEFAULT '';`,
	},
	// Idempotency keys (requests.go): each tenant's key, the request it
	// was first given with, and the answer once there is one.
	{
		sqlite: `CREATE TABLE requests (
		tenant     TEXT NOT NULL,
		key        TEXT NOT NULL,
		request    TEXT NOT NULL,
		status     INTEGER NOT NULL,
		answer     BLOB,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, key)
	);
	CREATE INDEX requests_created ON requests (created_at);`,
		postgres: `CREATE TABLE requests (
		tenant     TEXT NOT NULL,
		key        TEXT NOT NULL,
		request    TEXT NOT NULL,
		status     BIGINT NOT NULL,
		answer     BYTEA,
		created_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, key)
	);
	CREATE INDEX requests_created ON requests (created_at);`,
	},
	// Tenants' quotas in the fleet (quotas.go).
	{
		sqlite: `CREATE TABLE quotas (
		tenant             TEXT PRIMARY KEY,
		sandboxes          INTEGER NOT NULL,
		cpus               REAL NOT NULL,
		memory_mb          INTEGER NOT NULL,
		disk_mb            INTEGER NOT NULL,
		snapshots          INTEGER NOT NULL,
		snapshot_bytes     INTEGER NOT NULL,
		creates_per_minute INTEGER NOT NULL
	);
	CREATE INDEX sandboxes_tenant_state ON sandboxes (tenant, state);`,
		postgres: `CREATE TABLE quotas (
		tenant             TEXT PRIMARY KEY,
		sandboxes          BIGINT NOT NULL,
		cpus               DOUBLE PRECISION NOT NULL,
		memory_mb          BIGINT NOT NULL,
		disk_mb            BIGINT NOT NULL,
		snapshots          BIGINT NOT NULL,
		snapshot_bytes     BIGINT NOT NULL,
		creates_per_minute BIGINT NOT NULL
	);
	CREATE INDEX sandboxes_tenant_state ON sandboxes (tenant, state);`,
	},
	// Checkpoint policies, and how a moved sandbox came back (lifecycle.go).
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN checkpoint_every INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN checkpoint_at INTEGER;
	ALTER TABLE sandboxes ADD COLUMN restored TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_state_node ON sandboxes (state, node);`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN checkpoint_every BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN checkpoint_at BIGINT;
	ALTER TABLE sandboxes ADD COLUMN restored TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_state_node ON sandboxes (state, node);`,
	},
	// Warm pools, and each node's share of them (pools.go).
	{
		sqlite: `CREATE TABLE pools (
		template   TEXT NOT NULL,
		runtime    TEXT NOT NULL,
		min_size   INTEGER NOT NULL,
		max_size   INTEGER NOT NULL,
		cpus       REAL NOT NULL,
		memory_mb  INTEGER NOT NULL,
		pids       INTEGER NOT NULL,
		disk_mb    INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (template, runtime)
	);
	CREATE TABLE pool_shares (
		template    TEXT NOT NULL,
		runtime     TEXT NOT NULL,
		node        TEXT NOT NULL,
		target      INTEGER NOT NULL,
		ready       INTEGER NOT NULL,
		hits        INTEGER NOT NULL,
		misses      INTEGER NOT NULL,
		error       TEXT NOT NULL,
		reported_at INTEGER NOT NULL,
		PRIMARY KEY (template, runtime, node)
	);`,
		postgres: `CREATE TABLE pools (
		template   TEXT NOT NULL,
		runtime    TEXT NOT NULL,
		min_size   BIGINT NOT NULL,
		max_size   BIGINT NOT NULL,
		cpus       DOUBLE PRECISION NOT NULL,
		memory_mb  BIGINT NOT NULL,
		pids       BIGINT NOT NULL,
		disk_mb    BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		PRIMARY KEY (template, runtime)
	);
	CREATE TABLE pool_shares (
		template    TEXT NOT NULL,
		runtime     TEXT NOT NULL,
		node        TEXT NOT NULL,
		target      BIGINT NOT NULL,
		ready       BIGINT NOT NULL,
		hits        BIGINT NOT NULL,
		misses      BIGINT NOT NULL,
		error       TEXT NOT NULL,
		reported_at BIGINT NOT NULL,
		PRIMARY KEY (template, runtime, node)
	);`,
	},
	{
		sqlite:   `ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT ''`,
		postgres: `ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT ''`,
	},
	// The events (events.go). SQLite's AUTOINCREMENT never hands out an ID
	// again, even once the newest events are trimmed.
	{
		sqlite: `CREATE TABLE events (
		id       INTEGER PRIMARY KEY AUTOINCREMENT,
		at       INTEGER NOT NULL,
		kind     TEXT NOT NULL,
		tenant   TEXT NOT NULL,
		sandbox  TEXT NOT NULL,
		snapshot TEXT NOT NULL,
		node     TEXT NOT NULL,
		state    TEXT NOT NULL,
		reason   TEXT NOT NULL
	);
	CREATE INDEX events_tenant ON events (tenant, id);
	CREATE INDEX events_at ON events (at);`,
		postgres: `CREATE TABLE events (
		id       BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		at       BIGINT NOT NULL,
		kind     TEXT NOT NULL,
		tenant   TEXT NOT NULL,
		sandbox  TEXT NOT NULL,
		snapshot TEXT NOT NULL,
		node     TEXT NOT NULL,
		state    TEXT NOT NULL,
		reason   TEXT NOT NULL
	);
	CREATE INDEX events_tenant ON events (tenant, id);
	CREATE INDEX events_at ON events (at);`,
	},
	// The agent token (E2B's envd access token): the secret that opens a
	// sandbox's agent routes without an API key. Sandboxes recorded before
	// get one as preview tokens were given theirs.
	{
		sqlite: `ALTER TABLE sandboxes ADD COLUMN agent_token TEXT NOT NULL DEFAULT '';
	UPDATE sandboxes SET agent_token = lower(hex(randomblob(32)));`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN agent_token TEXT NOT NULL DEFAULT '';
	UPDATE sandboxes SET agent_token = encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex');`,
	},
	// Tenants' templates (templates.go): each build a version, its disk a
	// snapshot; the build steps cached by their key; the version a
	// sandbox started from.
	{
		sqlite: `CREATE TABLE templates (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    INTEGER NOT NULL,
		state      TEXT NOT NULL,
		error      TEXT NOT NULL,
		source     TEXT NOT NULL,
		digest     TEXT NOT NULL,
		snapshot   TEXT NOT NULL,
		config     TEXT NOT NULL,
		node       TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		built_at   INTEGER,
		UNIQUE (tenant, name, version)
	);
	CREATE INDEX templates_snapshot ON templates (snapshot);
	CREATE TABLE template_steps (
		tenant     TEXT NOT NULL,
		key        TEXT NOT NULL,
		snapshot   TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, key)
	);
	CREATE INDEX template_steps_snapshot ON template_steps (snapshot);
	ALTER TABLE sandboxes ADD COLUMN template_version TEXT NOT NULL DEFAULT '';`,
		postgres: `CREATE TABLE templates (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    BIGINT NOT NULL,
		state      TEXT NOT NULL,
		error      TEXT NOT NULL,
		source     TEXT NOT NULL,
		digest     TEXT NOT NULL,
		snapshot   TEXT NOT NULL,
		config     TEXT NOT NULL,
		node       TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		built_at   BIGINT,
		UNIQUE (tenant, name, version)
	);
	CREATE INDEX templates_snapshot ON templates (snapshot);
	CREATE TABLE template_steps (
		tenant     TEXT NOT NULL,
		key        TEXT NOT NULL,
		snapshot   TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, key)
	);
	CREATE INDEX template_steps_snapshot ON template_steps (snapshot);
	ALTER TABLE sandboxes ADD COLUMN template_version TEXT NOT NULL DEFAULT '';`,
	},
	// Templates the admin publishes to every tenant.
	{
		sqlite:   `ALTER TABLE templates ADD COLUMN published INTEGER NOT NULL DEFAULT 0`,
		postgres: `ALTER TABLE templates ADD COLUMN published BOOLEAN NOT NULL DEFAULT FALSE`,
	},
	// Always-on disks: how a sandbox's root disk persists.
	{
		sqlite:   `ALTER TABLE sandboxes ADD COLUMN persistence TEXT NOT NULL DEFAULT ''`,
		postgres: `ALTER TABLE sandboxes ADD COLUMN persistence TEXT NOT NULL DEFAULT ''`,
	},
	// Events numbered per tenant (events.go): seq is an event's position
	// in its tenant's sequence, event_seqs the last one each tenant was
	// given. The events recorded before keep their node-wide ID as their
	// position, and every tenant that may have followed a stream (it has
	// events or a key) goes on above the last ID given, so a position a
	// client holds from before stays valid.
	{
		sqlite: `ALTER TABLE events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
	UPDATE events SET seq = id;
	DROP INDEX events_tenant;
	CREATE INDEX events_tenant_seq ON events (tenant, seq);
	CREATE TABLE event_seqs (
		tenant TEXT PRIMARY KEY,
		seq    INTEGER NOT NULL
	);
	INSERT INTO event_seqs (tenant, seq)
		SELECT tenant, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)
		FROM (SELECT tenant FROM events UNION SELECT tenant FROM api_keys);`,
		postgres: `ALTER TABLE events ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
	UPDATE events SET seq = id;
	DROP INDEX events_tenant;
	CREATE INDEX events_tenant_seq ON events (tenant, seq);
	CREATE TABLE event_seqs (
		tenant TEXT PRIMARY KEY,
		seq    BIGINT NOT NULL
	);
	INSERT INTO event_seqs (tenant, seq)
		SELECT tenant, (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_id_seq)
		FROM (SELECT tenant FROM events UNION SELECT tenant FROM api_keys) AS t;`,
	},
	// Revocations (keys.go): a count that each revocation of an API key
	// and each rotation of agent tokens moves on, in the same transaction;
	// every node polls it to end what the revoked credentials opened.
	same(`CREATE TABLE revocations (
		id INTEGER PRIMARY KEY CHECK (id = 1),
		n  BIGINT NOT NULL
	);
	INSERT INTO revocations (id, n) VALUES (1, 0);`),
	// Sleep and wake (lifecycle.go): a sandbox's lifecycle (what its
	// timeout and idleness do, its timeout), and how a paused one sleeps.
	same(`ALTER TABLE sandboxes ADD COLUMN lifecycle TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN paused TEXT NOT NULL DEFAULT '';`),
	// Snapshot names (snapshots.go): optional, unique among a tenant's
	// snapshots; "" is none, which any number of them share.
	same(`ALTER TABLE snapshots ADD COLUMN name TEXT NOT NULL DEFAULT '';
	CREATE UNIQUE INDEX snapshots_tenant_name ON snapshots (tenant, name) WHERE name <> '';`),
	// A paused sandbox's standby (lifecycle.go): the node that fetches
	// what it wakes from while its own node holds it.
	same(`ALTER TABLE sandboxes ADD COLUMN standby TEXT NOT NULL DEFAULT '';`),
	// Tenants' secrets (secrets.go): each one's current value, sealed.
	{
		sqlite: `CREATE TABLE secrets (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    INTEGER NOT NULL,
		sealed     BLOB NOT NULL,
		metadata   TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		UNIQUE (tenant, name)
	);`,
		postgres: `CREATE TABLE secrets (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    BIGINT NOT NULL,
		sealed     BYTEA NOT NULL,
		metadata   TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		UNIQUE (tenant, name)
	);`,
	},
}

// migrateLockKey names the PostgreSQL advisory lock that migrations hold
// ("warren" in ASCII). Advisory locks are per database.
const migrateLockKey = 0x77617272656e

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// migrate brings the schema up to date.
func (s *Store) migrate(ctx context.Context) error {
	return s.migrateTo(ctx, len(migrations))
}

// migrateTo applies the migrations up to the nth that the database has not
// seen yet, in one transaction together with the count that records them,
// so that stores opening one database at once (control-plane replicas
// starting together) migrate it exactly once: SQLite's transaction holds
// the write lock from BEGIN (_txlock=immediate); on PostgreSQL it takes an
// advisory lock first, which the others wait on, and then find nothing
// left to do. The count is SQLite's PRAGMA user_version, and PostgreSQL's
// one row of schema_version.
func (s *Store) migrateTo(ctx context.Context, n int) error {
	tx, err := s.db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if s.db.postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLockKey)); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
			id      INTEGER PRIMARY KEY CHECK (id = 1),
			version BIGINT NOT NULL
		);
		INSERT INTO schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;`); err != nil {
			return fmt.Errorf("migrate: schema_version: %w", err)
		}
	}
	version, err := s.schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	switch {
	case version > len(migrations):
		return fmt.Errorf("schema version %d is newer than this binary knows (%d)", version, len(migrations))
	case version >= n:
		return nil
	}
	for i := version; i < n; i++ {
		q := migrations[i].sqlite
		if s.db.postgres {
			q = migrations[i].postgres
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if err := s.setSchemaVersion(ctx, tx, n); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// schemaVersion is how many migrations the database has run.
func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	query := `PRAGMA user_version`
	if s.db.postgres {
		query = `SELECT version FROM schema_version WHERE id = 1`
	}
	var v int
	if err := q.QueryRowContext(ctx, query).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// setSchemaVersion records that the database has run n migrations.
func (s *Store) setSchemaVersion(ctx context.Context, q querier, n int) error {
	var err error
	if s.db.postgres {
		_, err = q.ExecContext(ctx, `UPDATE schema_version SET version = $1 WHERE id = 1`, n)
	} else {
		// PRAGMA takes no bound parameters; n is an int.
		_, err = q.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", n))
	}
	if err != nil {
		return fmt.Errorf("record schema version %d: %w", n, err)
	}
	return nil
}
