package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RequestsKept is how long a request's idempotency key is kept: a retry
// after it runs the request again.
const RequestsKept = 24 * time.Hour

// Request is what the store keeps of a request made with an idempotency
// key: which request it was (a digest of its method, path and body: the
// same key with another request is refused) and, once it has one, its
// answer, which a retry gets instead of a second effect.
type Request struct {
	Tenant, Key string
	// Request identifies the request the key was first used with.
	Request string
	// Status is the answer's HTTP status; 0 while the request runs.
	Status    int
	Answer    []byte
	CreatedAt time.Time
}

// ClaimRequest records that tenant's request req is running under key,
// and returns true; or returns the record of the request that already
// has the key, and false. Whoever gets true runs the request, and only
// they: across every server on the database.
func (s *Store) ClaimRequest(ctx context.Context, tenant, key, req string, now time.Time) (Request, bool, error) {
	for {
		res, err := s.db.ExecContext(ctx, `INSERT INTO requests (tenant, key, request, status, created_at)
			VALUES (?, ?, ?, 0, ?) ON CONFLICT (tenant, key) DO NOTHING`, tenant, key, req, now.UnixNano())
		if err != nil {
			return Request{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return Request{}, false, fmt.Errorf("claim idempotency key: %w", err)
		} else if n == 1 {
			return Request{Tenant: tenant, Key: key, Request: req, CreatedAt: fromNanos(now.UnixNano())}, true, nil
		}
		r, err := s.GetRequest(ctx, tenant, key)
		if !errors.Is(err, ErrNotFound) {
			return r, false, err
		}
		// Released between the insert and the read: claim it again.
	}
}

// GetRequest returns tenant's request under key, or ErrNotFound.
func (s *Store) GetRequest(ctx context.Context, tenant, key string) (Request, error) {
	r := Request{Tenant: tenant, Key: key}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT request, status, answer, created_at FROM requests WHERE tenant = ? AND key = ?`,
		tenant, key).Scan(&r.Request, &r.Status, &r.Answer, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Request{}, ErrNotFound
	}
	if err != nil {
		return Request{}, fmt.Errorf("get idempotency key: %w", err)
	}
	r.CreatedAt = fromNanos(created)
	return r, nil
}

// AnswerRequest records the answer of the claimed request under key.
func (s *Store) AnswerRequest(ctx context.Context, tenant, key string, status int, answer []byte) error {
	if status == 0 {
		return errors.New("answer idempotency key: no status")
	}
	res, err := s.db.ExecContext(ctx, `UPDATE requests SET status = ?, answer = ? WHERE tenant = ? AND key = ? AND status = 0`,
		status, answer, tenant, key)
	if err != nil {
		return fmt.Errorf("answer idempotency key: %w", err)
	}
	return affectedOne(res, "answer idempotency key")
}

// ReleaseRequest forgets the claimed request under key, which had no
// effect (it failed before doing anything, or could not tell): a retry
// runs it again.
func (s *Store) ReleaseRequest(ctx context.Context, tenant, key string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM requests WHERE tenant = ? AND key = ? AND status = 0`, tenant, key)
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// PurgeRequests forgets the requests made before olderThan and returns
// how many.
func (s *Store) PurgeRequests(ctx context.Context, olderThan time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM requests WHERE created_at < ?`, olderThan.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
