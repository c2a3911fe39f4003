package server

import (
	"errors"
	"math"
	"net/http"
	"regexp"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// info answers GET /v1/info.
func (s *Server) info(w http.ResponseWriter, r *http.Request) error {
	k := caller(r)
	return writeJSON(w, http.StatusOK, s.node.Info(r.Context(), k.Tenant, k.Admin))
}

// createSandbox answers POST /v1/sandboxes. An empty body asks for every
// default.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSandboxRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		return err
	}
	sb, err := s.sb.Create(r.Context(), caller(r).Tenant, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sb)
}

// listSandboxes answers GET /v1/sandboxes.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	tenant, err := tenantScope(r)
	if err != nil {
		return err
	}
	lr, err := parseList(r, "sandboxes", "", api.DefaultListLimit, api.MaxListLimit, sandboxStates)
	if err != nil {
		return err
	}
	list, err := s.sb.List(r.Context(), tenant, lr.states, lr.storePage())
	if err != nil {
		return err
	}
	var out api.SandboxList
	out.Sandboxes, out.NextPageToken = page(lr, list, func(sb api.Sandbox) pageToken { return byCreation(sb.CreatedAt, sb.ID) })
	return writeJSON(w, http.StatusOK, out)
}

// getSandbox answers GET /v1/sandboxes/{id}.
func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.sb.Get(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

// getMetrics answers GET /v1/sandboxes/{id}/metrics.
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	m, err := s.sb.Metrics(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	return writeJSON(w, http.StatusOK, m)
}

// deleteSandbox answers DELETE /v1/sandboxes/{id}.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	tenant, err := tenantScope(r)
	if err != nil {
		return err
	}
	if err := s.sb.Delete(r.Context(), tenant, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tenantScope is the tenant a sandbox listing or deletion acts for: the
// caller's, or with all_tenants=true every tenant (listing.AnyTenant), which
// only an admin key may ask.
func tenantScope(r *http.Request) (string, error) {
	all, err := boolQuery(r, "all_tenants")
	if err != nil {
		return "", err
	}
	if !all {
		return caller(r).Tenant, nil
	}
	if !caller(r).Admin {
		return "", api.Errorf(api.CodeForbidden, "all_tenants needs an admin key")
	}
	return listing.AnyTenant, nil
}

// setTimeout answers POST /v1/sandboxes/{id}/timeout. The manager judges
// the range; a value too large for a time.Duration is saturated so that it
// is judged too long rather than wrapping around.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.SetTimeoutRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	timeout := time.Duration(math.MaxInt64)
	if req.TimeoutSeconds < int64(math.MaxInt64/time.Second) {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	sb, err := s.sb.SetTimeout(r.Context(), caller(r).Tenant, id, timeout)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

// pauseSandbox answers POST /v1/sandboxes/{id}/pause: the sandbox's memory
// is saved to a file on the node and its process ends; it answers the
// sandbox, paused.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.sb.Pause(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

// resumeSandbox answers POST /v1/sandboxes/{id}/resume: the paused sandbox
// runs again from its saved memory; it answers the sandbox, running.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sb, err := s.sb.Resume(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

// tenantName is what a tenant may be called.
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// createKey answers POST /v1/keys: a new key for a tenant, shown once.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateKeyRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if !tenantName.MatchString(req.Tenant) {
		return api.Errorf(api.CodeBadRequest, "tenant must be 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit, got %q", req.Tenant)
	}
	if req.Tenant == api.AdminTenant {
		return api.Errorf(api.CodeBadRequest, "tenant %q is the admin key's own", req.Tenant)
	}
	if req.Scope != "" && req.Scope != api.KeyScopeMetrics {
		return api.Errorf(api.CodeBadRequest, "scope must be empty (the tenant's whole API) or %q, got %q", api.KeyScopeMetrics, req.Scope)
	}
	key, err := s.keys.CreateKey(r.Context(), req.Tenant, req.Scope)
	if err != nil {
		return err
	}
	k, err := s.keys.LookupKey(r.Context(), key)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.Key{ID: k.ID, Key: key, Tenant: req.Tenant, Scope: req.Scope})
}

// listKeys answers GET /v1/keys: every key's ID, tenant and age, never the
// key (the server keeps only hashes).
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	lr, err := parseList(r, "keys", "", api.DefaultListLimit, api.MaxListLimit, nil)
	if err != nil {
		return err
	}
	keys, err := s.keys.ListKeys(r.Context(), lr.storePage())
	if err != nil {
		return err
	}
	infos := make([]api.KeyInfo, 0, len(keys))
	for _, k := range keys {
		infos = append(infos, api.KeyInfo{ID: k.ID, Tenant: k.Tenant, Admin: k.Admin, Scope: k.Scope, CreatedAt: k.CreatedAt})
	}
	var out api.KeyList
	out.Keys, out.NextPageToken = page(lr, infos, func(k api.KeyInfo) pageToken { return byCreation(k.CreatedAt, k.ID) })
	return writeJSON(w, http.StatusOK, out)
}

// deleteKey answers DELETE /v1/keys/{id}: the key authenticates nothing
// from the next request on. An admin key is not revoked this way: the
// daemon keeps it in DATA/admin.key and makes a new one at start when that
// file is removed.
func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	keys, err := s.keys.ListKeys(r.Context(), listing.Page{})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		if k.Admin {
			return api.Errorf(api.CodeBadRequest, "key %s is an admin key: remove the data directory's admin.key and restart the server to replace it", id)
		}
		if err := s.keys.DeleteKey(r.Context(), id); errors.Is(err, ErrUnknownKey) {
			break // revoked meanwhile
		} else if err != nil {
			return err
		}
		s.sessions.revokeKey(id)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return api.Errorf(api.CodeNotFound, "key %s not found", id)
}
