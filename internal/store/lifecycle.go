package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"warren/api"
)

// The sandbox state machine. A sandbox's record is inserted starting and
// then changes state only by one of these moves, each a compare-and-set in
// the store (Transition): from a state the caller saw, to a state the
// machine allows from it. A move that lost a race (the record is no longer
// in a state the caller expected, or its version moved on) changes nothing
// and fails with a *TransitionError, so no writer ever overwrites another's
// newer state.
//
//		starting ──▶ running ◀──▶ paused
//		 ▲ ▲ │            │         │ │
//		 │ │ └────────────┴─────────┼─┴──▶ stopped │ failed
//		 │ └────────────────────────┘  (a wake)    ▲
//		 │               ▼                         │
//		 └───────────  moving ─────────────────────┘
//
//	  - starting: recorded before anything is made for the sandbox; its create
//	    owns it. A delete moves it to stopped and leaves the unwinding to the
//	    create, which finds its own move to running refused.
//	  - running: its agent answered. paused: its disk is a durable snapshot
//	    (Sandbox.Paused) and, when its node holds it (Sandbox.Held), its
//	    memory is kept there too (Pause, Resume). One not held wakes by a
//	    move to starting, on its node or, with none, on the node that claims
//	    it, from its pause snapshot; a paused sandbox whose node is lost
//	    stays paused, held by none (Lose).
//	  - moving: a sandbox with a checkpoint policy whose node was lost or
//	    drained; nothing runs for it. Its record's node is the node that is
//	    to start it again from its checkpoint, or "" while a control replica
//	    has not placed it yet (MovingSandboxes, AssignMove); that node's
//	    move to starting claims it.
//	  - stopped (deleted or expired) and failed (its start failed, its init or
//	    VMM died, or a restart could not adopt it) are final: no move leaves
//	    them. A final record keeps no environment and is forgotten after a
//	    while (PurgeFinal); a failed one may keep its disks until its expiry
//	    (the manager's teardown; SetExpiry and ExpiredSandboxes).
var moves = map[string][]string{
	api.StateStarting: {api.StateRunning, api.StatePaused, api.StateMoving, api.StateStopped, api.StateFailed},
	api.StateRunning:  {api.StatePaused, api.StateMoving, api.StateStopped, api.StateFailed},
	api.StatePaused:   {api.StateRunning, api.StateStarting, api.StateMoving, api.StateStopped, api.StateFailed},
	api.StateMoving:   {api.StateStarting, api.StateStopped, api.StateFailed},
}

// CanMove reports whether the state machine moves a sandbox from one state
// to another.
func CanMove(from, to string) bool { return slices.Contains(moves[from], to) }

// Live are the states that are not final.
var Live = []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateMoving}

// OnNode are the live states in which the sandbox's node holds it: all
// but moving.
var OnNode = []string{api.StateStarting, api.StateRunning, api.StatePaused}

// ErrTransition is what every *TransitionError is, for errors.Is.
var ErrTransition = errors.New("state transition refused")

// TransitionError is a move or a narrow update the store refused, of a
// sandbox or a snapshot (snapshots.go): the record was in State (at
// Version, a sandbox's), not in one of Want, or it was but something else
// the change expected of it did not hold (Reason).
type TransitionError struct {
	Record  string // what was refused: "sandbox" (also when "") or "snapshot"
	ID      string
	State   string
	Version int64
	Want    []string
	To      string // "" for a narrow update
	// Reason says why a record in a state of Want was refused; "" is that
	// its version moved on.
	Reason string
}

func (e *TransitionError) Error() string {
	what := "update"
	if e.To != "" {
		what = "move to " + e.To
	}
	why := fmt.Sprintf("it is %s, not %s", e.State, strings.Join(e.Want, " or "))
	if slices.Contains(e.Want, e.State) {
		why = cmp.Or(e.Reason, fmt.Sprintf("its record changed meanwhile (version %d)", e.Version))
	}
	return fmt.Sprintf("%s %s: %s refused: %s", cmp.Or(e.Record, "sandbox"), e.ID, what, why)
}

