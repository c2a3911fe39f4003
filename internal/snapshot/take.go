package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"warren/api"
	"warren/internal/ident"
	"warren/internal/store"
)

// Source is the sandbox a snapshot is taken of.
type Source struct {
	// Tenant owns the snapshot; never empty. Its layer's chunks are named
	// in the tenant's namespace, deduplicated only with its own.
	Tenant    string
	SandboxID string
	// Name names the snapshot ("" for none): valid (api.CheckSnapshotName),
	// and none of the tenant's other snapshots'.
	Name string
	// Scope is the disk saved: api.ScopeRoot or api.ScopeWorkspace.
	Scope string
	// Image is the sandbox's disk image of that scope.
	Image string
	// Origin is the snapshot that disk was restored from, "" if none.
	Origin string
	// Template names the template the sandbox started from. For the root
	// scope, TemplateImage and TemplateBuilt locate that build, for the
	// base layer; a workspace starts empty and has none.
	Template      string
	TemplateImage string
	TemplateBuilt time.Time
}

// Quiesce readies the sandbox's filesystem for a clone of its disk taken
// before resume is called (runtime.Instance.Quiesce, or Freeze for a final
// snapshot).
type Quiesce func(ctx context.Context) (resume func() error, err error)

// Take snapshots the sandbox: it records the snapshot, quiesces the
// sandbox's filesystem, clones its disk into the cache, resumes it, and
// returns the pending snapshot while the upload goes on in the background.
// A name another snapshot of the tenant has is api conflict, and nothing
// is taken.
func (e *Engine) Take(ctx context.Context, src Source, quiesce Quiesce) (store.Snapshot, error) {
	tStart := time.Now()
	if src.Tenant == "" {
		// Its chunks would be named plainly, beside the template base
		// layers', where every tenant's uploads could find them.
		return store.Snapshot{}, errors.New("take snapshot: no tenant")
	}
	if src.Scope == "" {
		src.Scope = api.ScopeRoot
	}
	parent, err := e.parentFor(ctx, src)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn := store.Snapshot{
		ID: ident.New("sn-"), Tenant: src.Tenant, Name: src.Name, SandboxID: src.SandboxID, Scope: src.Scope, Parent: parent,
		Template: src.Template, State: api.SnapshotPending, Node: e.cfg.Node,
	}
	if err := e.insertTaken(ctx, &sn); err != nil {
		return store.Snapshot{}, err
	}
	log := e.log.With("snapshot", sn.ID, "sandbox", src.SandboxID)
	// From here on a failure must be recorded, even if the caller has gone.
	ctx = context.WithoutCancel(ctx)
	fail := func(err error) (store.Snapshot, error) {
		sn.State, sn.Error = api.SnapshotFailed, err.Error()
		_, ferr := e.store.FailSnapshot(ctx, sn.ID, e.cfg.Node, sn.Error, 0)
		if errors.Is(ferr, store.ErrTransition) || errors.Is(ferr, store.ErrNotFound) {
			log.Warn("snapshot changed while it was taken: left as it is", "err", ferr)
		} else if ferr != nil {
			log.Error("record failed snapshot", "err", ferr)
		}
		return sn, err
	}
	t0 := time.Now()
	size, err := e.cloneQuiesced(ctx, src.Image, sn.ID, quiesce)
	if err != nil {
		return fail(fmt.Errorf("take snapshot: %w", err))
	}
	taken, err := e.store.SetSnapshotTaken(ctx, sn.ID, e.cfg.Node, time.Since(t0), size)
	if errors.Is(err, store.ErrTransition) || errors.Is(err, store.ErrNotFound) {
		// Deleted (or failed) by another writer while its disk was cloned:
		// its record is theirs now, and nothing is uploaded.
		log.Warn("snapshot changed while it was taken: not uploading it", "err", err)
		if errors.Is(err, store.ErrNotFound) {
			os.Remove(e.image(sn.ID))
		}
		return taken, fmt.Errorf("take snapshot: %w", err)
	}
	if err != nil {
		return fail(fmt.Errorf("take snapshot: %w", err))
	}
	sn = taken
	log.Info("snapshot taken", "parent", parent, "ack", sn.Ack, "took", time.Since(tStart), "record", t0.Sub(tStart))
	e.startUpload(sn.ID, sn.CreatedAt)
	return sn, nil
}

