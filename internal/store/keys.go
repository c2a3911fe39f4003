package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/internal/atomicfile"
	"warren/internal/listing"
)

// keyPrefix starts every API key, so that a leaked key is recognizable
// (secret scanners, logs).
const keyPrefix = "wk_"

// keyEncoding writes keys and key IDs in lower-case base32 without padding.
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Key is an API key's record. The key itself is never stored, only its
// SHA-256: whoever reads the database cannot use the keys in it.
type Key struct {
	// ID names the key in logs and listings; it is not secret.
	ID     string
	Tenant string
	// Admin keys may also call the node's admin routes (template builds).
	Admin bool
	// Scope is "" for a key of its tenant's whole API, or what alone the
	// key may do (api.KeyScopeMetrics).
	Scope     string
	CreatedAt time.Time
}

// CreateKey makes a new API key of k's tenant, admin flag and scope (its
// ID and time are the store's) and returns it. It is shown only now: the
// store keeps only its hash.
func (s *Store) CreateKey(ctx context.Context, k Key) (string, error) {
	if k.Tenant == "" {
		return "", errors.New("create key: empty tenant")
	}
	key := keyPrefix + randomString(32)
	hash := sha256.Sum256([]byte(key))
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (id, hash, tenant, admin, scope, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		"key-"+randomString(10), hash[:], k.Tenant, k.Admin, k.Scope, time.Now().UnixNano())
	if err != nil {
		return "", fmt.Errorf("create key: %w", err)
	}
	return key, nil
}

// LookupKey returns the record of key, or ErrNotFound when the store does
// not know it. The lookup is by hash, so its timing tells nothing about how
// close a guess was.
func (s *Store) LookupKey(ctx context.Context, key string) (Key, error) {
	hash := sha256.Sum256([]byte(key))
	if k, ok := s.keys.get(hash); ok {
		return k, nil
	}
	gen := s.keys.generation()
	var k Key
	var created int64
	err := s.db.QueryRowContext(ctx,
		`SELECT id, tenant, admin, scope, created_at FROM api_keys WHERE hash = ?`, hash[:]).
		Scan(&k.ID, &k.Tenant, &k.Admin, &k.Scope, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("lookup key: %w", err)
	}
	k.CreatedAt = fromNanos(created)
	s.keys.put(hash, k, gen)
	return k, nil
}