// Is makes a *TransitionError match ErrTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrTransition }

// Transition is one move of the state machine, and what changes with it.
type Transition struct {
	// From are the states the caller expects the sandbox in; the move is
	// refused from any other. Each must be allowed to move to To.
	From []string
	To   string
	// Version, when not 0, must be the record's: the move is refused if
	// anything changed the record since the caller read it.
	Version int64
	// Error is the record's new Error: why it failed or stopped ("" clears
	// it). Fit for the sandbox's owner to read.
	Error string
	// RuntimeState is the runtime's new state; nil clears it.
	RuntimeState []byte
	// NetSlot, when not nil, is the new network slot.
	NetSlot *int
	// Expires, when not nil, is the new expiry (zero: none).
	Expires *time.Time
	// Node, when not nil, is the node that now owns the sandbox ("" for
	// none: a moving sandbox not placed yet).
	Node *string
	// Checkpoint, when not nil, is the sandbox's new last checkpoint.
	Checkpoint *api.Checkpoint
	// Restored, when not nil, says how the sandbox came back.
	Restored *api.Restored
	// Paused is how the sandbox sleeps, for a move to paused (and one to
	// starting that wakes it, which keeps what it was when nil); any other
	// move clears it.
	Paused *api.Paused
	// Cause says who moved a paused sandbox on and why, for its event
	// (sandbox.resumed or sandbox.auto_resumed).
	Cause *Cause
}

// Cause is why a sandbox left paused: a call that needed it running woke
// it (Auto), or its owner asked.
type Cause struct {
	Auto   bool
	Reason string
}

// Transition makes the move t of sandbox id and returns the record after
// it: ErrNotFound when there is none, a *TransitionError when it is not in
// a state of t.From (or not at t.Version), and nothing changes then. A
// move to a final state drops the record's environment.
func (s *Store) Transition(ctx context.Context, id string, t Transition) (Sandbox, error) {
	if len(t.From) == 0 {
		return Sandbox{}, fmt.Errorf("transition of %s: no state to move from", id)
	}
	for _, from := range t.From {
		if !CanMove(from, t.To) {
			return Sandbox{}, fmt.Errorf("transition of %s: the state machine has no move from %s to %s", id, from, t.To)
		}
	}
	set := []string{"state = ?", "error = ?", "runtime_state = ?"}
	args := []any{t.To, t.Error, t.RuntimeState}
	if t.NetSlot != nil {
		set, args = append(set, "net_slot = ?"), append(args, *t.NetSlot)
	}
	if t.Expires != nil {
		set, args = append(set, "expires_at = ?"), append(args, nullNanos(*t.Expires))
	}
	if t.Node != nil {
		set, args = append(set, "node = ?"), append(args, *t.Node)
	}
	if t.Checkpoint != nil {
		set, args = append(set, "checkpoint = ?", "checkpoint_at = ?"), append(args, t.Checkpoint.Snapshot, nullNanos(t.Checkpoint.At))
	}
	if t.Restored != nil {
		restored, err := optionalJSON(t.Restored)
		if err != nil {
			return Sandbox{}, fmt.Errorf("transition of %s: %w", id, err)
		}
		set, args = append(set, "restored = ?"), append(args, restored)
	}
	switch {
	case t.Paused != nil:
		paused, err := optionalJSON(t.Paused)
		if err != nil {
			return Sandbox{}, fmt.Errorf("transition of %s: %w", id, err)
		}
		set, args = append(set, "paused = ?"), append(args, paused)
	case t.To != api.StateStarting:
		set = append(set, "paused = ''")
	}
	set = append(set, "standby = ''")
	if isFinal(t.To) {
		set = append(set, "env = 'null'")
	}
	where, wargs := inStates("state", t.From)
	if t.Version != 0 {
		where, wargs = where+" AND version = ?", append(wargs, t.Version)
	}
	return s.change(ctx, id, "move to "+t.To, t.To, t.Cause, t.From, set, args, where, wargs)
}