// insertTaken records sn, a tenant's snapshot being taken; a name another
// of the tenant's snapshots has is api conflict.
func (e *Engine) insertTaken(ctx context.Context, sn *store.Snapshot) error {
	var taken *store.NameTakenError
	if err := e.store.InsertSnapshot(ctx, sn); errors.As(err, &taken) {
		return api.Errorf(api.CodeConflict, "%v", taken)
	} else if err != nil {
		return fmt.Errorf("take snapshot: %w", err)
	}
	return nil
}

// cloneQuiesced clones image into the cache as id while the filesystem in
// it is quiesced, and returns the image's size. The clone gets its final
// name only once complete, so a crash never leaves a partial image under it.
func (e *Engine) cloneQuiesced(ctx context.Context, image, id string, quiesce Quiesce) (int64, error) {
	t0 := time.Now()
	resume, err := quiesce(ctx)
	if err != nil {
		return 0, err
	}
	tQuiet := time.Now()
	tmp := e.tempImage(id)
	err = e.pool.Clone(ctx, image, tmp)
	tCloned := time.Now()
	if rerr := resume(); rerr != nil && err == nil {
		err = rerr
	}
	e.log.Debug("snapshot clone timings", "snapshot", id, "quiesce", tQuiet.Sub(t0),
		"clone", tCloned.Sub(tQuiet), "resume", time.Since(tCloned))
	if err == nil {
		err = os.Rename(tmp, e.image(id))
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	st, err := os.Stat(e.image(id))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// parentFor picks the parent of a new snapshot of src: its previous
// snapshot of the same scope, else the snapshot that disk was restored from,
// else its template's base layer (recorded, and cloned into the cache, the
// first time) for a root disk, or none (a layer over an empty disk) for a
// workspace.
func (e *Engine) parentFor(ctx context.Context, src Source) (string, error) {
	prev, err := e.store.LatestSnapshot(ctx, src.SandboxID, src.Scope)
	if err == nil {
		return prev.ID, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("take snapshot: %w", err)
	}
	if src.Origin != "" {
		return src.Origin, nil
	}
	if src.Scope == api.ScopeWorkspace {
		return "", nil
	}
	if src.TemplateImage == "" {
		return "", fmt.Errorf("take snapshot: template %s is not on this node, and the sandbox's first snapshot needs it", src.Template)
	}
	return e.EnsureBase(ctx, src.Template, src.TemplateImage, src.TemplateBuilt)
}

// EnsureBase records the base layer of a template build and starts its
// upload, unless that was done before, and returns its ID. The manager calls
// it for every template when the node starts and after a build, so that a
// sandbox's first snapshot does not wait for its template's upload.
func (e *Engine) EnsureBase(ctx context.Context, template, image string, built time.Time) (string, error) {
	id := baseID(template, built)
	e.mu.Lock()
	defer e.mu.Unlock()
	sn, err := e.store.GetSnapshot(ctx, id)
	switch {
	case err == nil && sn.State != api.SnapshotFailed:
		return id, nil
	case err == nil: // failed before: try again, here
		if _, err := e.baseImage(ctx, id, image); err != nil {
			return "", fmt.Errorf("template base: %w", err)
		}
		if _, err := e.store.RetryBaseLayer(ctx, sn, e.cfg.Node); errors.Is(err, store.ErrTransition) {
			// Another node tried it again first: the upload is its.
			e.log.Info("template base layer retried elsewhere", "snapshot", id, "err", err)
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("template base: %w", err)
		}
	case errors.Is(err, store.ErrNotFound):
		size, err := e.baseImage(ctx, id, image)
		if err != nil {
			return "", fmt.Errorf("template base: %w", err)
		}
		sn = store.Snapshot{ID: id, Template: template, State: api.SnapshotPending, DiskBytes: size, Node: e.cfg.Node}
		if err := e.store.InsertSnapshot(ctx, &sn); err != nil {
			return "", fmt.Errorf("template base: %w", err)
		}
	default:
		return "", fmt.Errorf("template base: %w", err)
	}
	e.startUploadLocked(id, time.Now())
	return id, nil
}

// baseImage clones the template's image into the cache as base layer id,
// unless it is there already, and returns its size.
func (e *Engine) baseImage(ctx context.Context, id, image string) (int64, error) {
	if _, err := os.Stat(e.image(id)); err != nil {
		tmp := e.tempImage(id)
		if err := e.pool.Clone(ctx, image, tmp); err != nil {
			return 0, err
		}
		if err := os.Rename(tmp, e.image(id)); err != nil {
			os.Remove(tmp)
			return 0, err
		}
	}
	st, err := os.Stat(e.image(id))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// TakeLayer records a snapshot of an always-on disk, whose layer write
// stores in the blob store while the sandbox's filesystem is quiesced: the
// block server's snapshot, one manifest over the volume's base, which it
// names id and labels. write returns the layer's parent and the disk's
// size. The snapshot is durable once TakeLayer returns; nothing is cloned
// or uploaded after. A name is refused as Take refuses it.
func (e *Engine) TakeLayer(ctx context.Context, src Source, quiesce Quiesce,
	write func(ctx context.Context, id string, labels map[string]string) (string, int64, error)) (store.Snapshot, error) {
	tStart := time.Now()
	if src.Tenant == "" {
		return store.Snapshot{}, errors.New("take snapshot: no tenant")
	}
	sn := store.Snapshot{
		ID: ident.New("sn-"), Tenant: src.Tenant, Name: src.Name, SandboxID: src.SandboxID, Scope: api.ScopeRoot,
		Template: src.Template, State: api.SnapshotPending, Node: e.cfg.Node,
	}
	if err := e.insertTaken(ctx, &sn); err != nil {
		return store.Snapshot{}, err
	}
	ctx = context.WithoutCancel(ctx)
	t0 := time.Now()
	resume, err := quiesce(ctx)
	tQuiet, tWritten := time.Now(), time.Now()
	if err == nil {
		labels := map[string]string{
			"tenant": sn.Tenant, "sandbox": sn.SandboxID, "template": sn.Template, "scope": sn.Scope,
			"created_at": sn.CreatedAt.Format(time.RFC3339Nano),
		}
		sn.Parent, sn.DiskBytes, err = write(ctx, sn.ID, labels)
		tWritten = time.Now()
		err = errors.Join(err, resume())
	}
	var rec store.Snapshot
	var uerr error
	if err == nil {
		rec, uerr = e.store.MakeSnapshotDurable(ctx, sn.ID, e.cfg.Node, store.Durable{
			Parent: sn.Parent, DiskBytes: sn.DiskBytes, Ack: time.Since(t0)})
	} else {
		rec, uerr = e.store.FailSnapshot(ctx, sn.ID, e.cfg.Node, err.Error(), 0)
	}
	if uerr != nil {
		// Deleted meanwhile, or the store failed: the record is left as
		// it is.
		return sn, errors.Join(err, fmt.Errorf("take snapshot: %w", uerr))
	}
	sn = rec
	if err != nil {
		return sn, fmt.Errorf("take snapshot: %w", err)
	}
	e.log.Info("snapshot taken of an always-on disk", "snapshot", sn.ID, "sandbox", sn.SandboxID, "parent", sn.Parent, "ack", sn.Ack,
		"quiesce", tQuiet.Sub(t0), "write", tWritten.Sub(tQuiet), "record", time.Since(tWritten)+t0.Sub(tStart))
	return sn, nil
}
