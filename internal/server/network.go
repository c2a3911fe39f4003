package server

import (
	"net/http"

	"warren/api"
)

// getNetwork answers GET /v1/sandboxes/{id}/network: the sandbox's egress
// policy and what it refused.
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	st, err := s.sb.Network(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

// setNetwork answers PUT /v1/sandboxes/{id}/network: the policy is replaced
// whole, and applies to new connections and DNS queries at once.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var p api.NetworkPolicy
	if err := s.decodeJSON(w, r, &p, false); err != nil {
		return err
	}
	st, err := s.sb.SetNetwork(r.Context(), caller(r).Tenant, id, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}
