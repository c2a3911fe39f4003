package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// Events (docs/API.md, "Events"). Every change of a sandbox's state, of a
// snapshot's and of a fleet node's writes its event in the transaction
// that makes the change, so the events are exactly the changes that
// committed. Their IDs count up in the order they committed: SQLite has
// one writer, and on PostgreSQL a transaction takes the events lock
// (an advisory lock held to its commit) just before it inserts them, so a
// reader that has seen event N never sees an event below N appear later.
// Events older than the replay window are trimmed (TrimEvents).
//
// A tenant sees its events numbered in a sequence of its own (seq, 1, 2,
// 3…, kept in event_seqs and counted up in the same transaction, under
// the same order): the gaps between its IDs are its own events that a
// filter left out, never another tenant's activity. The node-wide ID
// orders every tenant's events for an admin's all_tenants stream.

// eventsLockKey names the PostgreSQL advisory lock of event inserts
// ("events" in ASCII).
const eventsLockKey = 0x6576656e7473

// runner runs queries: the store's database, or one of its transactions.
type runner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// txRunner runs queries in tx, with the store's placeholders.
type txRunner struct {
	tx *sql.Tx
	d  *db
}

func (t txRunner) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.d.rebind(query), args...)
}

func (t txRunner) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, t.d.rebind(query), args...)
}

func (t txRunner) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, t.d.rebind(query), args...)
}

