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

// TemplateVersion is one build of a tenant's template (docs/TEMPLATES.md):
// immutable once ready. Its disk is Snapshot, a snapshot of the tenant's
// like any other, which new sandboxes of the version are restored from.
//
// States: building (Node is making it), then ready or failed. Only a
// building version changes, once.
type TemplateVersion struct {
	ID      string // tv-…
	Tenant  string
	Name    string
	Version int64 // 1, 2, … per tenant and name
	State   string
	Error   string
	// Source says what it was made from: "snapshot sn-…", "image REF",
	// "spec".
	Source string
	// Digest names its content: the build's last step key, or the image's
	// manifest digest, or the snapshot's ID.
	Digest   string
	Snapshot string
	// Config is the JSON of its metadata (api.TemplateConfig).
	Config    string
	Node      string
	CreatedAt time.Time
	BuiltAt   time.Time // zero until ready
	// Published: the admin's version every tenant may start from.
	Published bool
}

// TemplateConfig is t's Config, decoded.
func (t TemplateVersion) TemplateConfig() (api.TemplateConfig, error) {
	var cfg api.TemplateConfig
	if t.Config == "" {
		return cfg, nil
	}
	if err := json.Unmarshal([]byte(t.Config), &cfg); err != nil {
		return cfg, fmt.Errorf("template %s@%d: config: %w", t.Name, t.Version, err)
	}
	return cfg, nil
}

// Template version states.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

const templateColumns = `id, tenant, name, version, state, error, source, digest, snapshot, config, node, created_at, built_at, published`

func scanTemplate(row interface{ Scan(...any) error }) (TemplateVersion, error) {
	var t TemplateVersion
	var created int64
	var built sql.NullInt64
	err := row.Scan(&t.ID, &t.Tenant, &t.Name, &t.Version, &t.State, &t.Error, &t.Source, &t.Digest,
		&t.Snapshot, &t.Config, &t.Node, &created, &built, &t.Published)
	if err != nil {
		return TemplateVersion{}, err
	}
	t.CreatedAt = fromNanos(created)
	if built.Valid {
		t.BuiltAt = fromNanos(built.Int64)
	}
	return t, nil
}

// InsertTemplateVersion records t, building, as the next version of its
// tenant's name, and sets t.Version and t.CreatedAt.
func (s *Store) InsertTemplateVersion(ctx context.Context, t *TemplateVersion) error {
	if t.ID == "" || t.Tenant == "" || t.Name == "" {
		return errors.New("insert template version: id, tenant and name are required")
	}
	t.State, t.CreatedAt = TemplateBuilding, fromNanos(time.Now().UnixNano())
	// Two builds of one name may race for a number: the loser takes the
	// next.
	for range 8 {
		err := s.write(ctx, func(r runner) ([]api.Event, error) {
			if err := r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM templates WHERE tenant = ? AND name = ?`,
				t.Tenant, t.Name).Scan(&t.Version); err != nil {
				return nil, err
			}
			_, err := r.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)`,
				t.ID, t.Tenant, t.Name, t.Version, t.State, t.Error, t.Source, t.Digest, t.Snapshot, t.Config, t.Node,
				t.CreatedAt.UnixNano(), false)
			return nil, err
		})
		if err == nil {
			return nil
		}
		if !isUniqueViolation(err) {
			return fmt.Errorf("insert template version %s: %w", t.Name, err)
		}
	}
	return fmt.Errorf("insert template version %s: too many concurrent builds of it", t.Name)
}

// FinishTemplateVersion moves a building version to ready (err nil, with
// its snapshot, digest and config) or failed (with err's text). A version
// that is not building is an error wrapping ErrTransition.
func (s *Store) FinishTemplateVersion(ctx context.Context, t *TemplateVersion, err error) error {
	state, msg := TemplateReady, ""
	var built sql.NullInt64
	if err != nil {
		state, msg = TemplateFailed, err.Error()
	} else {
		t.BuiltAt = fromNanos(time.Now().UnixNano())
		built = sql.NullInt64{Int64: t.BuiltAt.UnixNano(), Valid: true}
	}
	res, xerr := s.db.ExecContext(ctx, `UPDATE templates SET state = ?, error = ?, snapshot = ?, digest = ?, config = ?, built_at = ?
		WHERE id = ? AND state = ?`, state, msg, t.Snapshot, t.Digest, t.Config, built, t.ID, TemplateBuilding)
	if xerr != nil {
		return fmt.Errorf("finish template version %s: %w", t.ID, xerr)
	}
	if n, xerr := res.RowsAffected(); xerr != nil || n != 1 {
		return fmt.Errorf("finish template version %s: %w", t.ID, ErrTransition)
	}
	t.State, t.Error = state, msg
	return nil
}

