package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// Sandbox is a sandbox's record. State is one of the api.State* constants;
// it changes only by a move of the state machine (lifecycle.go).
type Sandbox struct {
	ID     string
	Tenant string
	// Node is the fleet node that runs the sandbox (or ran it last).
	Node     string
	Template string
	// TemplateVersion is the tenant's template version it started from,
	// NAME@VERSION ("" for a built-in template, or a restore).
	TemplateVersion string
	Runtime         string
	State           string
	// Persistence is how its root disk persists: api.PersistenceAlways
	// for an always-on disk the node's block server holds, "" for explicit
	// snapshots (api.PersistenceSnapshot, the default).
	Persistence string
	// Version counts the record's changes, from 1 at insert.
	Version int64
	// Error says why a failed sandbox failed.
	Error    string
	CPUs     float64
	MemoryMB int64
	Pids     int64
	DiskMB   int64
	Env      map[string]string
	Metadata map[string]string
	// WorkspaceMB is the size of its workspace disk, 0 for none.
	WorkspaceMB int64
	// Origin is the snapshot the sandbox's disk was restored from; "" when
	// it was cloned from its template. WorkspaceOrigin is the same for its
	// workspace disk ("" when it started empty).
	Origin          string
	WorkspaceOrigin string
	// Network is its egress policy.
	Network api.NetworkPolicy
	// NetSlot is its slot in the node's network pool; 0 while it has none.
	NetSlot int
	// PreviewToken is the secret that opens the sandbox's preview hosts
	// (docs/API.md, "Exposed ports"), kept in the clear: its owner may read
	// it back. PreviewPublic opens them to anyone. Both change only through
	// SetSandboxPreview.
	PreviewToken  string
	PreviewPublic bool
	// AgentToken is the secret that opens the sandbox's agent routes
	// (/v1/sandboxes/ID/agent/...) without an API key: what E2B's SDKs
	// call the envd access token. Kept in the clear, as PreviewToken.
	AgentToken string
	// RuntimeState is opaque JSON owned by the runtime (pid, paths…).
	RuntimeState []byte
	CreatedAt    time.Time
	// ExpiresAt is when the sandbox is to be deleted; zero means never.
	ExpiresAt time.Time
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time
	// CheckpointEvery is the sandbox's checkpoint policy (0: none), in
	// whole seconds; Checkpoint is the last checkpoint its node took, at
	// CheckpointAt ("" and zero: none yet).
	CheckpointEvery time.Duration
	Checkpoint      string
	CheckpointAt    time.Time
	// Restored says how the sandbox last came back from a checkpoint on
	// another node; nil if it never did.
	Restored *api.Restored
	// Lifecycle is how it sleeps and wakes, and Timeout the time to live
	// it was last given (a wake gives it again; 0: none recorded).
	Lifecycle api.Lifecycle
	Timeout   time.Duration
	// Paused says how a paused sandbox sleeps: set by the move to paused,
	// kept through a wake's starting, and cleared by any other move. A
	// paused sandbox whose node holds no instance of it (RuntimeState
	// nil) wakes from Paused.Snapshot on its node, or on any node when
	// Node is "".
	Paused *api.Paused
	// Standby is the node that fetches what a paused sandbox its node
	// holds wakes from, so that it wakes there at once if its node is
	// lost or drained (SetStandby); "" for none. Any move clears it.
	Standby string
}

// Held says whether paused sandbox sb is held by its node: its instance
// keeps its memory there. One not held wakes from its pause snapshot.
func (sb Sandbox) Held() bool { return sb.State == api.StatePaused && sb.RuntimeState != nil }