// write runs f in a transaction, then records the events f returns in it,
// and commits. Nothing is written when f or the insert fails.
func (s *Store) write(ctx context.Context, f func(r runner) ([]api.Event, error)) error {
	tx, err := s.db.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	r := txRunner{tx: tx, d: s.db}
	evs, err := f(r)
	if err != nil {
		return err
	}
	if len(evs) > 0 {
		if s.db.postgres {
			if _, err := r.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(eventsLockKey)); err != nil {
				return fmt.Errorf("events lock: %w", err)
			}
		}
		for _, e := range evs {
			if e.At.IsZero() {
				e.At = time.Now()
			}
			var seq int64
			if err := r.QueryRowContext(ctx, `INSERT INTO event_seqs (tenant, seq) VALUES (?, 1)
				ON CONFLICT (tenant) DO UPDATE SET seq = event_seqs.seq + 1 RETURNING seq`, e.Tenant).Scan(&seq); err != nil {
				return fmt.Errorf("record event %s: number it: %w", e.Kind, err)
			}
			if _, err := r.ExecContext(ctx, `INSERT INTO events (at, kind, tenant, sandbox, snapshot, node, state, reason, seq)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				e.At.UnixNano(), e.Kind, e.Tenant, e.Sandbox, e.Snapshot, e.Node, e.State, e.Reason, seq); err != nil {
				return fmt.Errorf("record event %s: %w", e.Kind, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if len(evs) > 0 {
		s.bell.ring()
	}
	return nil
}

// EventsChanged is closed when events were recorded through this Store
// after the call. Other stores on the same database (a fleet's other
// processes) do not ring it: poll for theirs.
func (s *Store) EventsChanged() <-chan struct{} { return s.bell.wait() }

// bell is closed and made again each time it rings. Its zero value is
// ready.
type bell struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *bell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// EventQuery selects events: those after After, of Tenant
// (listing.AnyTenant: every tenant's, and the nodes'), about Sandbox and
// Snapshot when set, of Kinds when given; at most Limit, in order. After
// and the IDs of the events answered are positions in the tenant's own
// sequence, or node-wide IDs for listing.AnyTenant.
type EventQuery struct {
	After             int64
	Tenant            string
	Sandbox, Snapshot string
	Kinds             []string
	Limit             int
}

const eventColumns = `at, kind, tenant, sandbox, snapshot, node, state, reason`

// Events returns the events q selects.
func (s *Store) Events(ctx context.Context, q EventQuery) ([]api.Event, error) {
	var f filter
	pos := "seq"
	if q.Tenant == listing.AnyTenant {
		pos = "id"
	} else {
		f.add("tenant = ?", q.Tenant)
	}
	f.add(pos+" > ?", q.After)
	if q.Sandbox != "" {
		f.add("sandbox = ?", q.Sandbox)
	}
	if q.Snapshot != "" {
		f.add("snapshot = ?", q.Snapshot)
	}
	f.in("kind", q.Kinds)
	rows, err := s.db.QueryContext(ctx, `SELECT `+pos+`, `+eventColumns+` FROM events WHERE `+strings.Join(f.conds, " AND ")+
		` ORDER BY `+pos+` LIMIT ?`, append(f.args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var out []api.Event
	for rows.Next() {
		var e api.Event
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Kind, &e.Tenant, &e.Sandbox, &e.Snapshot, &e.Node, &e.State, &e.Reason); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// EventBounds returns the positions of tenant's oldest event kept and of
// the newest it was given; when it has none kept, oldest is the position
// its next event will take (newest+1). For listing.AnyTenant, the
// node-wide IDs of the oldest and the newest event kept (0 and 0 when
// there is none).
func (s *Store) EventBounds(ctx context.Context, tenant string) (oldest, newest int64, err error) {
	if tenant == listing.AnyTenant {
		err = s.db.QueryRowContext(ctx, `SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM events`).Scan(&oldest, &newest)
	} else {
		err = s.db.QueryRowContext(ctx, `SELECT COALESCE((SELECT MIN(seq) FROM events WHERE tenant = ?), 0),
			COALESCE((SELECT seq FROM event_seqs WHERE tenant = ?), 0)`, tenant, tenant).Scan(&oldest, &newest)
		if oldest == 0 {
			oldest = newest + 1
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("event bounds: %w", err)
	}
	return oldest, newest, nil
}

// TrimEvents forgets the events older than before, and all but the newest
// keep, and returns how many it forgot.
func (s *Store) TrimEvents(ctx context.Context, before time.Time, keep int64) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE at < ? OR id <= (SELECT MAX(id) FROM events) - ?`, before.UnixNano(), keep)
	if err != nil {
		return 0, fmt.Errorf("trim events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("trim events: %w", err)
	}
	return n, nil
}

// moved is what a sandbox's move left behind, for its event: the state it
// moved from, whether that was a wake's starting (its record still said how
// it slept), when it was to expire (zero: never), and why a paused one
// moved on.
type moved struct {
	from    string
	waking  bool
	expires time.Time
	cause   *Cause
}

// sandboxEvent is the event of sandbox sb's move m at now; ok is false for
// a move that is no event (a moving sandbox's node claiming it, a woken
// sandbox's start: its wake was the event).
func sandboxEvent(m moved, sb Sandbox, now time.Time) (e api.Event, ok bool) {
	e = api.Event{At: now, Tenant: sb.Tenant, Sandbox: sb.ID, Node: sb.Node, State: sb.State}
	if m.from == api.StatePaused && (sb.State == api.StateRunning || sb.State == api.StateStarting) {
		e.Kind = api.EventSandboxResumed
		if c := m.cause; c != nil {
			e.Reason = c.Reason
			if c.Auto {
				e.Kind = api.EventSandboxAutoResumed
			}
		}
		return e, true
	}
	switch sb.State {
	case api.StateStarting:
		return e, false
	case api.StateRunning:
		switch {
		case m.waking:
			return e, false
		case sb.Restored != nil:
			e.Kind, e.Snapshot = api.EventSandboxRestored, sb.Restored.Snapshot
		case sb.Origin != "" || sb.WorkspaceOrigin != "":
			e.Kind, e.Snapshot = api.EventSandboxRestored, cmp.Or(sb.Origin, sb.WorkspaceOrigin)
		default:
			e.Kind = api.EventSandboxRunning
		}
	case api.StatePaused:
		e.Kind = api.EventSandboxPaused
		if m.from == api.StateStarting {
			e.Reason = sb.Error // a wake that failed: it sleeps on
			break
		}
		if p := sb.Paused; p != nil {
			e.Reason, e.Snapshot = p.Reason, p.Snapshot
			if p.Auto {
				e.Kind = api.EventSandboxAutoPaused
			}
		}
	case api.StateMoving:
		e.Kind, e.Reason = api.EventSandboxMoving, sb.Error
	case api.StateFailed:
		e.Kind, e.Reason = api.EventSandboxFailed, sb.Error
	case api.StateStopped:
		e.Kind, e.Reason = api.EventSandboxDeleted, sb.Error
		if !m.expires.IsZero() && !m.expires.After(now) {
			e.Kind = api.EventSandboxExpired
		}
	default:
		return e, false
	}
	return e, true
}

// snapshotEvent is the event of snapshot sn reaching its state, when it is
// a tenant's (a template's base layer makes none).
func snapshotEvent(sn Snapshot) (api.Event, bool) {
	e := api.Event{Tenant: sn.Tenant, Sandbox: sn.SandboxID, Snapshot: sn.ID, Node: sn.Node, State: sn.State}
	switch sn.State {
	case api.SnapshotPending:
		e.Kind = api.EventSnapshotPending
	case api.SnapshotDurable:
		e.Kind = api.EventSnapshotDurable
	case api.SnapshotFailed:
		e.Kind, e.Reason = api.EventSnapshotFailed, sn.Error
	default:
		return e, false
	}
	return e, sn.Tenant != ""
}
