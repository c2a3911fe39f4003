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
	"warren/internal/ident"
)

// Secrets are tenants' credentials for egress rules (api.Secret). The
// store keeps each one's current value sealed, as bytes package secrets
// made, and never sees a value in the clear: a copy of the database
// reveals nothing without the key.

// SealedSecret is a secret's current value as stored.
type SealedSecret struct {
	ID      string
	Name    string
	Version int
	Sealed  []byte
}

// SealFunc seals a value for the secret with this ID at this version:
// what the store keeps of it.
type SealFunc func(id string, version int) ([]byte, error)

// errSecretRace is a put that lost a race with another put of the same
// secret; PutSecret tries again.
var errSecretRace = errors.New("the secret changed while it was being set")

// PutSecret creates tenant's secret name (already in its stored form, see
// api.SecretName), version 1, or gives it the next version, sealed by
// seal. meta replaces the secret's metadata unless it is nil. created
// says which it was. A tenant holds at most api.MaxSecrets secrets.
func (s *Store) PutSecret(ctx context.Context, tenant, name string, meta map[string]string, seal SealFunc) (_ api.Secret, created bool, err error) {
	for range 5 {
		sec, created, err := s.putSecret(ctx, tenant, name, meta, seal)
		if !errors.Is(err, errSecretRace) {
			return sec, created, err
		}
	}
	return api.Secret{}, false, api.Errorf(api.CodeConflict, "secret %s is being set by others at once; try again", name)
}

func (s *Store) putSecret(ctx context.Context, tenant, name string, meta map[string]string, seal SealFunc) (api.Secret, bool, error) {
	now := time.Now().UTC()
	old, err := s.secret(ctx, tenant, name)
	switch {
	case errors.Is(err, ErrNotFound):
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM secrets WHERE tenant = ?`, tenant).Scan(&n); err != nil {
			return api.Secret{}, false, fmt.Errorf("count secrets: %w", err)
		}
		if n >= api.MaxSecrets {
			return api.Secret{}, false, api.Errorf(api.CodeTooMany, "tenant %s holds %d secrets, at most %d", tenant, n, api.MaxSecrets)
		}
		sec := api.Secret{ID: ident.New(api.SecretIDPrefix), Name: name, Version: 1, Metadata: orEmpty(meta), CreatedAt: now, UpdatedAt: now}
		sealed, err := seal(sec.ID, sec.Version)
		if err != nil {
			return api.Secret{}, false, err
		}
		metaJSON, _ := json.Marshal(sec.Metadata)
		_, err = s.db.ExecContext(ctx, `INSERT INTO secrets (id, tenant, name, version, sealed, metadata, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, sec.ID, tenant, name, sec.Version, sealed, string(metaJSON), now.UnixNano(), now.UnixNano())
		if isUniqueViolation(err) {
			return api.Secret{}, false, errSecretRace
		}
		if err != nil {
			return api.Secret{}, false, fmt.Errorf("insert secret: %w", err)
		}
		return sec, true, nil
	case err != nil:
		return api.Secret{}, false, err
	}
	sec := old
	sec.Version++
	sec.UpdatedAt = now
	if meta != nil {
		sec.Metadata = meta
	}
	sealed, err := seal(sec.ID, sec.Version)
	if err != nil {
		return api.Secret{}, false, err
	}
	metaJSON, _ := json.Marshal(sec.Metadata)
	res, err := s.db.ExecContext(ctx, `UPDATE secrets SET version = ?, sealed = ?, metadata = ?, updated_at = ?
		WHERE id = ? AND version = ?`, sec.Version, sealed, string(metaJSON), now.UnixNano(), sec.ID, old.Version)
	if err != nil {
		return api.Secret{}, false, fmt.Errorf("update secret: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return api.Secret{}, false, errSecretRace
	}
	return sec, false, nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

const secretColumns = `id, name, version, metadata, created_at, updated_at`

func scanSecret(row interface{ Scan(...any) error }) (api.Secret, error) {
	var sec api.Secret
	var meta string
	var created, updated int64
	if err := row.Scan(&sec.ID, &sec.Name, &sec.Version, &meta, &created, &updated); err != nil {
		return api.Secret{}, err
	}
	if err := json.Unmarshal([]byte(meta), &sec.Metadata); err != nil {
		return api.Secret{}, fmt.Errorf("secret %s's metadata: %w", sec.ID, err)
	}
	sec.CreatedAt, sec.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
	return sec, nil
}

// secretWhere is the condition that selects a tenant's secret by ID or name.
func secretWhere(ref string) string {
	if strings.HasPrefix(ref, api.SecretIDPrefix) {
		return `tenant = ? AND id = ?`
	}
	return `tenant = ? AND name = ?`
}

// secret is tenant's secret ref (an ID, or a name in its stored form).
func (s *Store) secret(ctx context.Context, tenant, ref string) (api.Secret, error) {
	sec, err := scanSecret(s.db.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE `+secretWhere(ref), tenant, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Secret{}, ErrNotFound
	}
	if err != nil {
		return api.Secret{}, fmt.Errorf("secret %s: %w", ref, err)
	}
	return sec, nil
}

// GetSecret returns tenant's secret ref (ID or stored name), without its
// value; ErrNotFound if it has none.
func (s *Store) GetSecret(ctx context.Context, tenant, ref string) (api.Secret, error) {
	return s.secret(ctx, tenant, ref)
}

// ListSecrets returns tenant's secrets in name order, without values.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]api.Secret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []api.Secret{}
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	return out, rows.Err()
}

// DeleteSecret deletes tenant's secret ref (ID or stored name) and every
// version of it; ErrNotFound if it has none.
func (s *Store) DeleteSecret(ctx context.Context, tenant, ref string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE `+secretWhere(ref), tenant, ref)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", ref, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return ErrNotFound
	}
	return nil
}

// SealedSecrets returns the current values of tenant's secrets of these
// names (stored forms), sealed; a name it has no secret of is absent.
func (s *Store) SealedSecrets(ctx context.Context, tenant string, names []string) (map[string]SealedSecret, error) {
	out := make(map[string]SealedSecret, len(names))
	for _, name := range names {
		var sec SealedSecret
		err := s.db.QueryRowContext(ctx, `SELECT id, name, version, sealed FROM secrets WHERE tenant = ? AND name = ?`, tenant, name).
			Scan(&sec.ID, &sec.Name, &sec.Version, &sec.Sealed)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", name, err)
		}
		out[name] = sec
	}
	return out, nil
}
