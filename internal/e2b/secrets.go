package e2b

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"warren/api"
	"warren/internal/ident"
)

// E2B's secrets are warren's (api.Secret): a tenant's credentials that
// egress rules put in its sandboxes' requests, which no answer carries
// back. E2B's routes differ from warren's in method and shape only:
// E2B's create (POST /secrets, the name in the body) is refused for a name
// that has a secret (409), and its update (POST /secrets/{ref}) for a ref
// that has none (404), where warren's PUT /v1/secrets/{name} does either.
// A ref is a secret's ID or its name, as warren's routes take it; names
// are warren's (api.SecretName), stored in lower case as E2B's are.

// secret is E2B's picture of a secret.
type secret struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int               `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

// secretOf is E2B's picture of s.
func secretOf(s api.Secret) secret {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secret{SecretID: s.ID, Name: s.Name, CurrentVersion: s.Version, Metadata: md, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// secretPath is warren's path of the secret ref, or not found for what is
// neither a secret's ID nor a name one may have.
func secretPath(ref string) (string, error) {
	if !ident.Valid(ref, api.SecretIDPrefix) {
		if _, err := api.SecretName(ref); err != nil {
			return "", errorf(http.StatusNotFound, "secret %.70q not found", ref)
		}
	}
	return "/v1/secrets/" + ref, nil
}

// isStatus reports whether err is an answer of warren's with status.
func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == status
}

// badRequest is E2B's 400 for err, an *api.Error of the api package's
// checks, whose message is safe to show.
func badRequest(err error) error {
	return errorf(http.StatusBadRequest, "%s", err.Error())
}

// newSecret is the body of E2B's create, POST /secrets.
type newSecret struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// createSecret serves POST /secrets {name, value, metadata}: 201 with the
// new secret, 409 when the name has one already.
//
// warren's PUT makes a new version of a secret that exists, so the name is
// looked up first. A create of the same name between the look-up and the
// PUT makes this value that secret's next version: the answer is then a
// 409 that says so, never a 201.
func (h *Handler) createSecret(w http.ResponseWriter, r *http.Request) error {
	var req newSecret
	if err := decode(r, &req); err != nil {
		return err
	}
	name, err := api.SecretName(req.Name)
	if err != nil {
		return badRequest(err)
	}
	set := api.SetSecretRequest{Value: req.Value, Metadata: req.Metadata}
	if err := api.CheckSecret(set); err != nil {
		return badRequest(err)
	}
	p := "/v1/secrets/" + name
	switch err := h.call(r, "GET", p, nil, nil); {
	case err == nil:
		return errorf(http.StatusConflict, "secret %s already exists; update gives it a new value", name)
	case !isStatus(err, http.StatusNotFound):
		return err
	}
	var sec api.Secret
	if err := h.call(r, "PUT", p, set, &sec); err != nil {
		return err
	}
	if sec.Version != 1 {
		return errorf(http.StatusConflict, "secret %s was created by another request meanwhile; this value is its version %d", name, sec.Version)
	}
	writeJSON(w, http.StatusCreated, secretOf(sec))
	return nil
}

// updateSecret serves POST /secrets/{ref} {value, metadata}: the secret's
// next version (metadata, when given, replacing its own), or 404 when ref
// has no secret.
//
// warren's PUT takes a name and creates what does not exist: the secret
// is looked up first (ref may be its ID), and an update that found it
// deleted and created anew in between is a 409 that says so.
func (h *Handler) updateSecret(w http.ResponseWriter, r *http.Request, ref string) error {
	var req struct {
		Value    string            `json:"value"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	p, err := secretPath(ref)
	if err != nil {
		return err
	}
	set := api.SetSecretRequest{Value: req.Value, Metadata: req.Metadata}
	if err := api.CheckSecret(set); err != nil {
		return badRequest(err)
	}
	var old api.Secret
	if err := h.call(r, "GET", p, nil, &old); err != nil {
		return err
	}
	var sec api.Secret
	if err := h.call(r, "PUT", "/v1/secrets/"+old.Name, set, &sec); err != nil {
		return err
	}
	if sec.ID != old.ID {
		return errorf(http.StatusConflict, "secret %s was deleted meanwhile; this value created it anew as %s", old.Name, sec.ID)
	}
	writeJSON(w, http.StatusOK, secretOf(sec))
	return nil
}

// getSecret serves GET /secrets/{ref}.
func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request, ref string) error {
	p, err := secretPath(ref)
	if err != nil {
		return err
	}
	var sec api.Secret
	if err := h.call(r, "GET", p, nil, &sec); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, secretOf(sec))
	return nil
}

// deleteSecret serves DELETE /secrets/{ref}: 404 (the SDK's false) when
// ref has no secret.
func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request, ref string) error {
	p, err := secretPath(ref)
	if err != nil {
		return err
	}
	if err := h.call(r, "DELETE", p, nil, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listSecrets serves GET /secrets?limit=&nextToken=. warren answers a
// tenant's secrets (at most api.MaxSecrets) whole, in name order; E2B's
// pages are cut from it here. nextToken is the last name a page answered,
// so a page starts after it whatever was created or deleted meanwhile.
func (h *Handler) listSecrets(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := api.DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			return errorf(http.StatusBadRequest, "bad limit %.20q: want 1 to %d", v, api.MaxListLimit)
		}
		limit = n
	}
	after := q.Get("nextToken")
	if after != "" {
		name, err := api.SecretName(after)
		if err != nil {
			return errorf(http.StatusBadRequest, "bad nextToken %.70q: it is the last name of a page", after)
		}
		after = name
	}
	var list api.SecretList
	if err := h.call(r, "GET", "/v1/secrets", nil, &list); err != nil {
		return err
	}
	out := []secret{}
	more := false
	for _, s := range list.Secrets {
		if s.Name <= after {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, secretOf(s))
	}
	if more {
		w.Header().Set("X-Next-Token", out[len(out)-1].Name)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
