//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"warren/internal/unixmode"
)

// File contents travel as plain HTTP on the agent's handler, streamed:
//
//	GET /files?path=P[&user=U]                 → the bytes (Content-Length set)
//	PUT /files?path=P[&mode=0644][&user=U]     body → the EntryInfo (protojson)
//
// user (alias username, E2B's name) is whose home a relative path starts
// from and whose rights the call has (asUser): it opens, creates and
// renames with that user's credentials, and what PUT creates is theirs.
// Errors are
// {"code":"not_found","message":"..."} with the connect code's name, sent
// with the HTTP status of httpStatus.

const copyBuffer = 256 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBuffer]byte) }}

func (s *Server) serveFiles(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = s.getFile(w, r)
	case http.MethodPut:
		err = s.putFile(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		err = connect.NewError(connect.CodeUnimplemented, fmt.Errorf("method %s not allowed", r.Method))
	}
	if err != nil {
		writeFileError(w, err)
	}
}

// fileTarget resolves the path and user of a /files request.
func (s *Server) fileTarget(r *http.Request) (string, *account, error) {
	q := r.URL.Query()
	user := q.Get("user")
	if user == "" {
		user = q.Get("username")
	}
	acc, err := s.users.lookup(user)
	if err != nil {
		return "", nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	p, err := resolvePath(q.Get("path"), acc.home)
	if err != nil {
		return "", nil, err
	}
	return p, acc, nil
}

// getFile streams a regular file. It is opened non-blocking, so naming a
// FIFO cannot hang the call.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	p, acc, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	var f *os.File
	err = asUser(acc, func() (err error) {
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		return err
	})
	if err != nil {
		return fsError("read", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError("stat", p, err)
	}
	if !fi.Mode().IsRegular() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read %s: not a regular file", p))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.CopyN(w, f, fi.Size()); err != nil {
		// The status is sent: all that is left is to cut the body short.
		s.log.Debug("send file", "path", p, "err", err)
	}
	return nil
}

// putFile streams the body into a temporary file beside the target, syncs
// it, gives it its mode and owner, and renames it over the target: the
// target is either the old file or the whole new one, never a part.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) error {
	p, acc, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if p == "/" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("cannot write /"))
	}
	mode := fs.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		u, err := strconv.ParseUint(m, 8, 32)
		if err != nil || u&^0o7777 != 0 {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad mode %q", m))
		}
		mode = unixmode.ToFileMode(uint32(u))
	}
	dir := path.Dir(p)
	var tmp *os.File
	err = asUser(acc, func() error {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write %s: is a directory", p))
		}
		if err := mkdirAll(dir, 0o755, acc); err != nil {
			return err
		}
		var err error
		if tmp, err = os.CreateTemp(dir, ".warren-upload-*"); err != nil {
			return fsError("create", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buf := copyBufs.Get().(*[copyBuffer]byte)
	_, err = io.CopyBuffer(struct{ io.Writer }{tmp}, r.Body, buf[:])
	copyBufs.Put(buf)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fsError("write", p, err)
		}
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read upload body: %w", err))
	}
	if err := tmp.Chown(int(acc.uid), int(acc.gid)); err != nil {
		return fsError("chown", p, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fsError("chmod", p, err)
	}
	if err := tmp.Sync(); err != nil {
		return fsError("sync", p, err)
	}
	if err := tmp.Close(); err != nil {
		return fsError("close", p, err)
	}
	if err := asUser(acc, func() error { return os.Rename(tmp.Name(), p) }); err != nil {
		return fsError("rename", p, err)
	}
	committed = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fsError("stat", p, err)
	}
	body, err := protojson.Marshal(s.entryInfo(p, fi))
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("encode entry: %w", err))
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	return nil
}

// httpStatus is the HTTP status a /files error is sent with.
func httpStatus(code connect.Code) int {
	switch code {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	case connect.CodeUnimplemented:
		return http.StatusMethodNotAllowed
	}
	return http.StatusInternalServerError
}

// fileError is the JSON body of a /files error.
type fileError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeFileError(w http.ResponseWriter, err error) {
	code := connect.CodeInternal
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		code, msg = ce.Code(), ce.Message()
	}
	body, _ := json.Marshal(fileError{Code: code.String(), Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(httpStatus(code))
	_, _ = w.Write(body)
}
