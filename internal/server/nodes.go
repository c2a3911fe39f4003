package server

import (
	"net/http"
	"path"

	"warren/api"
)

// listNodes answers GET /v1/nodes: the fleet's nodes.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Fleet == nil {
		return writeJSON(w, http.StatusOK, api.FleetNodeList{Nodes: []api.FleetNode{}})
	}
	nodes, err := s.opts.Fleet.Nodes(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.FleetNodeList{Nodes: nodes})
}

// nodeAction answers POST /v1/nodes/{id}/cordon, .../uncordon and
// .../drain.
func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s.opts.Fleet == nil {
		return api.Errorf(api.CodeNotFound, "node %s not found: this warren is a single machine, not a fleet", id)
	}
	n, err := s.opts.Fleet.NodeAction(r.Context(), id, path.Base(r.URL.Path))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, n)
}
