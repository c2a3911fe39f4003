package server

import (
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"warren/api"
	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/agentconn"
	"warren/internal/unixmode"
)

// defaultFileMode is the mode of a file written without ?mode=.
const defaultFileMode = 0o644

// fileTarget resolves the sandbox, agent and ?path= of a files route. The
// agent resolves the path itself (home-relative, no climbing above /); the
// server only refuses what cannot be a path.
func (s *Server) fileTarget(r *http.Request) (string, *agentconn.Conn, string, error) {
	id, err := sandboxID(r)
	if err != nil {
		return "", nil, "", err
	}
	path := r.URL.Query().Get("path")
	if err := checkPath("path", path); err != nil {
		return "", nil, "", err
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return "", nil, "", err
	}
	return id, conn, path, nil
}

// checkPath refuses an empty path, and one the agent's protocol cannot
// carry (a NUL byte, invalid UTF-8).
func checkPath(name, path string) error {
	if path == "" {
		return api.Errorf(api.CodeBadRequest, "%s is required", name)
	}
	return checkText(name, path)
}

// checkUser refuses a user name the agent's protocol cannot carry.
func checkUser(user string) error {
	return checkText("user", user)
}

// checkText refuses a NUL byte and invalid UTF-8, which a query parameter
// can hold but a protobuf string cannot.
func checkText(name, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return api.Errorf(api.CodeBadRequest, "%s contains a NUL byte", name)
	}
	if !utf8.ValidString(s) {
		return api.Errorf(api.CodeBadRequest, "%s is not valid UTF-8", name)
	}
	return nil
}

// readFile answers GET /v1/sandboxes/{id}/files?path=P[&user=U]: the file's
// bytes, streamed, with its Content-Length.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	user := r.URL.Query().Get("user")
	if err := checkUser(user); err != nil {
		return err
	}
	id, conn, path, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	return sendFile(w, r, conn, id, path, user, nil)
}

// sendFile answers the file at path of sandbox id, read as user, streamed
// with its Content-Length and the headers set adds (set may be nil).
func sendFile(w http.ResponseWriter, r *http.Request, conn *agentconn.Conn, id, path, user string, set func(http.Header)) error {
	body, size, err := conn.ReadFile(r.Context(), path, user)
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	if set != nil {
		set(w.Header())
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, body); err != nil {
		return agentError(r.Context(), id, err)
	}
	return nil
}

// writeFile answers PUT /v1/sandboxes/{id}/files?path=P&mode=0644&user=U:
// the body is streamed into the file, which replaces the old one at once.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	mode := fs.FileMode(defaultFileMode)
	if m := q.Get("mode"); m != "" {
		u, err := strconv.ParseUint(m, 8, 32)
		if err != nil || u > 0o7777 {
			return api.Errorf(api.CodeBadRequest, "bad mode %q: want octal permission bits such as 0644", m)
		}
		mode = unixmode.ToFileMode(uint32(u))
	}
	user := q.Get("user")
	if err := checkUser(user); err != nil {
		return err
	}
	id, conn, path, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	entry, err := conn.WriteFile(r.Context(), path, mode, user, r.Body)
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(entry))
}

