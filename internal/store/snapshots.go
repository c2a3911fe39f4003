package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// Snapshot is a snapshot's record: the ones the nodes took, and the ones
// they restored from manifests found in the blob store. State is one of
// the api.Snapshot* constants (see package api for the state machine).
type Snapshot struct {
	ID     string
	Tenant string
	// Node took the snapshot and uploads it: a pending snapshot is its to
	// finish.
	Node      string
	SandboxID string
	Scope     string // api.ScopeRoot or api.ScopeWorkspace
	// Parent is the snapshot (or template base layer) this one's layer is
	// stored against; "" for a base layer. Until the snapshot is durable it
	// is the intended parent, which the upload may move up the lineage if
	// the intended one failed.
	Parent   string
	Template string
	State    string
	Error    string
	// Sizes in bytes: the disk, the layer's data, what the upload added to
	// the blob store.
	DiskBytes    int64
	ChangedBytes int64
	StoredBytes  int64
	// Ack is how long taking the snapshot held the sandbox frozen; Upload
	// how long the upload took.
	Ack       time.Duration
	Upload    time.Duration
	CreatedAt time.Time
	DurableAt time.Time // zero until durable
}

const snapshotColumns = `id, tenant, sandbox_id, scope, parent, template, state, error,
	disk_bytes, changed_bytes, stored_bytes, ack_ns, upload_ns, created_at, durable_at, node`

func validSnapshotState(state string) bool {
	switch state {
	case api.SnapshotPending, api.SnapshotDurable, api.SnapshotFailed:
		return true
	}
	return false
}

// InsertSnapshot records a new snapshot; CreatedAt is set to now when zero.
// A record with the same ID is an error wrapping ErrExists; a new one (pending)
// its tenant's quota has no room for, a *QuotaError.
func (s *Store) InsertSnapshot(ctx context.Context, sn *Snapshot) error {
	if sn.ID == "" {
		return errors.New("insert snapshot: empty id")
	}
	if !validSnapshotState(sn.State) {
		return fmt.Errorf("insert snapshot %s: invalid state %q", sn.ID, sn.State)
	}
	if sn.Scope == "" {
		sn.Scope = api.ScopeRoot
	}
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = time.Now()
	}
	sn.CreatedAt = fromNanos(sn.CreatedAt.UnixNano())
	q := `INSERT INTO snapshots (` + snapshotColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	args := []any{sn.ID, sn.Tenant, sn.SandboxID, sn.Scope, sn.Parent, sn.Template, sn.State, sn.Error,
		sn.DiskBytes, sn.ChangedBytes, sn.StoredBytes, int64(sn.Ack), int64(sn.Upload),
		sn.CreatedAt.UnixNano(), nullNanos(sn.DurableAt), sn.Node}
	insert := func(r runner) ([]api.Event, error) {
		res, err := r.ExecContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("insert snapshot %s: %w", sn.ID, err)
		}
		if err := affectedOne(res, "insert snapshot "+sn.ID); errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("insert snapshot %s: %w", sn.ID, ErrExists)
		} else if err != nil {
			return nil, err
		}
		if e, ok := snapshotEvent(*sn); ok && sn.State == api.SnapshotPending {
			return []api.Event{e}, nil
		}
		return nil, nil
	}
	if sn.Tenant == "" || sn.State != api.SnapshotPending {
		// A template's base layer is no tenant's; a durable record is
		// one of a snapshot taken before, found again in the blob store:
		// neither is an event.
		_, err := insert(s.db)
		return err
	}
	return s.withinQuota(ctx, sn.Tenant, func(r runner, quota Quota) error { return snapshotQuota(ctx, r, quota, sn.Tenant) }, insert)
}

