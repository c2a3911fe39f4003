package agent

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	processpb "warren/internal/agent/pb/process"
)

// errBadBasicAuth answers an Authorization header that says Basic but does
// not hold "user:" (or "user:password") in base64.
var errBadBasicAuth = errors.New("malformed Basic authorization header")

// userFromHeader is the user an E2B SDK names for a call: envd takes it from
// the username of an "Authorization: Basic base64(user:)" header on every
// Connect call (the password is empty and ignored). It is "" when the call
// names none (no Authorization header, or another scheme): the call then
// runs as the agent's default user. Whether the user exists is for the
// caller to check.
func userFromHeader(h http.Header) (string, error) {
	auth := h.Get("Authorization")
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", errBadBasicAuth
	}
	name, _, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", errBadBasicAuth
	}
	return name, nil
}

// setProcessUser gives cfg the user h names (userFromHeader) when cfg
// names none itself: warren's own field wins.
func setProcessUser(h http.Header, cfg *processpb.ProcessConfig) error {
	user, err := userFromHeader(h)
	if err != nil {
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	if cfg != nil && cfg.GetUser() == "" {
		cfg.User = user
	}
	return nil
}