// ListKeys returns a page of the keys' records, oldest first.
func (s *Store) ListKeys(ctx context.Context, page listing.Page) ([]Key, error) {
	q, args := filter{}.query(`SELECT id, tenant, admin, scope, created_at FROM api_keys`, page)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var k Key
		var created int64
		if err := rows.Scan(&k.ID, &k.Tenant, &k.Admin, &k.Scope, &created); err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		k.CreatedAt = fromNanos(created)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// DeleteKey revokes the key named id: from now on it authenticates
// nothing, and the revocation count moves on (Revocations). ErrNotFound
// when there is no such key.
func (s *Store) DeleteKey(ctx context.Context, id string) error {
	err := s.revoke(ctx, func(r runner) error {
		res, err := r.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	// After the commit: a lookup that read the key before it cannot put
	// it back (keyCache.gen).
	s.keys.clear()
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete key: %w", err)
	}
	return err
}

// MissingKeys returns those of the key IDs ids that name no key (any
// more): the revoked ones. It reads the database, never the cache.
func (s *Store) MissingKeys(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var f filter
	f.in("id", ids)
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM api_keys WHERE `+f.conds[0], f.args...)
	if err != nil {
		return nil, fmt.Errorf("missing keys: %w", err)
	}
	defer rows.Close()
	known := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("missing keys: %w", err)
		}
		known[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("missing keys: %w", err)
	}
	var out []string
	for _, id := range ids {
		if !known[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// RotateAgentTokens gives every sandbox of tenant that has an agent token
// a new one (32 random bytes in hex, made by the database as the
// migration that added them made them), moves the revocation count on,
// and returns the sandboxes' IDs. The old tokens open nothing from the
// next request on.
func (s *Store) RotateAgentTokens(ctx context.Context, tenant string) ([]string, error) {
	token := `lower(hex(randomblob(32)))`
	if s.db.postgres {
		token = `encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex')`
	}
	var ids []string
	err := s.revoke(ctx, func(r runner) error {
		rows, err := r.QueryContext(ctx, `UPDATE sandboxes SET agent_token = `+token+`
			WHERE tenant = ? AND agent_token != '' RETURNING id`, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("rotate agent tokens: %w", err)
	}
	return ids, nil
}

// Revocations is the revocation count: it moves on with every DeleteKey
// and RotateAgentTokens, of any process on the database, so a process
// that holds what a credential opened learns to check them again.
func (s *Store) Revocations(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT n FROM revocations WHERE id = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("revocations: %w", err)
	}
	return n, nil
}

// revoke runs f and moves the revocation count on, in one transaction.
func (s *Store) revoke(ctx context.Context, f func(r runner) error) error {
	tx, err := s.db.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	r := txRunner{tx: tx, d: s.db}
	if err := f(r); err != nil {
		return err
	}
	if _, err := r.ExecContext(ctx, `UPDATE revocations SET n = n + 1 WHERE id = 1`); err != nil {
		return err
	}
	return tx.Commit()
}

// EnsureAdminKey returns the admin key kept in the file at path. When the
// file is missing, or holds a key that is not a known admin key, it creates
// a new admin key for tenant api.AdminTenant, writes it to path (mode 0600,
// atomically: a reader sees the old file or the new one) and reports
// created. Calling it again returns the same key.
func (s *Store) EnsureAdminKey(ctx context.Context, path string) (key string, created bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		old := strings.TrimSpace(string(b))
		k, err := s.LookupKey(ctx, old)
		if err == nil && k.Admin {
			return old, false, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", false, fmt.Errorf("ensure admin key: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	key, err = s.CreateKey(ctx, Key{Tenant: api.AdminTenant, Admin: true})
	if err != nil {
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	if err := atomicfile.Write(path, []byte(key+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	return key, true, nil
}

// randomString returns n random bytes in keyEncoding. crypto/rand.Read
// never fails (it aborts the program if the kernel cannot supply entropy).
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return keyEncoding.EncodeToString(b)
}

// keyCache keeps the keys a SQLite store found, so that authenticating a
// request does not query the database each time (a query after the
// database sat idle for a millisecond takes 80 µs here). Only SQLite
// keeps one: its database is the one daemon's, which holds the data
// directory's lock, so a key deleted through the store leaves the cache
// at once and authenticates nothing from the next request on. Entries
// also expire after keyCacheTTL, which bounds what another process
// writing the same file could leave behind. PostgreSQL is shared by the
// fleet's replicas, any of which may delete a key: every lookup there
// queries. Unknown keys are never kept, so guesses cannot fill it.
type keyCache struct {
	mu   sync.Mutex
	keys map[[sha256.Size]byte]cachedKey
	// gen counts the clears: a lookup that read the database before a
	// delete must not put back what the delete removed.
	gen uint64
}

type cachedKey struct {
	key     Key
	expires time.Time
}

const (
	keyCacheTTL  = time.Second
	keyCacheSize = 4096
)

func newKeyCache() *keyCache {
	return &keyCache{keys: make(map[[sha256.Size]byte]cachedKey)}
}

// get returns a live entry for hash. A nil cache has none.
func (c *keyCache) get(hash [sha256.Size]byte) (Key, bool) {
	if c == nil {
		return Key{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.keys[hash]
	if !ok || time.Now().After(e.expires) {
		return Key{}, false
	}
	return e.key, true
}

// generation is the count of clears, read before a lookup queries.
func (c *keyCache) generation() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps k, read from the database at generation gen, unless a clear
// came since. A full cache starts over.
func (c *keyCache) put(hash [sha256.Size]byte, k Key, gen uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.keys) >= keyCacheSize {
		clear(c.keys)
	}
	c.keys[hash] = cachedKey{key: k, expires: time.Now().Add(keyCacheTTL)}
}

// clear drops every entry: a key was deleted.
func (c *keyCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.keys)
	c.gen++
}