// TemplateVersion returns tenant's version of name: the newest ready one
// when version is 0. ErrNotFound when there is none.
func (s *Store) TemplateVersion(ctx context.Context, tenant, name string, version int64) (TemplateVersion, error) {
	return s.templateVersion(ctx, tenant, name, version, false)
}

// templateVersion is TemplateVersion; with anyState, version 0 is the
// newest whatever its state.
func (s *Store) templateVersion(ctx context.Context, tenant, name string, version int64, anyState bool) (TemplateVersion, error) {
	q := `SELECT ` + templateColumns + ` FROM templates WHERE tenant = ? AND name = ? AND version = ?`
	args := []any{tenant, name, version}
	if version == 0 {
		q = `SELECT ` + templateColumns + ` FROM templates WHERE tenant = ? AND name = ?`
		args = []any{tenant, name}
		if !anyState {
			q += ` AND state = ?`
			args = append(args, TemplateReady)
		}
		q += ` ORDER BY version DESC LIMIT 1`
	}
	t, err := scanTemplate(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return TemplateVersion{}, ErrNotFound
	}
	if err != nil {
		return TemplateVersion{}, fmt.Errorf("template %s: %w", name, err)
	}
	return t, nil
}

// SeenTemplate returns the version of name that tenant sees: its own
// (version; or when version is 0 its newest ready one, or its newest
// whatever its state with anyState), else the one the admin published
// under name (PublishedTemplate). ErrNotFound when there is neither.
func (s *Store) SeenTemplate(ctx context.Context, tenant, name string, version int64, anyState bool) (TemplateVersion, error) {
	t, err := s.templateVersion(ctx, tenant, name, version, anyState)
	if errors.Is(err, ErrNotFound) && tenant != api.AdminTenant {
		return s.PublishedTemplate(ctx, api.AdminTenant, name, version)
	}
	return t, err
}

// TemplateVersions lists tenant's versions: of name, newest first, when
// name is set; else the newest version of each name (ready or not), by
// name.
func (s *Store) TemplateVersions(ctx context.Context, tenant, name string) ([]TemplateVersion, error) {
	q := `SELECT ` + templateColumns + ` FROM templates WHERE tenant = ? AND name = ? ORDER BY version DESC`
	args := []any{tenant, name}
	if name == "" {
		q = `SELECT ` + templateColumns + ` FROM templates t WHERE tenant = ?
			AND version = (SELECT MAX(version) FROM templates u WHERE u.tenant = t.tenant AND u.name = t.name)
			ORDER BY name`
		args = []any{tenant}
	}
	return s.queryTemplates(ctx, "list templates", q, args...)
}

// queryTemplates runs a query selecting templateColumns; op names it in
// errors.
func (s *Store) queryTemplates(ctx context.Context, op, q string, args ...any) ([]TemplateVersion, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	var out []TemplateVersion
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// DeleteTemplateVersion forgets version id of tenant's. ErrNotFound when
// there is none.
func (s *Store) DeleteTemplateVersion(ctx context.Context, tenant, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE tenant = ? AND id = ?`, tenant, id)
	if err != nil {
		return fmt.Errorf("delete template version %s: %w", id, err)
	}
	return affectedOne(res, "delete template version "+id)
}

// TemplateSnapshotUse says what keeps snapshot id: a template version
// whose disk it is, or a build step cached on it ("" when nothing does).
func (s *Store) TemplateSnapshotUse(ctx context.Context, id string) (string, error) {
	var name string
	var version int64
	err := s.db.QueryRowContext(ctx, `SELECT name, version FROM templates WHERE snapshot = ? AND state <> ? LIMIT 1`,
		id, TemplateFailed).Scan(&name, &version)
	switch {
	case err == nil:
		return fmt.Sprintf("template %s@%d", name, version), nil
	case !errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("template use of %s: %w", id, err)
	}
	err = s.db.QueryRowContext(ctx, `SELECT snapshot FROM template_steps WHERE snapshot = ? LIMIT 1`, id).Scan(&name)
	switch {
	case err == nil:
		return "a cached template build step", nil
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	}
	return "", fmt.Errorf("template use of %s: %w", id, err)
}

// TemplateStep returns the snapshot tenant's build cached for the step
// key; ErrNotFound when none is.
func (s *Store) TemplateStep(ctx context.Context, tenant, key string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT snapshot FROM template_steps WHERE tenant = ? AND key = ?`, tenant, key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("template step: %w", err)
	}
	return id, nil
}