// lifecycleColumn is the JSON of the lifecycle column.
type lifecycleColumn struct {
	api.Lifecycle
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// sandboxColumns is the column list every query reads, in scanSandbox order.
const sandboxColumns = `id, tenant, template, runtime, state, error, cpus, memory_mb, pids, disk_mb,
	env, metadata, origin, workspace_mb, workspace_origin, network, net_slot, preview_token, preview_public,
	runtime_state, created_at, expires_at, updated_at, version, node,
	checkpoint_every, checkpoint, checkpoint_at, restored, agent_token, template_version, persistence,
	lifecycle, paused, standby`

// finalStates is the SQL list of final states; it must match isFinal.
const finalStates = `('` + api.StateStopped + `', '` + api.StateFailed + `')`

// isFinal reports whether state is final.
func isFinal(state string) bool {
	return state == api.StateStopped || state == api.StateFailed
}

// validState reports whether state is one of the api.State* constants.
func validState(state string) bool {
	switch state {
	case api.StateStarting, api.StateRunning, api.StatePaused, api.StateMoving, api.StateStopped, api.StateFailed:
		return true
	}
	return false
}

// InsertSandbox records a new sandbox. CreatedAt is set to now when zero;
// UpdatedAt is set to now. A record with the same ID is an error wrapping
// ErrExists; one its tenant's quota has no room for, a *QuotaError.
func (s *Store) InsertSandbox(ctx context.Context, sb *Sandbox) error {
	if sb.ID == "" || sb.Tenant == "" {
		return errors.New("insert sandbox: empty id or tenant")
	}
	if !validState(sb.State) {
		return fmt.Errorf("insert sandbox %s: invalid state %q", sb.ID, sb.State)
	}
	if isFinal(sb.State) {
		sb.Env = nil // as UpdateSandbox drops it
	}
	env, meta, err := encodeMaps(sb)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	network, err := json.Marshal(sb.Network)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: encode network: %w", sb.ID, err)
	}
	now := time.Now()
	created := sb.CreatedAt
	if created.IsZero() {
		created = now
	}
	restored, err := optionalJSON(sb.Restored)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	paused, err := optionalJSON(sb.Paused)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	lifecycle, err := json.Marshal(lifecycleColumn{Lifecycle: sb.Lifecycle, TimeoutSeconds: int64(sb.Timeout / time.Second)})
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	q := `INSERT INTO sandboxes (` + sandboxColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	args := []any{sb.ID, sb.Tenant, sb.Template, sb.Runtime, sb.State, sb.Error, sb.CPUs, sb.MemoryMB, sb.Pids, sb.DiskMB,
		env, meta, sb.Origin, sb.WorkspaceMB, sb.WorkspaceOrigin, string(network), sb.NetSlot,
		sb.PreviewToken, sb.PreviewPublic, sb.RuntimeState,
		created.UnixNano(), nullNanos(sb.ExpiresAt), now.UnixNano(), sb.Node,
		int64(sb.CheckpointEvery / time.Second), sb.Checkpoint, nullNanos(sb.CheckpointAt), restored, sb.AgentToken,
		sb.TemplateVersion, sb.Persistence, string(lifecycle), paused, sb.Standby}
	err = s.withinQuota(ctx, sb.Tenant,
		func(r runner, quota Quota) error { return sandboxQuota(ctx, r, quota, sb, now) },
		func(r runner) ([]api.Event, error) {
			if _, err := r.ExecContext(ctx, q, args...); err != nil {
				return nil, err
			}
			evs := []api.Event{{At: now, Kind: api.EventSandboxCreated, Tenant: sb.Tenant, Sandbox: sb.ID, Node: sb.Node,
				State: sb.State, Snapshot: cmp.Or(sb.Origin, sb.WorkspaceOrigin)}}
			if e, ok := sandboxEvent(moved{expires: sb.ExpiresAt}, *sb, now); ok {
				evs = append(evs, e)
			}
			return evs, nil
		})
	var qe *QuotaError
	if errors.As(err, &qe) {
		return err
	}
	if isUniqueViolation(err) {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	sb.Version = 1
	sb.CreatedAt = fromNanos(created.UnixNano())
	sb.UpdatedAt = fromNanos(now.UnixNano())
	return nil
}

// GetSandbox returns the sandbox with id, or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ListSandboxes returns a page of the sandboxes of tenant, or of every
// tenant when tenant is "", in one of states (any state when states is
// empty), oldest first.
func (s *Store) ListSandboxes(ctx context.Context, tenant string, states []string, page listing.Page) ([]Sandbox, error) {
	var f filter
	if tenant != "" {
		f.add("tenant = ?", tenant)
	}
	f.in("state", states)
	q, args := f.query(`SELECT `+sandboxColumns+` FROM sandboxes`, page)
	return s.querySandboxes(ctx, "list sandboxes", q, args...)
}

// NodeSandboxes returns the sandboxes of node in one of states (any state
// when states is empty), oldest first: what a node adopts and reaps.
func (s *Store) NodeSandboxes(ctx context.Context, node string, states []string) ([]Sandbox, error) {
	var f filter
	f.add("node = ?", node)
	f.in("state", states)
	q, args := f.query(`SELECT `+sandboxColumns+` FROM sandboxes`, listing.Page{})
	return s.querySandboxes(ctx, "list sandboxes of node "+node, q, args...)
}

// ClaimUnowned makes node the node of every sandbox and snapshot recorded
// with none: those of a single machine from before the fleet (not a
// moving sandbox waiting for a node, MovingSandboxes). It returns
// how many sandboxes it claimed.
func (s *Store) ClaimUnowned(ctx context.Context, node string) (int, error) {
	if _, err := s.db.ExecContext(ctx, `UPDATE snapshots SET node = ? WHERE node = ''`, node); err != nil {
		return 0, fmt.Errorf("claim snapshots for node %s: %w", node, err)
	}
	// A moving sandbox with no node waits for a control replica to place
	// it: it is nobody's yet.
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET node = ? WHERE node = '' AND state != '`+api.StateMoving+`'`, node)
	if err != nil {
		return 0, fmt.Errorf("claim sandboxes for node %s: %w", node, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("claim sandboxes for node %s: %w", node, err)
	}
	return int(n), nil
}

// SetSandboxNetwork replaces the sandbox's egress policy. ErrNotFound when
// the sandbox does not exist.
func (s *Store) SetSandboxNetwork(ctx context.Context, id string, p api.NetworkPolicy) error {
	network, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("set network of %s: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET network = ?, updated_at = ? WHERE id = ?`,
		string(network), time.Now().UnixNano(), id)
	if err != nil {
		return fmt.Errorf("set network of %s: %w", id, err)
	}
	return affectedOne(res, "set network of "+id)
}

