package server

import (
	"math"
	"net/http"
	"regexp"
	"slices"
	"time"

	"warren/api"
)

// snapshotIDPattern is the form of every snapshot id.
var snapshotIDPattern = regexp.MustCompile(`^sn-[a-z0-9]{1,40}$`)

// snapshotRef returns the {id} of a snapshot route: a snapshot's ID, or
// the name of one of the caller's (api.CheckSnapshotName). Anything else
// cannot name one and is answered 404 without reaching the manager.
func snapshotRef(r *http.Request) (string, error) {
	ref := r.PathValue("id")
	if !snapshotIDPattern.MatchString(ref) && api.CheckSnapshotName(ref) != nil {
		return "", api.Errorf(api.CodeNotFound, "snapshot %q not found", ref)
	}
	return ref, nil
}

// snapshotID returns the ID of the snapshot the {id} of a snapshot route
// names: the ID itself, or the ID of the caller's snapshot of that name.
func (s *Server) snapshotID(r *http.Request) (string, error) {
	ref, err := snapshotRef(r)
	if err != nil || snapshotIDPattern.MatchString(ref) {
		return ref, err
	}
	sn, err := s.sb.GetSnapshot(r.Context(), caller(r).Tenant, ref)
	if err != nil {
		return "", err
	}
	return sn.ID, nil
}

// createSnapshot answers POST /v1/sandboxes/{id}/snapshots: 201 with the
// snapshot, pending unless the request asked to wait for it.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.CreateSnapshotRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		return err
	}
	if req.Name != "" {
		if err := api.CheckSnapshotName(req.Name); err != nil {
			return err
		}
	}
	sn, err := s.sb.Snapshot(r.Context(), caller(r).Tenant, id, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sn)
}

// listSandboxSnapshots answers GET /v1/sandboxes/{id}/snapshots.
func (s *Server) listSandboxSnapshots(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	return s.writeSnapshots(w, r, id)
}

// listSnapshots answers GET /v1/snapshots.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	return s.writeSnapshots(w, r, "")
}

// writeSnapshots answers a page of the caller's snapshots, of one sandbox
// when sandboxID is not "", of one name with ?name=.
func (s *Server) writeSnapshots(w http.ResponseWriter, r *http.Request, sandboxID string) error {
	name := r.URL.Query().Get("name")
	scope := sandboxID
	if name != "" {
		// A list by name is one page: no page token continues it, nor
		// another list's.
		scope += " named " + name
	}
	lr, err := parseList(r, "snapshots", scope, api.DefaultListLimit, api.MaxListLimit, snapshotStates)
	if err != nil {
		return err
	}
	var list []api.Snapshot
	if name != "" {
		list, err = s.namedSnapshot(r, name, sandboxID, lr.states)
	} else {
		list, err = s.sb.ListSnapshots(r.Context(), caller(r).Tenant, sandboxID, lr.states, lr.storePage())
	}
	if err != nil {
		return err
	}
	var out api.SnapshotList
	out.Snapshots, out.NextPageToken = page(lr, list, func(sn api.Snapshot) pageToken { return byCreation(sn.CreatedAt, sn.ID) })
	return writeJSON(w, http.StatusOK, out)
}

// namedSnapshot lists the caller's snapshot named name if it is sandbox
// sandboxID's (any sandbox's when "") and in one of states (any when
// empty): names are unique, so one snapshot at most.
func (s *Server) namedSnapshot(r *http.Request, name, sandboxID string, states []string) ([]api.Snapshot, error) {
	if err := api.CheckSnapshotName(name); err != nil {
		return nil, err
	}
	sn, err := s.sb.GetSnapshot(r.Context(), caller(r).Tenant, name)
	switch {
	case api.IsCode(err, api.CodeNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case sandboxID != "" && sn.SandboxID != sandboxID, len(states) > 0 && !slices.Contains(states, sn.State):
		return nil, nil
	}
	return []api.Snapshot{sn}, nil
}

// snapshotLineage answers GET /v1/snapshots/{id}/lineage: a page of the
// snapshot's ancestors, nearest first.
func (s *Server) snapshotLineage(w http.ResponseWriter, r *http.Request) error {
	id, err := s.snapshotID(r)
	if err != nil {
		return err
	}
	lr, err := parseList(r, "lineage", id, api.DefaultLineageLimit, api.MaxListLimit, nil)
	if err != nil {
		return err
	}
	ancestors, more, err := s.sb.SnapshotLineage(r.Context(), caller(r).Tenant, id, lr.afterKey(), lr.limit)
	if err != nil {
		return err
	}
	out := api.Lineage{Ancestors: ancestors}
	if out.Ancestors == nil {
		out.Ancestors = []string{}
	}
	if more {
		out.NextPageToken = lr.next(pageToken{Key: ancestors[len(ancestors)-1]})
	}
	return writeJSON(w, http.StatusOK, out)
}

// getSnapshot answers GET /v1/snapshots/{id}.
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	ref, err := snapshotRef(r)
	if err != nil {
		return err
	}
	sn, err := s.sb.GetSnapshot(r.Context(), caller(r).Tenant, ref)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sn)
}

// deleteSnapshot answers DELETE /v1/snapshots/{id}.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := s.snapshotID(r)
	if err != nil {
		return err
	}
	if err := s.sb.DeleteSnapshot(r.Context(), caller(r).Tenant, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// restoreSnapshot answers POST /v1/snapshots/{id}/restore with the new
// sandboxes, running.
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := s.snapshotID(r)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		return err
	}
	sbs, err := s.sb.Restore(r.Context(), caller(r).Tenant, id, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.RestoreResult{Sandboxes: sbs})
}

// forkSandbox answers POST /v1/sandboxes/{id}/fork.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.ForkRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		return err
	}
	res, err := s.sb.Fork(r.Context(), caller(r).Tenant, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, res)
}

// gcSnapshots answers POST /v1/gc (admin): collect unreferenced snapshot
// layers and chunks now.
func (s *Server) gcSnapshots(w http.ResponseWriter, r *http.Request) error {
	var req api.GCRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		return err
	}
	grace := time.Duration(-1)
	if req.GraceSeconds != nil {
		if *req.GraceSeconds < 0 || *req.GraceSeconds > math.MaxInt64/int64(time.Second) {
			return api.Errorf(api.CodeBadRequest, "grace_seconds must not be negative or absurd, got %d", *req.GraceSeconds)
		}
		grace = time.Duration(*req.GraceSeconds) * time.Second
	}
	res, err := s.sb.GCSnapshots(r.Context(), grace)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}