// PutTemplateStep caches snapshot as tenant's result of the step key,
// replacing what was cached for it.
func (s *Store) PutTemplateStep(ctx context.Context, tenant, key, snapshot string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO template_steps (tenant, key, snapshot, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant, key) DO UPDATE SET snapshot = excluded.snapshot, created_at = excluded.created_at`,
		tenant, key, snapshot, time.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("cache template step: %w", err)
	}
	return nil
}

// DropTemplateStep forgets the step cached on snapshot (one that is gone).
func (s *Store) DropTemplateStep(ctx context.Context, snapshot string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM template_steps WHERE snapshot = ?`, snapshot); err != nil {
		return fmt.Errorf("forget template step: %w", err)
	}
	return nil
}

// TemplateInUse returns a live sandbox of tenant's that started from
// version ref (NAME@VERSION), "" when none did.
func (s *Store) TemplateInUse(ctx context.Context, tenant, ref string) (string, error) {
	var f filter
	f.add("tenant = ?", tenant)
	f.add("template_version = ?", ref)
	f.in("state", Live)
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT id FROM sandboxes WHERE `+strings.Join(f.conds, " AND ")+` LIMIT 1`, f.args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("template %s in use: %w", ref, err)
	}
	return id, nil
}

// FailTemplateBuilds fails the versions node was building: a daemon that
// starts has none under way.
func (s *Store) FailTemplateBuilds(ctx context.Context, node string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE templates SET state = ?, error = ? WHERE node = ? AND state = ?`,
		TemplateFailed, "the node restarted during the build", node, TemplateBuilding)
	if err != nil {
		return fmt.Errorf("fail interrupted template builds: %w", err)
	}
	return nil
}

// PublishTemplateVersion publishes (or withdraws) tenant's ready version
// id: every tenant may then start from it by its name. ErrNotFound when
// tenant has no such version; ErrTransition when it is not ready.
func (s *Store) PublishTemplateVersion(ctx context.Context, tenant, id string, published bool) error {
	res, err := s.db.ExecContext(ctx, `UPDATE templates SET published = ? WHERE tenant = ? AND id = ? AND state = ?`,
		published, tenant, id, TemplateReady)
	if err != nil {
		return fmt.Errorf("publish template version %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("publish template version %s: %w", id, ErrTransition)
	}
	return nil
}

// PublishedTemplate returns the version of owner's template name that
// every tenant sees: the newest published when version is 0, else that
// one if published. ErrNotFound when there is none.
func (s *Store) PublishedTemplate(ctx context.Context, owner, name string, version int64) (TemplateVersion, error) {
	q := `SELECT ` + templateColumns + ` FROM templates WHERE tenant = ? AND name = ? AND published = ? AND state = ?`
	args := []any{owner, name, true, TemplateReady}
	if version != 0 {
		q += ` AND version = ?`
		args = append(args, version)
	}
	t, err := scanTemplate(s.db.QueryRowContext(ctx, q+` ORDER BY version DESC LIMIT 1`, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return TemplateVersion{}, ErrNotFound
	}
	if err != nil {
		return TemplateVersion{}, fmt.Errorf("published template %s: %w", name, err)
	}
	return t, nil
}

// PublishedTemplates lists owner's published templates: the newest
// published version of each name, by name.
func (s *Store) PublishedTemplates(ctx context.Context, owner string) ([]TemplateVersion, error) {
	return s.queryTemplates(ctx, "list published templates", `SELECT `+templateColumns+` FROM templates t WHERE tenant = ? AND published = ? AND state = ?
		AND version = (SELECT MAX(version) FROM templates u WHERE u.tenant = t.tenant AND u.name = t.name AND u.published = ? AND u.state = ?)
		ORDER BY name`, owner, true, TemplateReady, true, TemplateReady)
}
