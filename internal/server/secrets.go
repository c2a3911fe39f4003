package server

import (
	"context"
	"net/http"

	"warren/api"
)

// Secrets keeps tenants' secrets (package secrets' Vault). No method
// returns a value.
type Secrets interface {
	// Set creates the secret or gives it a new version; created says which.
	Set(ctx context.Context, tenant, name string, r api.SetSecretRequest) (_ api.Secret, created bool, _ error)
	// Get, List and Delete take a secret by ID or name.
	Get(ctx context.Context, tenant, ref string) (api.Secret, error)
	List(ctx context.Context, tenant string) ([]api.Secret, error)
	Delete(ctx context.Context, tenant, ref string) error
}

// secrets is the server's Secrets, or an error when it keeps none.
func (s *Server) secrets() (Secrets, error) {
	if s.opts.Secrets == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server keeps no secrets")
	}
	return s.opts.Secrets, nil
}

// setSecret answers PUT /v1/secrets/{name}: 201 with the new secret, or
// 200 with its new version.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) error {
	sec, err := s.secrets()
	if err != nil {
		return err
	}
	var req api.SetSecretRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	out, created, err := sec.Set(r.Context(), caller(r).Tenant, r.PathValue("name"), req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, out)
}

// listSecrets answers GET /v1/secrets.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	sec, err := s.secrets()
	if err != nil {
		return err
	}
	list, err := sec.List(r.Context(), caller(r).Tenant)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.SecretList{Secrets: list})
}

// getSecret answers GET /v1/secrets/{name}.
func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) error {
	sec, err := s.secrets()
	if err != nil {
		return err
	}
	out, err := sec.Get(r.Context(), caller(r).Tenant, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// deleteSecret answers DELETE /v1/secrets/{name}.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	sec, err := s.secrets()
	if err != nil {
		return err
	}
	if err := sec.Delete(r.Context(), caller(r).Tenant, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
