package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Pool is a warm pool's setting: how many sandboxes of one template and
// runtime the fleet keeps booted ahead of demand, and their resources.
// Nodes read it and keep their share (package sandbox, pools.go).
type Pool struct {
	Template, Runtime string
	Min, Max          int
	CPUs              float64
	MemoryMB, Pids    int64
	DiskMB            int64
	UpdatedAt         time.Time
}

// PoolShare is what one node last reported of its share of a pool.
type PoolShare struct {
	Template, Runtime, Node string
	Target, Ready           int
	Hits, Misses            int64
	Error                   string
	ReportedAt              time.Time
}

// SetPool records p, replacing the pool of its template and runtime; its
// UpdatedAt is now.
func (s *Store) SetPool(ctx context.Context, p Pool, now time.Time) error {
	if p.Template == "" || p.Runtime == "" {
		return errors.New("set pool: no template or runtime")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO pools (template, runtime, min_size, max_size, cpus, memory_mb, pids, disk_mb, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (template, runtime) DO UPDATE SET min_size = excluded.min_size, max_size = excluded.max_size,
			cpus = excluded.cpus, memory_mb = excluded.memory_mb, pids = excluded.pids, disk_mb = excluded.disk_mb,
			updated_at = excluded.updated_at`,
		p.Template, p.Runtime, p.Min, p.Max, p.CPUs, p.MemoryMB, p.Pids, p.DiskMB, now.UnixNano())
	if err != nil {
		return fmt.Errorf("set pool %s/%s: %w", p.Template, p.Runtime, err)
	}
	return nil
}

// DeletePool removes the pool of template and runtime, and the nodes'
// reports of it; ErrNotFound when there is none.
func (s *Store) DeletePool(ctx context.Context, template, runtime string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM pools WHERE template = ? AND runtime = ?`, template, runtime)
	if err != nil {
		return fmt.Errorf("delete pool %s/%s: %w", template, runtime, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete pool %s/%s: %w", template, runtime, err)
	} else if n == 0 {
		return ErrNotFound
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM pool_shares WHERE template = ? AND runtime = ?`, template, runtime); err != nil {
		return fmt.Errorf("delete pool %s/%s: %w", template, runtime, err)
	}
	return nil
}

// ListPools returns every pool, by template and runtime.
func (s *Store) ListPools(ctx context.Context) ([]Pool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT template, runtime, min_size, max_size, cpus, memory_mb, pids, disk_mb, updated_at
		FROM pools ORDER BY template, runtime`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	var out []Pool
	for rows.Next() {
		var p Pool
		var updated int64
		if err := rows.Scan(&p.Template, &p.Runtime, &p.Min, &p.Max, &p.CPUs, &p.MemoryMB, &p.Pids, &p.DiskMB, &updated); err != nil {
			return nil, fmt.Errorf("list pools: %w", err)
		}
		p.UpdatedAt = fromNanos(updated)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// ReportPools replaces node's reports of its pool shares with shares, at
// now: a pool it no longer keeps loses its report.
func (s *Store) ReportPools(ctx context.Context, node string, shares []PoolShare, now time.Time) error {
	tx, err := s.db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("report pools: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.db.rebind(`DELETE FROM pool_shares WHERE node = ?`), node); err != nil {
		return fmt.Errorf("report pools: %w", err)
	}
	for _, sh := range shares {
		if _, err := tx.ExecContext(ctx, s.db.rebind(`INSERT INTO pool_shares (template, runtime, node, target, ready, hits, misses, error, reported_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			sh.Template, sh.Runtime, node, sh.Target, sh.Ready, sh.Hits, sh.Misses, sh.Error, now.UnixNano()); err != nil {
			return fmt.Errorf("report pools: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("report pools: %w", err)
	}
	return nil
}

// PoolShares returns every node's last report of its pool shares, by
// template, runtime and node.
func (s *Store) PoolShares(ctx context.Context) ([]PoolShare, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT template, runtime, node, target, ready, hits, misses, error, reported_at
		FROM pool_shares ORDER BY template, runtime, node`)
	if err != nil {
		return nil, fmt.Errorf("pool shares: %w", err)
	}
	defer rows.Close()
	var out []PoolShare
	for rows.Next() {
		var sh PoolShare
		var reported int64
		if err := rows.Scan(&sh.Template, &sh.Runtime, &sh.Node, &sh.Target, &sh.Ready, &sh.Hits, &sh.Misses, &sh.Error, &reported); err != nil {
			return nil, fmt.Errorf("pool shares: %w", err)
		}
		sh.ReportedAt = fromNanos(reported)
		out = append(out, sh)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pool shares: %w", err)
	}
	return out, nil
}
