package server

import (
	"compress/gzip"
	"crypto/subtle"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"regexp"
	"strings"

	"warren/api"
	"warren/internal/agentconn"
)

// The agent routes, /v1/sandboxes/{id}/agent/..., speak the guest agent's
// own protocol, which is E2B's in-sandbox daemon's (envd): its process and
// filesystem Connect services, passed through to the agent, and envd's
// HTTP routes /files (download; upload as multipart or as one stream) and
// /health, answered here. E2B's SDKs reach them through package e2b; any
// client of the Connect protocol may call them directly.
//
// A caller has either an API key of the sandbox's tenant or the sandbox's
// agent token in X-Access-Token (api.Sandbox.AgentToken): E2B's SDKs send
// the token and never the key. Beside the token, an Authorization: Basic
// header names the sandbox user a call acts as (envd's convention) and
// goes on to the agent; a bearer key never does. Only the methods of the
// two services are forwarded: the agent's control service (identity,
// freeze, shutdown) is the node's alone.

// agentMethod matches the path of a method of the agent's services a
// caller may reach, and nothing else (no dot-dot, no escapes).
var agentMethod = regexp.MustCompile(`^/(process\.Process|filesystem\.Filesystem)/[A-Za-z]+$`)

// agentRequestHeaders are the request headers passed on to the agent: what
// the Connect and gRPC protocols and envd's conventions use.
var agentRequestHeaders = []string{
	"Content-Type", "Content-Encoding", "Accept-Encoding",
	"Connect-Protocol-Version", "Connect-Timeout-Ms", "Connect-Content-Encoding", "Connect-Accept-Encoding",
	"Grpc-Timeout", "Grpc-Encoding", "Grpc-Accept-Encoding", "Te",
	"Keepalive-Ping-Interval",
}

// agentCall answers /v1/sandboxes/{id}/agent/{path...}.
func (s *Server) agentCall(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	counted := s.sessions.counted()
	tenant, sess, err := s.authenticateAgent(r, id)
	if err != nil {
		return err
	}
	r = s.sessions.begin(r, sess, counted)
	defer s.sessions.end(sess)
	// The sandbox first: another tenant's is not found, whatever the path.
	conn, err := s.sb.Agent(r.Context(), tenant, id)
	if err != nil {
		return err
	}
	p := "/" + r.PathValue("path")
	switch {
	case p == "/health":
		// The agent answers: the manager hands out only a running
		// sandbox's connection.
		w.WriteHeader(http.StatusNoContent)
		return nil
	case p == "/files":
		return s.envdFiles(w, r, conn, id)
	}
	if agentMethod.MatchString(p) {
		return s.forwardAgent(w, r, conn, id, p)
	}
	return api.Errorf(api.CodeNotFound, "the agent of sandbox %s serves no %s", id, p)
}

// authenticateAgent returns the tenant a call of sandbox id's agent routes
// acts for, and the session of its credential (revoke.go): the sandbox's
// own, when it carries the agent token; else that of its API key. With
// the token, a Basic Authorization names the sandbox user; with a key,
// Authorization is the key's as on every route. An unknown sandbox and a
// wrong token are the same 401.
func (s *Server) authenticateAgent(r *http.Request, id string) (string, *session, error) {
	if token := r.Header.Get("X-Access-Token"); token != "" {
		owner, want, err := s.sb.AgentAccess(r.Context(), id)
		if err != nil && !api.IsCode(err, api.CodeNotFound) {
			return "", nil, err
		}
		if err != nil || want == "" || subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
			return "", nil, api.Errorf(api.CodeUnauthorized, "invalid access token for sandbox %s", id)
		}
		meta(r.Context()).key = Key{ID: "agent-token", Tenant: owner}
		return owner, &session{sandbox: id, token: token}, nil
	}
	key, err := s.Authenticate(r)
	if err == nil {
		err = allowed(tenant, key)
	}
	if err != nil {
		return "", nil, err
	}
	meta(r.Context()).key = key
	return key.Tenant, &session{keyID: key.ID}, nil
}