// UpdateSnapshot writes every field but ID, Tenant, SandboxID, Template and
// CreatedAt. ErrNotFound when there is no such snapshot.
func (s *Store) UpdateSnapshot(ctx context.Context, sn *Snapshot) error {
	if !validSnapshotState(sn.State) {
		return fmt.Errorf("update snapshot %s: invalid state %q", sn.ID, sn.State)
	}
	err := s.write(ctx, func(r runner) ([]api.Event, error) {
		lock := ""
		if s.db.postgres {
			lock = " FOR UPDATE"
		}
		var was Snapshot
		err := r.QueryRowContext(ctx, `SELECT tenant, sandbox_id, node, state FROM snapshots WHERE id = ?`+lock, sn.ID).
			Scan(&was.Tenant, &was.SandboxID, &was.Node, &was.State)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		if _, err := r.ExecContext(ctx, `UPDATE snapshots SET parent = ?, state = ?, error = ?,
			disk_bytes = ?, changed_bytes = ?, stored_bytes = ?, ack_ns = ?, upload_ns = ?, durable_at = ?
			WHERE id = ?`,
			sn.Parent, sn.State, sn.Error, sn.DiskBytes, sn.ChangedBytes, sn.StoredBytes,
			int64(sn.Ack), int64(sn.Upload), nullNanos(sn.DurableAt), sn.ID); err != nil {
			return nil, err
		}
		if was.State == sn.State {
			return nil, nil
		}
		was.ID, was.State, was.Error = sn.ID, sn.State, sn.Error
		if e, ok := snapshotEvent(was); ok {
			return []api.Event{e}, nil
		}
		return nil, nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("update snapshot %s: %w", sn.ID, err)
	}
	return err
}

// GetSnapshot returns the snapshot with id, or ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	sns, err := s.querySnapshots(ctx, "get snapshot "+id,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return Snapshot{}, err
	}
	if len(sns) == 0 {
		return Snapshot{}, ErrNotFound
	}
	return sns[0], nil
}

// ListSnapshots returns a page of tenant's snapshots, of one sandbox when
// sandboxID is not "", in one of states (any when states is empty), oldest
// first. Template base layers belong to no tenant.
func (s *Store) ListSnapshots(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]Snapshot, error) {
	var f filter
	f.add("tenant = ?", tenant)
	if sandboxID != "" {
		f.add("sandbox_id = ?", sandboxID)
	}
	f.in("state", states)
	q, args := f.query(`SELECT `+snapshotColumns+` FROM snapshots`, page)
	return s.querySnapshots(ctx, "list snapshots", q, args...)
}

// PendingSnapshots returns node's pending snapshots, oldest first: the
// uploads it resumes when it restarts.
func (s *Store) PendingSnapshots(ctx context.Context, node string) ([]Snapshot, error) {
	return s.querySnapshots(ctx, "pending snapshots",
		`SELECT `+snapshotColumns+` FROM snapshots WHERE state = ? AND node = ? ORDER BY created_at, id`,
		api.SnapshotPending, node)
}

// LatestSnapshot returns the sandbox's newest snapshot of scope that has
// not failed, or ErrNotFound.
func (s *Store) LatestSnapshot(ctx context.Context, sandboxID, scope string) (Snapshot, error) {
	sns, err := s.querySnapshots(ctx, "latest snapshot of "+sandboxID,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE sandbox_id = ? AND scope = ? AND state != ?
		ORDER BY created_at DESC, id DESC LIMIT 1`, sandboxID, scope, api.SnapshotFailed)
	if err != nil {
		return Snapshot{}, err
	}
	if len(sns) == 0 {
		return Snapshot{}, ErrNotFound
	}
	return sns[0], nil
}

// SnapshotChildren returns the snapshots whose parent is id.
func (s *Store) SnapshotChildren(ctx context.Context, id string) ([]Snapshot, error) {
	return s.querySnapshots(ctx, "children of snapshot "+id,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE parent = ? ORDER BY created_at, id`, id)
}

// DeleteSnapshot forgets the snapshot with id; ErrNotFound when there is
// none.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	err := s.write(ctx, func(r runner) ([]api.Event, error) {
		e := api.Event{Kind: api.EventSnapshotDeleted, Snapshot: id}
		err := r.QueryRowContext(ctx, `DELETE FROM snapshots WHERE id = ? RETURNING tenant, sandbox_id, node`, id).
			Scan(&e.Tenant, &e.Sandbox, &e.Node)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		if err != nil || e.Tenant == "" {
			return nil, err
		}
		return []api.Event{e}, nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return err
}

func affectedOne(res sql.Result, op string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (s *Store) querySnapshots(ctx context.Context, op, query string, args ...any) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		var sn Snapshot
		var ack, upload, created int64
		var durable sql.NullInt64
		if err := rows.Scan(&sn.ID, &sn.Tenant, &sn.SandboxID, &sn.Scope, &sn.Parent, &sn.Template, &sn.State, &sn.Error,
			&sn.DiskBytes, &sn.ChangedBytes, &sn.StoredBytes, &ack, &upload, &created, &durable, &sn.Node); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		sn.Ack, sn.Upload = time.Duration(ack), time.Duration(upload)
		sn.CreatedAt = fromNanos(created)
		if durable.Valid {
			sn.DurableAt = fromNanos(durable.Int64)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
