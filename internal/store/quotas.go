package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"warren/api"
)

// Quota bounds what one tenant holds in the whole fleet, across every node
// and control replica on the database. A zero field bounds nothing.
type Quota struct {
	Tenant string
	// Sandboxes, CPUs, MemoryMB and DiskMB bound its live sandboxes (not
	// stopped or failed) and what they were given.
	Sandboxes int
	CPUs      float64
	MemoryMB  int64
	DiskMB    int64
	// Snapshots and SnapshotBytes bound its snapshots that did not fail,
	// and what they added to the blob store.
	Snapshots     int
	SnapshotBytes int64
	// CreatesPerMinute bounds the sandboxes it starts (creates and
	// restores) in any 60 seconds.
	CreatesPerMinute int
}

// QuotaError is an insert the tenant's quota refused: Quota names the
// bound ("sandboxes", "cpus", ...), Limit its value, Held what the tenant
// holds already.
type QuotaError struct {
	Tenant, Quota string
	Limit, Held   float64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("tenant %s's quota of %g %s is reached (%g held)", e.Tenant, e.Limit, e.Quota, e.Held)
}

// SetQuota records tenant's quota, replacing the one before.
func (s *Store) SetQuota(ctx context.Context, q Quota) error {
	if q.Tenant == "" {
		return errors.New("set quota: no tenant")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO quotas (tenant, sandboxes, cpus, memory_mb, disk_mb, snapshots, snapshot_bytes, creates_per_minute)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant) DO UPDATE SET sandboxes = excluded.sandboxes, cpus = excluded.cpus,
			memory_mb = excluded.memory_mb, disk_mb = excluded.disk_mb, snapshots = excluded.snapshots,
			snapshot_bytes = excluded.snapshot_bytes, creates_per_minute = excluded.creates_per_minute`,
		q.Tenant, q.Sandboxes, q.CPUs, q.MemoryMB, q.DiskMB, q.Snapshots, q.SnapshotBytes, q.CreatesPerMinute)
	if err != nil {
		return fmt.Errorf("set quota of %s: %w", q.Tenant, err)
	}
	return nil
}

// GetQuota returns tenant's quota: zero (no bound) when none was set.
func (s *Store) GetQuota(ctx context.Context, tenant string) (Quota, error) {
	return getQuota(ctx, s.db, tenant)
}

func getQuota(ctx context.Context, q querier, tenant string) (Quota, error) {
	quota := Quota{Tenant: tenant}
	err := q.QueryRowContext(ctx, `SELECT sandboxes, cpus, memory_mb, disk_mb, snapshots, snapshot_bytes, creates_per_minute
		FROM quotas WHERE tenant = ?`, tenant).Scan(&quota.Sandboxes, &quota.CPUs, &quota.MemoryMB, &quota.DiskMB,
		&quota.Snapshots, &quota.SnapshotBytes, &quota.CreatesPerMinute)
	if errors.Is(err, sql.ErrNoRows) {
		return Quota{Tenant: tenant}, nil
	}
	if err != nil {
		return Quota{}, fmt.Errorf("quota of %s: %w", tenant, err)
	}
	return quota, nil
}

// withinQuota runs insert, the insert of one new record of tenant's, in a
// transaction with its events (write) that holds the tenant's quota lock
// (PostgreSQL: an advisory lock on the tenant; SQLite: its one writer),
// once check has found the tenant within its quota: however many servers
// insert for one tenant at once, none goes past it.
func (s *Store) withinQuota(ctx context.Context, tenant string, check func(r runner, q Quota) error, insert func(r runner) ([]api.Event, error)) error {
	return s.write(ctx, func(r runner) ([]api.Event, error) {
		quota, err := getQuota(ctx, r, tenant)
		if err != nil {
			return nil, err
		}
		if quota == (Quota{Tenant: tenant}) {
			return insert(r) // no quota: nothing to hold a lock for
		}
		if s.db.postgres {
			h := fnv.New64a()
			h.Write([]byte("quota\x00" + tenant))
			if _, err := r.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(h.Sum64())); err != nil {
				return nil, fmt.Errorf("quota lock of %s: %w", tenant, err)
			}
			// Read again under the lock: it may have changed meanwhile.
			if quota, err = getQuota(ctx, r, tenant); err != nil {
				return nil, err
			}
		}
		if err := check(r, quota); err != nil {
			return nil, err
		}
		return insert(r)
	})
}

// sandboxQuota checks that one more sandbox like sb keeps its tenant
// within q.
func sandboxQuota(ctx context.Context, r runner, q Quota, sb *Sandbox, now time.Time) error {
	var n, recent int
	var cpus float64
	var mem, disk int64
	err := r.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(cpus), 0), COALESCE(SUM(memory_mb), 0),
		COALESCE(SUM(disk_mb + workspace_mb), 0) FROM sandboxes WHERE tenant = ? AND state NOT IN `+finalStates,
		sb.Tenant).Scan(&n, &cpus, &mem, &disk)
	if err == nil {
		err = r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE tenant = ? AND created_at > ?`,
			sb.Tenant, now.Add(-time.Minute).UnixNano()).Scan(&recent)
	}
	if err != nil {
		return fmt.Errorf("quota of %s: %w", sb.Tenant, err)
	}
	over := func(name string, limit, held, more float64) error {
		if limit > 0 && held+more > limit {
			return &QuotaError{Tenant: sb.Tenant, Quota: name, Limit: limit, Held: held}
		}
		return nil
	}
	return errors.Join(
		over("sandboxes", float64(q.Sandboxes), float64(n), 1),
		over("vCPUs", q.CPUs, cpus, sb.CPUs),
		over("MiB of memory", float64(q.MemoryMB), float64(mem), float64(sb.MemoryMB)),
		over("MiB of disk", float64(q.DiskMB), float64(disk), float64(sb.DiskMB+sb.WorkspaceMB)),
		over("sandboxes started a minute", float64(q.CreatesPerMinute), float64(recent), 1),
	)
}

// snapshotQuota checks that one more snapshot keeps its tenant within q.
func snapshotQuota(ctx context.Context, r runner, q Quota, tenant string) error {
	var n int
	var stored int64
	err := r.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0) FROM snapshots
		WHERE tenant = ? AND state != ?`, tenant, api.SnapshotFailed).Scan(&n, &stored)
	if err != nil {
		return fmt.Errorf("quota of %s: %w", tenant, err)
	}
	switch {
	case q.Snapshots > 0 && n+1 > q.Snapshots:
		return &QuotaError{Tenant: tenant, Quota: "snapshots", Limit: float64(q.Snapshots), Held: float64(n)}
	case q.SnapshotBytes > 0 && stored >= q.SnapshotBytes:
		return &QuotaError{Tenant: tenant, Quota: "bytes of snapshots", Limit: float64(q.SnapshotBytes), Held: float64(stored)}
	}
	return nil
}