// SetExpiry sets the expiry of sandbox id (zero: none) if it is in one of
// states; else a *TransitionError, and nothing changes.
func (s *Store) SetExpiry(ctx context.Context, id string, at time.Time, states ...string) (Sandbox, error) {
	where, wargs := inStates("state", states)
	return s.change(ctx, id, "set expiry", "", nil, states,
		[]string{"expires_at = ?"}, []any{nullNanos(at)}, where, wargs)
}

// SetTimeout sets sandbox rec's timeout, which each wake gives it again,
// and, unless it is paused, its expiry to at: a paused one keeps the
// expiry its paused TTL gave it. A compare-and-set on rec's version, in a
// live state.
func (s *Store) SetTimeout(ctx context.Context, rec Sandbox, timeout time.Duration, at time.Time) (Sandbox, error) {
	lifecycle, err := json.Marshal(lifecycleColumn{Lifecycle: rec.Lifecycle, TimeoutSeconds: int64(timeout / time.Second)})
	if err != nil {
		return Sandbox{}, fmt.Errorf("set timeout of %s: %w", rec.ID, err)
	}
	where, wargs := inStates("state", Live)
	return s.change(ctx, rec.ID, "set timeout", "", nil, Live,
		[]string{"lifecycle = ?", "expires_at = CASE WHEN state = '" + api.StatePaused + "' THEN expires_at ELSE ? END"},
		[]any{string(lifecycle), nullNanos(at)}, where+" AND version = ?", append(wargs, rec.Version))
}

// SetCheckpoint records c as the last checkpoint of sandbox id, which node
// runs: if it is running or paused there; else a *TransitionError, and
// nothing changes.
func (s *Store) SetCheckpoint(ctx context.Context, id, node string, c api.Checkpoint) (Sandbox, error) {
	states := []string{api.StateRunning, api.StatePaused}
	where, wargs := inStates("state", states)
	return s.change(ctx, id, "set checkpoint", "", nil, states,
		[]string{"checkpoint = ?", "checkpoint_at = ?"}, []any{c.Snapshot, nullNanos(c.At)},
		where+" AND node = ?", append(wargs, node))
}

