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

// nodeMetrics answers GET /v1/nodes/{id}/metrics on node id itself, to
// which the fleet's front sends it: the node's own /metrics. A control
// replica answers its own /metrics.
func (s *Server) nodeMetrics(w http.ResponseWriter, r *http.Request) error {
	switch id := r.PathValue("id"); {
	case s.opts.Fleet == nil:
		return api.Errorf(api.CodeNotFound, "node %s not found: this warren is a single machine, whose metrics are at /metrics", id)
	case id != s.opts.NodeID:
		return api.Errorf(api.CodeNotFound, "node %s not found: this is node %s", id, s.opts.NodeID)
	}
	return s.metrics(w, r)
}
