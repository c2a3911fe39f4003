package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// Snapshot is a snapshot's record: the ones the nodes took, and the ones
// they restored from manifests found in the blob store. State is one of
// the api.Snapshot* constants, changed only by the moves of the snapshot
// state machine (snapshotMoves).
type Snapshot struct {
	ID     string
	Tenant string
	// Name is the snapshot's name, unique among its tenant's snapshots
	// (api.CheckSnapshotName); "" for none.
	Name string
	// Node took the snapshot (or a template base layer's upload again,
	// RetryBaseLayer) and uploads it: a pending snapshot is its to finish.
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
	disk_bytes, changed_bytes, stored_bytes, ack_ns, upload_ns, created_at, durable_at, node, name`

func validSnapshotState(state string) bool {
	switch state {
	case api.SnapshotPending, api.SnapshotDurable, api.SnapshotFailed:
		return true
	}
	return false
}

// InsertSnapshot records a new snapshot; CreatedAt is set to now when zero.
// A record with the same ID is an error wrapping ErrExists; a new one (pending)
// its tenant's quota has no room for, a *QuotaError; one whose name another
// snapshot of its tenant has, a *NameTakenError.
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
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	args := []any{sn.ID, sn.Tenant, sn.SandboxID, sn.Scope, sn.Parent, sn.Template, sn.State, sn.Error,
		sn.DiskBytes, sn.ChangedBytes, sn.StoredBytes, int64(sn.Ack), int64(sn.Upload),
		sn.CreatedAt.UnixNano(), nullNanos(sn.DurableAt), sn.Node, sn.Name}
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
	var err error
	if sn.Tenant == "" || sn.State != api.SnapshotPending {
		// A template's base layer is no tenant's; a durable record is
		// one of a snapshot taken before, found again in the blob store:
		// neither is an event.
		_, err = insert(s.db)
	} else {
		err = s.withinQuota(ctx, sn.Tenant, func(r runner, quota Quota) error { return snapshotQuota(ctx, r, quota, sn.Tenant) }, insert)
	}
	if sn.Name != "" && isUniqueViolation(err) {
		// The ID's conflict inserts nothing: the name's index refused it.
		holder, herr := s.SnapshotByName(ctx, sn.Tenant, sn.Name)
		if herr != nil && !errors.Is(herr, ErrNotFound) {
			return fmt.Errorf("insert snapshot %s: %w", sn.ID, herr)
		}
		return &NameTakenError{Name: sn.Name, Holder: holder.ID}
	}
	return err
}

// NameTakenError is an insert refused because another snapshot of the
// same tenant has its name: Holder, or "" when that one was deleted as
// the refusal was read.
type NameTakenError struct {
	Name, Holder string
}

func (e *NameTakenError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("the snapshot name %q was taken by another snapshot", e.Name)
	}
	return fmt.Sprintf("the snapshot name %q is taken by snapshot %s", e.Name, e.Holder)
}

// The snapshot state machine. A snapshot's record is inserted pending (or
// durable: a snapshot taken before, found again in the blob store) and
// then changes state only by one of these moves, each a compare-and-set in
// the store on the state the writer expects and the node it expects to
// own the snapshot. A change that lost a race (the snapshot was deleted,
// failed or finished by another writer meanwhile) changes nothing and
// fails with a *TransitionError, so no writer overwrites another's state.
//
//	failed ◀──── pending ────▶ durable
//	   │          ▲   ▲           │
//	   └──────────┘   └───────────┘
//	     (template base layers only)
//
//	  - pending: recorded before its disk is cloned into its node's cache,
//	    and until its layer is stored; only its node changes it
//	    (SetSnapshotTaken, then MakeSnapshotDurable or FailSnapshot).
//	  - durable: its manifest and every chunk it lists are stored and
//	    verified in the blob store.
//	  - failed: its disk could not be cloned, or its layer not stored
//	    (past the upload's retries); Error says why.
//	  - A tenant's durable or failed snapshot stays so until it is deleted
//	    (DeleteSnapshot, from any state). A template base layer (no tenant:
//	    it has no events and no quota) goes back to pending to be uploaded
//	    again (RetryBaseLayer): a failed one when a snapshot needs it, a
//	    durable one whose manifest the collector took while nothing
//	    needed it.
var snapshotMoves = map[string][]string{
	api.SnapshotPending: {api.SnapshotDurable, api.SnapshotFailed},
	api.SnapshotDurable: {api.SnapshotPending},
	api.SnapshotFailed:  {api.SnapshotPending},
}

// CanMoveSnapshot reports whether the state machine moves a snapshot from
// one state to another.
func CanMoveSnapshot(from, to string) bool { return slices.Contains(snapshotMoves[from], to) }

// SetSnapshotTaken records how long taking snapshot id held its sandbox
// quiesced (ack) and the size of the disk it cloned, while the snapshot is
// pending and node's; else a *TransitionError (ErrNotFound when there is
// none), and nothing changes.
func (s *Store) SetSnapshotTaken(ctx context.Context, id, node string, ack time.Duration, diskBytes int64) (Snapshot, error) {
	return s.changeSnapshot(ctx, id, "record taken", snapshotWant{state: api.SnapshotPending, node: node}, "",
		[]string{"ack_ns = ?", "disk_bytes = ?"}, []any{int64(ack), diskBytes})
}

// Durable is what a snapshot's record learns as it becomes durable.
type Durable struct {
	// Parent is the snapshot its layer is stored against: the intended
	// one, or the nearest durable ancestor of it ("" for none).
	Parent       string
	ChangedBytes int64
	StoredBytes  int64 // by every attempt of the upload
	Upload       time.Duration
	// DiskBytes and Ack, when not 0, replace the recorded ones: a snapshot
	// whose layer is written as it is taken (an always-on disk's) learns
	// them only now.
	DiskBytes int64
	Ack       time.Duration
	// At is when it became durable; the zero time is now.
	At time.Time
}

// MakeSnapshotDurable moves pending snapshot id, which node uploads, to
// durable with d and returns its record. A *TransitionError when it is no
// longer pending or node's (failed or finished by another writer), an
// error wrapping ErrNotFound when it is gone (deleted): nothing changes
// then.
func (s *Store) MakeSnapshotDurable(ctx context.Context, id, node string, d Durable) (Snapshot, error) {
	if d.At.IsZero() {
		d.At = time.Now()
	}
	set := []string{"error = ''", "parent = ?", "changed_bytes = ?", "stored_bytes = ?", "upload_ns = ?", "durable_at = ?"}
	args := []any{d.Parent, d.ChangedBytes, d.StoredBytes, int64(d.Upload), d.At.UnixNano()}
	if d.DiskBytes != 0 {
		set, args = append(set, "disk_bytes = ?"), append(args, d.DiskBytes)
	}
	if d.Ack != 0 {
		set, args = append(set, "ack_ns = ?"), append(args, int64(d.Ack))
	}
	return s.changeSnapshot(ctx, id, "move to durable", snapshotWant{state: api.SnapshotPending, node: node},
		api.SnapshotDurable, set, args)
}

// FailSnapshot moves pending snapshot id, which node takes or uploads, to
// failed, saying why (fit for its owner to read), with the bytes its
// upload's attempts stored in the blob store. Refused as
// MakeSnapshotDurable is.
func (s *Store) FailSnapshot(ctx context.Context, id, node, reason string, storedBytes int64) (Snapshot, error) {
	return s.changeSnapshot(ctx, id, "move to failed", snapshotWant{state: api.SnapshotPending, node: node},
		api.SnapshotFailed, []string{"error = ?", "stored_bytes = ?"}, []any{reason, storedBytes})
}

// RetryBaseLayer moves template base layer sn, failed or durable as the
// caller read it, back to pending for node to upload (again), clearing its
// error and durable time: a compare-and-set on its state and node. A
// *TransitionError when the record changed meanwhile, or is a tenant's
// snapshot, which never goes back.
func (s *Store) RetryBaseLayer(ctx context.Context, sn Snapshot, node string) (Snapshot, error) {
	return s.changeSnapshot(ctx, sn.ID, "move to pending", snapshotWant{state: sn.State, node: sn.Node, base: true},
		api.SnapshotPending, []string{"error = ''", "durable_at = NULL", "node = ?"}, []any{node})
}

// snapshotWant is what a change of a snapshot expects of its record: its
// state and its node, and, for a move back to pending, that it is a
// template base layer (no tenant's).
type snapshotWant struct {
	state string
	node  string
	base  bool
}

// where is the SQL condition of w and its arguments.
func (w snapshotWant) where() (string, []any) {
	if w.base {
		return "state = ? AND node = ? AND tenant = ''", []any{w.state, w.node}
	}
	return "state = ? AND node = ?", []any{w.state, w.node}
}

// refused says why record sn, in the state w expects, did not satisfy w.
func (w snapshotWant) refused(sn Snapshot) string {
	switch {
	case sn.Node != w.node:
		return fmt.Sprintf("it is node %q's, not %q's", sn.Node, w.node)
	case w.base && sn.Tenant != "":
		return "it is a tenant's snapshot, not a template base layer"
	}
	return "its record changed meanwhile"
}

// changeSnapshot sets the columns set of snapshot id if its record is as
// want says, and returns the record as it wrote it. A move to state to
// (not "": an update that keeps the state) records its event (events.go)
// with it. Refused, it returns the record as it is and a *TransitionError,
// or an error wrapping ErrNotFound.
func (s *Store) changeSnapshot(ctx context.Context, id, op string, want snapshotWant, to string, set []string, args []any) (Snapshot, error) {
	if to != "" {
		if !CanMoveSnapshot(want.state, to) {
			return Snapshot{}, fmt.Errorf("%s of snapshot %s: the state machine has no move from %s to %s", op, id, want.state, to)
		}
		set, args = append(set, "state = ?"), append(args, to)
	}
	where, wargs := want.where()
	update := `UPDATE snapshots SET ` + strings.Join(set, ", ") + ` WHERE id = ? AND ` + where + ` RETURNING ` + snapshotColumns
	args = append(append(args, id), wargs...)
	var sn Snapshot
	var err error
	if to == "" {
		sn, err = scanSnapshot(s.db.QueryRowContext(ctx, update, args...))
	} else {
		err = s.write(ctx, func(r runner) ([]api.Event, error) {
			var err error
			if sn, err = scanSnapshot(r.QueryRowContext(ctx, update, args...)); err != nil {
				return nil, err
			}
			if e, ok := snapshotEvent(sn); ok {
				return []api.Event{e}, nil
			}
			return nil, nil
		})
	}
	if err == nil {
		return sn, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("%s of snapshot %s: %w", op, id, err)
	}
	// Refused: say what the snapshot is instead (or that there is none).
	if sn, err = s.GetSnapshot(ctx, id); errors.Is(err, ErrNotFound) {
		return Snapshot{}, fmt.Errorf("%s of snapshot %s: %w", op, id, ErrNotFound)
	} else if err != nil {
		return Snapshot{}, err
	}
	te := &TransitionError{Record: "snapshot", ID: id, State: sn.State, Want: []string{want.state}, To: to}
	if sn.State == want.state {
		te.Reason = want.refused(sn)
	}
	return sn, te
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

// SnapshotByName returns tenant's snapshot named name, or ErrNotFound.
// A deleted snapshot's record is gone, and its name with it.
func (s *Store) SnapshotByName(ctx context.Context, tenant, name string) (Snapshot, error) {
	if tenant == "" || name == "" {
		return Snapshot{}, ErrNotFound // base layers and unnamed snapshots have no name to find
	}
	sns, err := s.querySnapshots(ctx, "get snapshot named "+name,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE tenant = ? AND name = ?`, tenant, name)
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

// DeleteSnapshot forgets the snapshot with id, which frees its name;
// ErrNotFound when there is none.
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
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// scanSnapshot reads one row of snapshotColumns.
func scanSnapshot(row scanner) (Snapshot, error) {
	var sn Snapshot
	var ack, upload, created int64
	var durable sql.NullInt64
	if err := row.Scan(&sn.ID, &sn.Tenant, &sn.SandboxID, &sn.Scope, &sn.Parent, &sn.Template, &sn.State, &sn.Error,
		&sn.DiskBytes, &sn.ChangedBytes, &sn.StoredBytes, &ack, &upload, &created, &durable, &sn.Node, &sn.Name); err != nil {
		return Snapshot{}, err
	}
	sn.Ack, sn.Upload = time.Duration(ack), time.Duration(upload)
	sn.CreatedAt = fromNanos(created)
	if durable.Valid {
		sn.DurableAt = fromNanos(durable.Int64)
	}
	return sn, nil
}