// basicUser reports whether h's Authorization names a user (Basic), as
// envd's clients send it.
func basicUser(h http.Header) bool {
	scheme, _, _ := strings.Cut(h.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Basic")
}

// forwardAgent passes a call of one of the agent's services through, both
// ways streaming.
func (s *Server) forwardAgent(w http.ResponseWriter, r *http.Request, conn *agentconn.Conn, id, p string) error {
	release, err := s.holdStream(id)
	if err != nil {
		return err
	}
	defer release()
	h := http.Header{}
	for _, name := range agentRequestHeaders {
		if v, ok := r.Header[name]; ok {
			h[name] = v
		}
	}
	if basicUser(r.Header) {
		h.Set("Authorization", r.Header.Get("Authorization"))
	}
	resp, err := conn.Forward(r.Context(), r.Method, p, h, r.Body)
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	defer resp.Body.Close()
	copyAgentHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return nil // the caller left
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		if rerr != nil {
			break
		}
	}
	for name, v := range resp.Trailer {
		if agentHeader(name) {
			w.Header()[http.TrailerPrefix+name] = v
		}
	}
	return nil
}

// copyAgentHeaders copies the answer's headers a client of the protocol
// needs; the agent is the tenant's, so nothing else it says (cookies, say)
// reaches the caller.
func copyAgentHeaders(dst, src http.Header) {
	for name, v := range src {
		if agentHeader(name) {
			dst[name] = v
		}
	}
}

func agentHeader(name string) bool {
	name = http.CanonicalHeaderKey(name)
	switch name {
	case "Content-Type", "Content-Encoding", "Content-Length":
		return true
	}
	for _, prefix := range []string{"Connect-", "Grpc-", "Trailer-"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// envdFileEntry is one written file in envd's answer to an upload.
type envdFileEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// envdError is envd's error body.
type envdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// envdFiles answers envd's /files: GET ?path=P&username=U downloads a
// file; POST uploads one (a body of any other type than multipart, to
// ?path=) or several (multipart/form-data, each part named "file" going
// to ?path= when given, else to its file name). Paths are absolute or
// relative to the user's home. Errors are envd's body, {"code","message"}.
func (s *Server) envdFiles(w http.ResponseWriter, r *http.Request, conn *agentconn.Conn, id string) error {
	err := s.envdFilesCall(w, r, conn, id)
	var ae *api.Error
	if err == nil || began(w) || !errors.As(err, &ae) || ae.Status() == http.StatusInternalServerError {
		return err
	}
	return writeJSON(w, ae.Status(), envdError{Code: ae.Status(), Message: ae.Message})
}

func (s *Server) envdFilesCall(w http.ResponseWriter, r *http.Request, conn *agentconn.Conn, id string) error {
	q := r.URL.Query()
	user := q.Get("username")
	if err := checkUser(user); err != nil {
		return err
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		p := q.Get("path")
		if err := checkPath("path", p); err != nil {
			return err
		}
		return sendFile(w, r, conn, id, p, user, func(h http.Header) {
			h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
		})
	case http.MethodPost:
		for name := range r.Header {
			if strings.HasPrefix(name, "X-Metadata-") {
				return api.Errorf(api.CodeBadRequest, "file metadata (%s) is not supported by warren", name)
			}
		}
		written, err := s.envdUpload(r, conn, id, user, q.Get("path"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, written)
	}
	return api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on /files", r.Method)
}

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 1000

// envdUpload writes an upload's files and answers their entries.
func (s *Server) envdUpload(r *http.Request, conn *agentconn.Conn, id, user, target string) ([]envdFileEntry, error) {
	write := func(p string, body io.Reader) (envdFileEntry, error) {
		if err := checkPath("path", p); err != nil {
			return envdFileEntry{}, err
		}
		entry, err := conn.WriteFile(r.Context(), p, defaultFileMode, user, body)
		if err != nil {
			return envdFileEntry{}, agentError(r.Context(), id, err)
		}
		return envdFileEntry{Name: entry.GetName(), Type: "file", Path: entry.GetPath()}, nil
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "the gzip body does not decode: %v", err)
		}
		defer zr.Close()
		body = zr
	}
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType != "multipart/form-data" {
		e, err := write(target, body)
		if err != nil {
			return nil, err
		}
		return []envdFileEntry{e}, nil
	}
	if params["boundary"] == "" {
		return nil, api.Errorf(api.CodeBadRequest, "a multipart upload needs a boundary")
	}
	mr := multipart.NewReader(body, params["boundary"])
	var out []envdFileEntry
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "the multipart upload does not decode: %v", err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if len(out) == maxUploadParts {
			return nil, api.Errorf(api.CodeBadRequest, "an upload holds at most %d files", maxUploadParts)
		}
		p := target
		if p == "" || len(out) > 0 {
			// The file name is the whole path: Part.FileName would keep
			// only its last element.
			_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p = disp["filename"]
		}
		e, err := write(p, part)
		part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, api.Errorf(api.CodeBadRequest, "the upload holds no part named \"file\"")
	}
	return out, nil
}