// MovingSandboxes returns up to limit moving sandboxes whose node is node
// ("": those no control replica placed yet), longest waiting first.
func (s *Store) MovingSandboxes(ctx context.Context, node string, limit int) ([]Sandbox, error) {
	return s.querySandboxes(ctx, "moving sandboxes",
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE state = '`+api.StateMoving+`' AND node = ?
		ORDER BY updated_at, id LIMIT ?`, node, limit)
}

// AssignMove gives moving sandbox id, at version and with node from, to
// node to: the one placement of it that wins (a *TransitionError for the
// others, and for a sandbox that is no longer moving from from).
func (s *Store) AssignMove(ctx context.Context, id string, version int64, from, to string) (Sandbox, error) {
	states := []string{api.StateMoving}
	return s.change(ctx, id, "assign move", "", nil, states,
		[]string{"node = ?"}, []any{to},
		"state = ? AND version = ? AND node = ?", []any{api.StateMoving, version, from})
}

// SleepingSandboxes returns up to limit paused sandboxes no node holds
// whose node is node ("": those whose wake no control replica placed
// yet), changed at or after since, the least recently changed first.
func (s *Store) SleepingSandboxes(ctx context.Context, node string, since time.Time, limit int) ([]Sandbox, error) {
	return s.querySandboxes(ctx, "sleeping sandboxes",
		`SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = '`+api.StatePaused+`' AND (runtime_state IS NULL AND node = ? OR standby = ? AND standby <> '')
		AND updated_at >= ? ORDER BY updated_at, id LIMIT ?`, node, node, since.UnixNano(), limit)
}

// WithoutStandby returns up to limit paused sandboxes their nodes hold
// that have no standby, or one other than a node of active (the nodes that
// take sandboxes), oldest change first.
func (s *Store) WithoutStandby(ctx context.Context, active []string, limit int) ([]Sandbox, error) {
	in, args := inStates("standby", active)
	return s.querySandboxes(ctx, "sandboxes without a standby",
		`SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = '`+api.StatePaused+`' AND runtime_state IS NOT NULL AND NOT (`+in+`)
		ORDER BY updated_at, id LIMIT ?`, append(args, limit)...)
}

// SetStandby makes node the standby of paused sandbox rec, which its node
// holds: that node fetches what it wakes from, and a wake goes there when
// its node lets go of it. A compare-and-set on rec's version.
func (s *Store) SetStandby(ctx context.Context, rec Sandbox, node string) (Sandbox, error) {
	return s.change(ctx, rec.ID, "set standby", "", nil, []string{api.StatePaused},
		[]string{"standby = ?"}, []any{node},
		"state = ? AND version = ? AND runtime_state IS NOT NULL", []any{api.StatePaused, rec.Version})
}

// SleepingByRuntime counts node's paused sandboxes that no node holds (they
// sleep in the blob store), by runtime.
func (s *Store) SleepingByRuntime(ctx context.Context, node string) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT runtime, COUNT(*) FROM sandboxes
		WHERE state = '`+api.StatePaused+`' AND runtime_state IS NULL AND node = ? GROUP BY runtime`, node)
	if err != nil {
		return nil, fmt.Errorf("count sleeping sandboxes: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var rt string
		var n int
		if err := rows.Scan(&rt, &n); err != nil {
			return nil, fmt.Errorf("count sleeping sandboxes: %w", err)
		}
		out[rt] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count sleeping sandboxes: %w", err)
	}
	return out, nil
}

// AssignWake gives paused sandbox rec, which no node holds, to node to,
// which wakes it: the one placement that wins (a *TransitionError for the
// others, and for a sandbox changed since rec was read).
func (s *Store) AssignWake(ctx context.Context, rec Sandbox, to string) (Sandbox, error) {
	return s.change(ctx, rec.ID, "assign wake", "", nil, []string{api.StatePaused},
		[]string{"node = ?"}, []any{to},
		"state = ? AND version = ? AND runtime_state IS NULL", []any{api.StatePaused, rec.Version})
}

// change updates the columns set of sandbox id where the condition holds,
// counting up its version, and returns the record as it wrote it. A move
// to state to (not "") records its event (events.go) with it.
func (s *Store) change(ctx context.Context, id, op, to string, cause *Cause, want, set []string, args []any, where string, wargs []any) (Sandbox, error) {
	now := time.Now()
	set = append(set, "version = version + 1", "updated_at = ?")
	args = append(args, now.UnixNano(), id)
	args = append(args, wargs...)
	update := `UPDATE sandboxes SET ` + strings.Join(set, ", ") + ` WHERE id = ? AND ` + where + ` RETURNING ` + sandboxColumns
	var sb Sandbox
	var err error
	if to == "" {
		sb, err = scanSandbox(s.db.QueryRowContext(ctx, update, args...))
	} else {
		err = s.write(ctx, func(r runner) ([]api.Event, error) {
			lock := ""
			if s.db.postgres {
				lock = " FOR UPDATE"
			}
			var from, paused string
			var expires sql.NullInt64
			if err := r.QueryRowContext(ctx, `SELECT state, expires_at, paused FROM sandboxes WHERE id = ?`+lock, id).Scan(&from, &expires, &paused); err != nil {
				return nil, err
			}
			if sb, err = scanSandbox(r.QueryRowContext(ctx, update, args...)); err != nil {
				return nil, err
			}
			var at time.Time
			if expires.Valid {
				at = fromNanos(expires.Int64)
			}
			if e, ok := sandboxEvent(moved{from: from, waking: from == api.StateStarting && paused != "", expires: at, cause: cause}, sb, now); ok {
				return []api.Event{e}, nil
			}
			return nil, nil
		})
	}
	if err == nil {
		return sb, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("%s of sandbox %s: %w", op, id, err)
	}
	// Refused: say what the sandbox is instead (or that there is none).
	if sb, err = s.GetSandbox(ctx, id); err != nil {
		return Sandbox{}, err
	}
	return sb, &TransitionError{Record: "sandbox", ID: id, State: sb.State, Version: sb.Version, Want: want, To: to}
}

// inStates is the SQL condition column IN (states...) and its arguments.
func inStates(column string, states []string) (string, []any) {
	if len(states) == 0 {
		return "FALSE", nil
	}
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = st
	}
	return column + " IN (?" + strings.Repeat(", ?", len(states)-1) + ")", args
}

