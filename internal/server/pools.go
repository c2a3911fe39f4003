package server

import (
	"net/http"

	"warren/api"
)

// listPools answers GET /v1/pools.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	pools, err := s.pools()
	if err != nil {
		return err
	}
	list, err := pools.Pools(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.PoolList{Pools: list})
}

// setPool answers PUT /v1/pools/{template}: the pool of that template and
// the body's runtime, whole, replacing the one before.
func (s *Server) setPool(w http.ResponseWriter, r *http.Request) error {
	pools, err := s.pools()
	if err != nil {
		return err
	}
	var spec api.PoolSpec
	if err := s.decodeJSON(w, r, &spec, false); err != nil {
		return err
	}
	p, err := pools.SetPool(r.Context(), r.PathValue("template"), spec)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

// deletePool answers DELETE /v1/pools/{template}?runtime=R.
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) error {
	pools, err := s.pools()
	if err != nil {
		return err
	}
	if err := pools.DeletePool(r.Context(), r.PathValue("template"), r.URL.Query().Get("runtime")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pools() (Pools, error) {
	if s.opts.Pools == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server keeps no warm pools")
	}
	return s.opts.Pools, nil
}
