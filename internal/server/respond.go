package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"connectrpc.com/connect"

	"warren/api"
)

// writeJSON sends v with the given status. When v cannot be encoded (a NaN
// float), nothing is sent and the error says so.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteError sends err as the error body, or only logs it when the response
// has begun. An *api.Error is shown as it is, except a 500, which like any
// other error is logged in full and shown as "internal error".
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *api.Error
	internal := !errors.As(err, &ae) || ae.Status() == http.StatusInternalServerError
	if internal || began(w) {
		level, msg := slog.LevelError, "internal error"
		if !internal {
			level, msg = slog.LevelWarn, "error after the response began"
		}
		if r.Context().Err() != nil {
			// The caller left; what failed is most likely the cut itself.
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, msg, "request_id", requestID(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if began(w) {
		return
	}
	if internal {
		ae = api.Errorf(api.CodeInternal, "internal error")
	}
	if ae.Code == api.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="warren"`)
		// A client without a valid key keeps no connection.
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, ae.Status(), api.ErrorBody{Error: *ae})
}

// decodeJSON reads the request body, at most s.opts.MaxBodyBytes, as exactly
// one JSON object into v, refusing unknown fields. An empty body leaves v as
// it is when emptyOK, and is refused otherwise.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	return s.decodeJSONUpTo(w, r, v, emptyOK, s.opts.MaxBodyBytes)
}

// decodeJSONUpTo is decodeJSON for a body of at most limit bytes.
func (s *Server) decodeJSONUpTo(w http.ResponseWriter, r *http.Request, v any, emptyOK bool, limit int64) error {
	bodyDeadline(r, time.Now().Add(s.opts.Timeouts.JSONBody))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if errors.Is(err, errBodyTimeout) {
		w.Header().Set("Connection", "close")
		return api.Errorf(api.CodeBadRequest, "the request body did not arrive within %v", s.opts.Timeouts.JSONBody)
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return api.Errorf(api.CodeTooLarge, "request body larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return api.Errorf(api.CodeBadRequest, "read request body: %v", err)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		if emptyOK {
			return nil
		}
		return api.Errorf(api.CodeBadRequest, "empty request body: want a JSON object")
	}
	if trimmed[0] != '{' {
		return api.Errorf(api.CodeBadRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(api.CodeBadRequest, "malformed JSON: more than one value in the body")
	}
	return nil
}

// jsonError describes a decoding error for the caller.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return api.Errorf(api.CodeBadRequest, "malformed JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(api.CodeBadRequest, "malformed JSON: unexpected end of the body")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return api.Errorf(api.CodeBadRequest, "malformed JSON: a %s where %s is wanted", typ.Value, typ.Type)
		}
		return api.Errorf(api.CodeBadRequest, "field %q: a %s where %s is wanted", jsonPath(typ.Field), typ.Value, typ.Type)
	}
	// encoding/json has no type for the unknown-field error.
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return api.Errorf(api.CodeBadRequest, "unknown field %s", msg)
	}
	return api.Errorf(api.CodeBadRequest, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// sandboxIDPattern is the form of every sandbox id; anything else cannot
// name a sandbox and is answered not found without asking the manager.
var sandboxIDPattern = regexp.MustCompile(`^sb-[a-z0-9]{1,40}$`)

// sandboxID returns the {id} of the path, or not found.
func sandboxID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sandboxIDPattern.MatchString(id) {
		return "", api.Errorf(api.CodeNotFound, "sandbox %q not found", id)
	}
	return id, nil
}

// pidParam returns the {pid} of the path.
func pidParam(r *http.Request) (uint32, error) {
	s := r.PathValue("pid")
	pid, err := strconv.ParseUint(s, 10, 32)
	if err != nil || pid == 0 {
		return 0, api.Errorf(api.CodeBadRequest, "bad pid %q: want a positive integer", s)
	}
	return uint32(pid), nil
}

// boolQuery parses an optional boolean query parameter.
func boolQuery(r *http.Request, name string) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, api.Errorf(api.CodeBadRequest, "bad %s %q: want true or false", name, s)
	}
	return b, nil
}

// agentError turns an error of a call to sandbox id's agent into what the
// caller may see. Connect codes that describe the request or the sandbox's
// state keep the agent's message; the rest are internal.
func agentError(ctx context.Context, id string, err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("agent call ended by the caller: %w", err)
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return api.Errorf(api.CodeNotFound, "%s", msg)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return api.Errorf(api.CodeBadRequest, "%s", msg)
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeResourceExhausted, connect.CodeAborted:
		return api.Errorf(api.CodeConflict, "%s", msg)
	case connect.CodePermissionDenied:
		return api.Errorf(api.CodeForbidden, "%s", msg)
	case connect.CodeDeadlineExceeded:
		return api.Errorf(api.CodeTimeout, "%s", msg)
	case connect.CodeUnavailable:
		return api.Errorf(api.CodeConflict, "sandbox %s is not running (its agent does not answer)", id)
	}
	return fmt.Errorf("agent of %s: %w", id, err)
}

// jsonPath is a field path of encoding/json's without the names of the Go
// structs embedded on the way ("SandboxSpec.cpus" is "cpus"): those start
// with a capital, and the API's JSON names never do.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	parts = slices.DeleteFunc(parts, func(p string) bool { return p != "" && unicode.IsUpper(rune(p[0])) })
	return strings.Join(parts, ".")
}
