package server

import (
	"net/http"

	"warren/api"
)

// getQuota answers GET /v1/tenants/{tenant}/quota.
func (s *Server) getQuota(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.quotaTenant(r)
	if err != nil {
		return err
	}
	q, err := s.opts.Quotas.Quota(r.Context(), tenant)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, q)
}

// setQuota answers PUT /v1/tenants/{tenant}/quota: the tenant's quota,
// whole, replacing the one before.
func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) error {
	tenant, err := s.quotaTenant(r)
	if err != nil {
		return err
	}
	var q api.Quota
	if err := s.decodeJSON(w, r, &q, false); err != nil {
		return err
	}
	if q.Sandboxes < 0 || q.CPUs < 0 || q.MemoryMB < 0 || q.DiskMB < 0 || q.Snapshots < 0 || q.SnapshotBytes < 0 || q.CreatesPerMinute < 0 {
		return api.Errorf(api.CodeBadRequest, "a quota is 0 (no bound) or more, got %+v", q)
	}
	if err := s.opts.Quotas.SetQuota(r.Context(), tenant, q); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, q)
}

// quotaTenant is the tenant a quota route names.
func (s *Server) quotaTenant(r *http.Request) (string, error) {
	tenant := r.PathValue("tenant")
	if s.opts.Quotas == nil {
		return "", api.Errorf(api.CodeNotFound, "this server keeps no quotas")
	}
	if !tenantName.MatchString(tenant) || tenant == api.AdminTenant {
		return "", api.Errorf(api.CodeBadRequest, "no tenant can be called %q", tenant)
	}
	return tenant, nil
}