// SetSandboxPreview changes the sandbox's preview access in one statement:
// PreviewPublic to *public unless public is nil, PreviewToken to token
// unless token is "". It returns the record as that statement left it;
// ErrNotFound when the sandbox does not exist. UpdatedAt is left alone: it
// dates the sandbox's state, which PurgeFinal goes by.
func (s *Store) SetSandboxPreview(ctx context.Context, id string, public *bool, token string) (Sandbox, error) {
	var pub sql.NullBool
	if public != nil {
		pub = sql.NullBool{Bool: *public, Valid: true}
	}
	sb, err := scanSandbox(s.db.QueryRowContext(ctx,
		`UPDATE sandboxes SET preview_public = COALESCE(?, preview_public),
			preview_token = CASE WHEN ? = '' THEN preview_token ELSE ? END
		WHERE id = ? RETURNING `+sandboxColumns, pub, token, token, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("set preview of %s: %w", id, err)
	}
	return sb, nil
}

// DeleteSandbox forgets the sandbox with id; ErrNotFound when there is none.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return affectedOne(res, "delete sandbox "+id)
}

// ExpiredSandboxes returns node's sandboxes not in a final state, and its
// failed ones (which keep their disks until they expire), whose ExpiresAt
// is set and not after now, oldest first; and the paused ones no node
// holds, which any node may end.
func (s *Store) ExpiredSandboxes(ctx context.Context, node string, now time.Time) ([]Sandbox, error) {
	return s.querySandboxes(ctx, "expired sandboxes",
		`SELECT `+sandboxColumns+` FROM sandboxes
		WHERE (node = ? AND (state NOT IN `+finalStates+` OR state = '`+api.StateFailed+`')
			OR node = '' AND state = '`+api.StatePaused+`')
		AND expires_at IS NOT NULL AND expires_at <= ?
		ORDER BY created_at, id`, node, now.UnixNano())
}

// PurgeFinal deletes the sandboxes in a final state last updated before
// olderThan, but no failed one that still has an expiry (it keeps its
// disks until then), and returns how many it deleted.
func (s *Store) PurgeFinal(ctx context.Context, olderThan time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx,
		`DELETE FROM sandboxes WHERE state IN `+finalStates+` AND updated_at < ?
		AND (state != '`+api.StateFailed+`' OR expires_at IS NULL)`, olderThan.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("purge sandboxes: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purge sandboxes: %w", err)
	}
	return int(n), nil
}