// Movable says whether sandbox rec comes back from a checkpoint when its
// node is lost, and from which: its last checkpoint, else the snapshot it
// was restored from (its disk as it started); "" when it does not (no
// checkpoint policy, or a workspace disk, which a checkpoint does not
// save). An always-on sandbox comes back with its own volume, as its last
// flush left it: the "snapshot" is its own ID, at no time (it loses none
// of what it flushed).
func Movable(rec Sandbox) (snapshot string, at time.Time) {
	switch {
	case rec.WorkspaceMB > 0:
		return "", time.Time{}
	case rec.Persistence == api.PersistenceAlways:
		return rec.ID, time.Time{}
	case rec.CheckpointEvery == 0:
		return "", time.Time{}
	case rec.Checkpoint != "":
		return rec.Checkpoint, rec.CheckpointAt
	}
	return rec.Origin, rec.CreatedAt
}

// Lose records that sandbox rec's node lost it at lostAt, for reason:
// nothing runs it now (the node is fenced, or stopped it). A paused one
// with its pause snapshot stays paused, held by no node (Unhold). A
// movable one moves, to node to ("": for a control replica to place),
// with Restored saying from which checkpoint and how much work was lost;
// one already moving loses its placement on that node; any other fails.
// It is a compare-and-set on rec's version, as every move.
func (s *Store) Lose(ctx context.Context, rec Sandbox, to string, lostAt time.Time, reason string) (Sandbox, error) {
	if rec.State == api.StateMoving {
		return s.AssignMove(ctx, rec.ID, rec.Version, rec.Node, to)
	}
	if rec.State == api.StatePaused && rec.Paused != nil && rec.Paused.Snapshot != "" {
		return s.Unhold(ctx, rec, to, reason)
	}
	snap, at := Movable(rec)
	if snap == "" {
		none := time.Time{}
		return s.Transition(ctx, rec.ID, Transition{
			From: OnNode, Version: rec.Version, To: api.StateFailed, Error: reason, Expires: &none,
		})
	}
	return s.Transition(ctx, rec.ID, Transition{
		From: OnNode, Version: rec.Version, To: api.StateMoving, Node: &to, Error: reason,
		Restored: &api.Restored{Snapshot: snap, SnapshotAt: at, LostSeconds: lostSince(at, lostAt), Reason: reason, From: rec.Node},
	})
}

// Unhold records that paused sandbox rec is held by no node now, for
// reason (its node was lost or drained): it wakes from its pause snapshot,
// and its memory image if it has one, on node ("": its standby, if it has
// one, else any); memory without an image is gone. A compare-and-set on
// rec's version.
func (s *Store) Unhold(ctx context.Context, rec Sandbox, node, reason string) (Sandbox, error) {
	node = cmp.Or(node, rec.Standby)
	p := *rec.Paused
	p.Held = false
	if p.Memory && p.Image == "" {
		p.Memory = false
		p.Reason += "; its memory was lost: " + reason
	}
	paused, err := optionalJSON(&p)
	if err != nil {
		return Sandbox{}, fmt.Errorf("unhold %s: %w", rec.ID, err)
	}
	states := []string{api.StatePaused}
	return s.change(ctx, rec.ID, "unhold", "", nil, states,
		[]string{"node = ?", "runtime_state = NULL", "paused = ?", "standby = ''"}, []any{node, paused},
		"state = ? AND version = ?", []any{api.StatePaused, rec.Version})
}

// lostSince is the work a sandbox lost, in seconds, coming back from a
// checkpoint taken at at when it was lost at lostAt: none for an always-on
// sandbox (at is zero), whose flushed writes are all kept.
func lostSince(at, lostAt time.Time) float64 {
	if at.IsZero() {
		return 0
	}
	return max(0, lostAt.Sub(at).Seconds())
}
