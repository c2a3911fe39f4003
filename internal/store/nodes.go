package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"warren/api"
)

// Node states. A node takes new sandboxes only when active; a cordoned
// one keeps what it runs; a draining one is having its sandboxes moved
// away; a fenced one lost its lease (it stopped heartbeating in time) and
// must run nothing until it registers again.
const (
	NodeActive   = "active"
	NodeCordoned = "cordoned"
	NodeDraining = "draining"
	NodeFenced   = "fenced"
)

// ErrFenced is a heartbeat's answer to a node whose lease epoch is no
// longer the record's: it was fenced (or registered again elsewhere), and
// whatever it still runs runs elsewhere too. It must stop it all.
var ErrFenced = errors.New("the node's lease was revoked (fenced)")

// Node is a fleet node's record: where its API is, what it last reported,
// and its lease.
type Node struct {
	ID string
	// Addr is the host:port of its API (mutual TLS, package pki).
	Addr    string
	Region  string
	Cluster string
	Labels  map[string]string
	State   string
	// Epoch is the node's lease. It counts up when the node registers and
	// when it is fenced; a heartbeat carrying another fails with
	// ErrFenced.
	Epoch int64
	// Report is what the node said of itself at its last heartbeat
	// (capacity, allocations, capabilities, what it holds), opaque here.
	Report      []byte
	HeartbeatAt time.Time
	CreatedAt   time.Time
}

const nodeColumns = `id, addr, region, cluster, labels, state, epoch, report, heartbeat_at, created_at`

// RegisterNode records a node starting, new or known, at now, and returns
// its record with its new lease epoch. A known node keeps its state if it
// was cordoned or draining (an operator's choice outlives a restart) and
// is active otherwise; everything else comes from n.
func (s *Store) RegisterNode(ctx context.Context, n Node, now time.Time) (Node, error) {
	if n.ID == "" || n.Addr == "" {
		return Node{}, errors.New("register node: empty id or address")
	}
	labels, err := json.Marshal(n.Labels)
	if err != nil {
		return Node{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	var rec Node
	err = s.write(ctx, func(r runner) (_ []api.Event, err error) {
		rec, err = scanNode(r.QueryRowContext(ctx, `INSERT INTO nodes (`+nodeColumns+`)
		VALUES (?, ?, ?, ?, ?, '`+NodeActive+`', 1, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, region = excluded.region,
			cluster = excluded.cluster, labels = excluded.labels, report = excluded.report,
			heartbeat_at = excluded.heartbeat_at, epoch = nodes.epoch + 1,
			state = CASE WHEN nodes.state IN ('`+NodeCordoned+`', '`+NodeDraining+`') THEN nodes.state
				ELSE '`+NodeActive+`' END
		RETURNING `+nodeColumns,
			n.ID, n.Addr, n.Region, n.Cluster, string(labels), n.Report, now.UnixNano(), now.UnixNano()))
		return []api.Event{{At: now, Kind: api.EventNodeJoined, Node: rec.ID, State: rec.State}}, err
	})
	if err != nil {
		return Node{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	return rec, nil
}

// Heartbeat records that node, holding lease epoch, is alive at now and
// reports report, and returns the node's state (an operator may have
// cordoned or drained it). ErrFenced when epoch is not the node's any
// more.
func (s *Store) Heartbeat(ctx context.Context, id string, epoch int64, report []byte, now time.Time) (string, error) {
	var state string
	err := s.db.QueryRowContext(ctx, `UPDATE nodes SET heartbeat_at = ?, report = ?
		WHERE id = ? AND epoch = ? AND state != '`+NodeFenced+`' RETURNING state`, now.UnixNano(), report, id, epoch).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrFenced
	}
	if err != nil {
		return "", fmt.Errorf("heartbeat of node %s: %w", id, err)
	}
	return state, nil
}

// FenceStale revokes the lease of every node not fenced whose last
// heartbeat is before cutoff, and returns their records as fenced. Each
// node is fenced by one caller only, however many call at once.
func (s *Store) FenceStale(ctx context.Context, cutoff time.Time) ([]Node, error) {
	var fenced []Node
	err := s.write(ctx, func(r runner) (evs []api.Event, err error) {
		fenced, err = queryNodes(ctx, r, "fence stale nodes", `UPDATE nodes SET state = '`+NodeFenced+`', epoch = epoch + 1
			WHERE state != '`+NodeFenced+`' AND heartbeat_at < ? RETURNING `+nodeColumns, cutoff.UnixNano())
		for _, n := range fenced {
			evs = append(evs, api.Event{Kind: api.EventNodeFenced, Node: n.ID, State: n.State, Reason: "its lease lapsed"})
		}
		return evs, err
	})
	return fenced, err
}

// ErrNodeState is SetNodeState's answer for a node in none of the states
// the move is from.
var ErrNodeState = errors.New("not in a state the move is from")

// SetNodeState moves node to state to from one of states from (any when
// empty) and returns its record; an error wrapping ErrNodeState, which
// names its state, when it is in none of them, ErrNotFound when there is
// no such node.
func (s *Store) SetNodeState(ctx context.Context, id string, from []string, to string) (Node, error) {
	var f filter
	f.add("id = ?", id)
	f.in("state", from)
	q := `UPDATE nodes SET state = ? WHERE ` + strings.Join(f.conds, " AND ") + ` RETURNING ` + nodeColumns
	var rec Node
	err := s.write(ctx, func(r runner) (_ []api.Event, err error) {
		rec, err = scanNode(r.QueryRowContext(ctx, q, append([]any{to}, f.args...)...))
		return []api.Event{{Kind: api.EventNodeState, Node: rec.ID, State: rec.State}}, err
	})
	if errors.Is(err, sql.ErrNoRows) {
		cur, gerr := s.GetNode(ctx, id)
		if gerr != nil {
			return Node{}, gerr
		}
		return Node{}, fmt.Errorf("node %s is %s: %w", id, cur.State, ErrNodeState)
	}
	if err != nil {
		return Node{}, fmt.Errorf("set state of node %s: %w", id, err)
	}
	return rec, nil
}

// GetNode returns node id's record, or ErrNotFound.
func (s *Store) GetNode(ctx context.Context, id string) (Node, error) {
	rec, err := scanNode(s.db.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Node{}, ErrNotFound
	}
	if err != nil {
		return Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return rec, nil
}

// ListNodes returns every node's record, by ID.
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	return queryNodes(ctx, s.db, "list nodes", `SELECT `+nodeColumns+` FROM nodes ORDER BY id`)
}

func queryNodes(ctx context.Context, r runner, op, query string, args ...any) ([]Node, error) {
	rows, err := r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

func scanNode(row scanner) (Node, error) {
	var n Node
	var labels string
	var beat, created int64
	if err := row.Scan(&n.ID, &n.Addr, &n.Region, &n.Cluster, &labels, &n.State, &n.Epoch, &n.Report, &beat, &created); err != nil {
		return Node{}, err
	}
	if err := json.Unmarshal([]byte(labels), &n.Labels); err != nil {
		return Node{}, fmt.Errorf("decode labels of node %s: %w", n.ID, err)
	}
	n.HeartbeatAt, n.CreatedAt = fromNanos(beat), fromNanos(created)
	return n, nil
}
