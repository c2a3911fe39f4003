package server

import (
	"math"
	"net/http"
	"regexp"
	"time"

	"warren/api"
)

// snapshotIDPattern is the form of every snapshot id; anything else cannot
// name one and is answered 404 without reaching the manager.
var snapshotIDPattern = regexp.MustCompile(`^sn-[a-z0-9]{1,40}$`)

// snapshotID returns the {id} of a snapshot route.
func snapshotID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !snapshotIDPattern.MatchString(id) {
		return "", api.Errorf(api.CodeNotFound, "snapshot %q not found", id)
	}
	return id, nil
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

func (s *Server) writeSnapshots(w http.ResponseWriter, r *http.Request, sandboxID string) error {
	list, err := s.sb.ListSnapshots(r.Context(), caller(r).Tenant, sandboxID)
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Snapshot{}
	}
	return writeJSON(w, http.StatusOK, struct {
		Snapshots []api.Snapshot `json:"snapshots"`
	}{list})
}

// getSnapshot answers GET /v1/snapshots/{id}.
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
	if err != nil {
		return err
	}
	sn, err := s.sb.GetSnapshot(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sn)
}

// deleteSnapshot answers DELETE /v1/snapshots/{id}.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := snapshotID(r)
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
	id, err := snapshotID(r)
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