// querySandboxes runs a query selecting sandboxColumns; op names it in
// errors.
func (s *Store) querySandboxes(ctx context.Context, op, query string, args ...any) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanSandbox reads one row of sandboxColumns.
func scanSandbox(row scanner) (Sandbox, error) {
	var sb Sandbox
	var env, meta, network string
	var created, updated, every int64
	var expires, checkpointAt sql.NullInt64
	var restored, lifecycle, paused string
	err := row.Scan(&sb.ID, &sb.Tenant, &sb.Template, &sb.Runtime, &sb.State, &sb.Error,
		&sb.CPUs, &sb.MemoryMB, &sb.Pids, &sb.DiskMB, &env, &meta, &sb.Origin, &sb.WorkspaceMB, &sb.WorkspaceOrigin,
		&network, &sb.NetSlot, &sb.PreviewToken, &sb.PreviewPublic, &sb.RuntimeState, &created, &expires, &updated, &sb.Version, &sb.Node,
		&every, &sb.Checkpoint, &checkpointAt, &restored, &sb.AgentToken, &sb.TemplateVersion, &sb.Persistence,
		&lifecycle, &paused, &sb.Standby)
	if err != nil {
		return Sandbox{}, err
	}
	sb.CheckpointEvery = time.Duration(every) * time.Second
	if checkpointAt.Valid {
		sb.CheckpointAt = fromNanos(checkpointAt.Int64)
	}
	if sb.Restored, err = decodeOptional[api.Restored](restored); err != nil {
		return Sandbox{}, fmt.Errorf("decode restored of %s: %w", sb.ID, err)
	}
	if sb.Paused, err = decodeOptional[api.Paused](paused); err != nil {
		return Sandbox{}, fmt.Errorf("decode paused of %s: %w", sb.ID, err)
	}
	if lifecycle != "" {
		var lc lifecycleColumn
		if err := json.Unmarshal([]byte(lifecycle), &lc); err != nil {
			return Sandbox{}, fmt.Errorf("decode lifecycle of %s: %w", sb.ID, err)
		}
		sb.Lifecycle, sb.Timeout = lc.Lifecycle, time.Duration(lc.TimeoutSeconds)*time.Second
	}
	if err := json.Unmarshal([]byte(env), &sb.Env); err != nil {
		return Sandbox{}, fmt.Errorf("decode env of %s: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return Sandbox{}, fmt.Errorf("decode metadata of %s: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(network), &sb.Network); err != nil {
		return Sandbox{}, fmt.Errorf("decode network of %s: %w", sb.ID, err)
	}
	sb.CreatedAt = fromNanos(created)
	sb.UpdatedAt = fromNanos(updated)
	if expires.Valid {
		sb.ExpiresAt = fromNanos(expires.Int64)
	}
	return sb, nil
}

// optionalJSON is the JSON of v, "" for nil: a column of an optional
// value.
func optionalJSON[T any](v *T) (string, error) {
	if v == nil {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}

// decodeOptional reads a column optionalJSON wrote: nil for "".
func decodeOptional[T any](s string) (*T, error) {
	if s == "" {
		return nil, nil
	}
	v := new(T)
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return nil, err
	}
	return v, nil
}

// encodeMaps returns the JSON of the sandbox's Env and Metadata; a nil map
// is stored as null and read back as nil.
func encodeMaps(sb *Sandbox) (env, meta string, err error) {
	e, err := json.Marshal(sb.Env)
	if err != nil {
		return "", "", fmt.Errorf("encode env: %w", err)
	}
	m, err := json.Marshal(sb.Metadata)
	if err != nil {
		return "", "", fmt.Errorf("encode metadata: %w", err)
	}
	return string(e), string(m), nil
}

// Times are stored as Unix nanoseconds (UTC), which sort and compare in SQL
// and keep full precision.

// fromNanos is the UTC time of n Unix nanoseconds.
func fromNanos(n int64) time.Time {
	return time.Unix(0, n).UTC()
}

// nullNanos stores t, or NULL for the zero time.
func nullNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}