// removeFile answers DELETE /v1/sandboxes/{id}/files?path=P&recursive=true.
// Without recursive, a non-empty directory is a conflict.
func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	recursive, err := boolQuery(r, "recursive")
	if err != nil {
		return err
	}
	id, conn, path, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	_, err = conn.Filesystem.Remove(r.Context(), connect.NewRequest(&filesystempb.RemoveRequest{
		Path: path, Recursive: proto.Bool(recursive),
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// statFile answers GET /v1/sandboxes/{id}/files/stat?path=P.
func (s *Server) statFile(w http.ResponseWriter, r *http.Request) error {
	id, conn, path, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	resp, err := conn.Filesystem.Stat(r.Context(), connect.NewRequest(&filesystempb.StatRequest{Path: path}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(resp.Msg.GetEntry()))
}

// listFiles answers GET /v1/sandboxes/{id}/files/list?path=P&depth=1: a
// page of entries. A page is the daemon's memory from the agent's answer
// to the JSON written; a node serves at most Limits.ListingsOnNode of them
// at once, and the others wait their turn, so that memory stays bounded
// however many large listings are asked for together.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	depth := uint64(1)
	if v := r.URL.Query().Get("depth"); v != "" {
		d, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return api.Errorf(api.CodeBadRequest, "bad depth %q: want a non-negative integer", v)
		}
		depth = d
	}
	id, conn, path, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	lr, err := parseList(r, "files", path+"\x00"+strconv.FormatUint(depth, 10), api.DefaultFileListLimit, api.MaxFileListLimit, nil)
	if err != nil {
		return err
	}
	select {
	case s.listings <- struct{}{}:
		defer func() { <-s.listings }()
	case <-r.Context().Done():
		return api.Errorf(api.CodeTimeout, "gave up waiting for a turn to list: %v", r.Context().Err())
	}
	resp, err := conn.Filesystem.ListDir(r.Context(), connect.NewRequest(&filesystempb.ListDirRequest{
		Path: path, Depth: uint32(depth), Limit: uint32(lr.limit), After: lr.afterKey(),
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	out := api.FileList{Entries: make([]api.FileInfo, 0, len(resp.Msg.GetEntries()))}
	for _, e := range resp.Msg.GetEntries() {
		out.Entries = append(out.Entries, fileInfo(e))
	}
	if resp.Msg.GetMore() && len(out.Entries) > 0 {
		out.NextPageToken = lr.next(pageToken{Key: out.Entries[len(out.Entries)-1].Path})
	}
	return writeJSON(w, http.StatusOK, out)
}

// makeDir answers POST /v1/sandboxes/{id}/files/mkdir.
func (s *Server) makeDir(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.MkdirRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := checkPath("path", req.Path); err != nil {
		return err
	}
	if err := checkUser(req.User); err != nil {
		return err
	}
	if req.Mode > 0o7777 {
		return api.Errorf(api.CodeBadRequest, "bad mode %#o: want permission bits such as 0755 (493 in JSON)", req.Mode)
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	resp, err := conn.Filesystem.MakeDir(r.Context(), connect.NewRequest(&filesystempb.MakeDirRequest{
		Path: req.Path, Mode: req.Mode, User: req.User,
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(resp.Msg.GetEntry()))
}

// moveFile answers POST /v1/sandboxes/{id}/files/move.
func (s *Server) moveFile(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.MoveRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := checkPath("source", req.Source); err != nil {
		return err
	}
	if err := checkPath("destination", req.Destination); err != nil {
		return err
	}
	conn, err := s.sb.Agent(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	resp, err := conn.Filesystem.Move(r.Context(), connect.NewRequest(&filesystempb.MoveRequest{
		Source: req.Source, Destination: req.Destination,
	}))
	if err != nil {
		return agentError(r.Context(), id, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(resp.Msg.GetEntry()))
}

// fileTypes names the agent's file types as the API does.
var fileTypes = map[filesystempb.FileType]string{
	filesystempb.FileType_FILE_TYPE_FILE:      "file",
	filesystempb.FileType_FILE_TYPE_DIRECTORY: "dir",
	filesystempb.FileType_FILE_TYPE_SYMLINK:   "symlink",
}

// fileInfo is the API's form of an agent entry.
func fileInfo(e *filesystempb.EntryInfo) api.FileInfo {
	typ, ok := fileTypes[e.GetType()]
	if !ok {
		typ = "other"
	}
	fi := api.FileInfo{
		Name: e.GetName(), Path: e.GetPath(), Type: typ, Size: e.GetSize(), Mode: e.GetMode(),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(),
	}
	if e.GetModifiedTime() != nil {
		fi.ModifiedAt = e.GetModifiedTime().AsTime()
	}
	return fi
}
