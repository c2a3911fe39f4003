//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/agent/pb/filesystem/filesystempbconnect"
	"warren/internal/unixmode"
)

// maxListEntries bounds one ListDir answer, and the names of one directory
// it reads (it sorts them to page through them): a directory tree of the
// sandbox may be arbitrarily large, and is read in pages.
const maxListEntries = 100_000

// fsService implements filesystem.Filesystem.
type fsService struct{ s *Server }

var _ filesystempbconnect.FilesystemHandler = fsService{}

// caller is the user a call names in its Authorization header, as envd
// takes it (userFromHeader), or the agent's own user when it names none.
// Relative paths of the call start at the user's home; MakeDir makes
// directories as the user. A malformed header, or a user the sandbox does
// not have, is Unauthenticated, as envd answers it.
func (s *Server) caller(h http.Header) (*account, error) {
	name, err := userFromHeader(h)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	acc, err := s.users.lookup(name)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: %q", name))
	}
	return acc, nil
}

// callerPath resolves p for the caller (see caller).
func (s *Server) callerPath(h http.Header, p string) (string, error) {
	acc, err := s.caller(h)
	if err != nil {
		return "", err
	}
	return resolvePath(p, acc.home)
}

// Stat describes a path without following a final symlink.
func (h fsService) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	p, err := h.s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: h.s.entryInfo(p, fi)}), nil
}

// MakeDir creates a directory and its missing parents, each with the mode,
// as the user (the request's user field, else the caller: asUser): owned by them, where they may; AlreadyExists when
// the path exists.
func (h fsService) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	var acc *account
	var err error
	if u := req.Msg.GetUser(); u != "" {
		if acc, err = h.s.users.lookup(u); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	} else if acc, err = h.s.caller(req.Header()); err != nil {
		return nil, err
	}
	p, err := resolvePath(req.Msg.GetPath(), acc.home)
	if err != nil {
		return nil, err
	}
	mode := fs.FileMode(0o755)
	if m := req.Msg.GetMode(); m != 0 {
		if m&^0o7777 != 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad mode %#o", m))
		}
		mode = unixmode.ToFileMode(m)
	}
	err = asUser(acc, func() error {
		if _, err := os.Lstat(p); err == nil {
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", p))
		}
		return mkdirAll(p, mode, acc)
	})
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: h.s.entryInfo(p, fi)}), nil
}

// mkdirAll creates the missing directories of the clean absolute path p,
// top down, each with exactly mode (not masked by the umask) and owned by
// acc.
func mkdirAll(p string, mode fs.FileMode, acc *account) error {
	var missing []string
	for dir := p; dir != "/"; dir = path.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			break
		}
		missing = append(missing, dir)
	}
	for _, dir := range slices.Backward(missing) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue // made meanwhile
			}
			return fsError("mkdir", dir, err)
		}
		if err := os.Lchown(dir, int(acc.uid), int(acc.gid)); err != nil {
			return fsError("chown", dir, err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			return fsError("chmod", dir, err)
		}
	}
	return nil
}

// Move renames source to destination, replacing a file there.
func (h fsService) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	acc, err := h.s.caller(req.Header())
	if err != nil {
		return nil, err
	}
	src, err := resolvePath(req.Msg.GetSource(), acc.home)
	if err != nil {
		return nil, err
	}
	dst, err := resolvePath(req.Msg.GetDestination(), acc.home)
	if err != nil {
		return nil, err
	}
	if src == "/" || dst == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("cannot move /"))
	}
	if err := os.Rename(src, dst); err != nil {
		if _, serr := os.Lstat(src); serr != nil {
			return nil, fsError("move", src, serr)
		}
		return nil, fsError("move", src+" to "+dst, err)
	}
	fi, err := os.Lstat(dst)
	if err != nil {
		return nil, fsError("stat", dst, err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: h.s.entryInfo(dst, fi)}), nil
}

// ListDir lists a directory, descending depth levels (0 and 1: the entries
// of the directory itself). Symlinks are listed, not followed; unreadable
// subdirectories are listed but not descended into. Entries come depth
// first, each directory's sorted by name, at most limit of them, after the
// entry at path after: a listing of any size is read in pages, each
// holding only its own entries, and a page is right however the tree
// changed since the one before.
func (h fsService) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	p, err := h.s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fsError("list", p, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("list %s: not a directory", p))
	}
	depth := max(int(min(req.Msg.GetDepth(), 1<<16)), 1)
	limit := int(req.Msg.GetLimit())
	if limit <= 0 || limit > maxListEntries {
		limit = maxListEntries
	}
	// cursor is the components of after below p: the walk skips what
	// sorts before them, and the entry itself.
	var cursor []string
	if after := req.Msg.GetAfter(); after != "" {
		rel, ok := strings.CutPrefix(after, strings.TrimSuffix(p, "/")+"/")
		if !ok || rel == "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("list %s: after %q is not below it", p, after))
		}
		cursor = strings.Split(rel, "/")
	}
	var entries []*filesystempb.EntryInfo
	more := false
	// walk lists dir, at depth level; onCursor says dir is on the path to
	// the cursor, whose component at this level is then cursor[level-1].
	var walk func(dir string, level int, onCursor bool) error
	walk = func(dir string, level int, onCursor bool) error {
		if err := ctx.Err(); err != nil {
			return connect.NewError(connect.CodeCanceled, err)
		}
		names, err := readDirNames(dir, maxListEntries+1)
		if err != nil {
			if level == 1 {
				return fsError("list", dir, err)
			}
			return nil // an unreadable subdirectory: listed, not descended into
		}
		if len(names) > maxListEntries {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("list %s: more than %d entries in one directory", dir, maxListEntries))
		}
		for _, name := range names {
			if more {
				return nil
			}
			// The entry itself is skipped when it sorts before the cursor
			// or is on its path (listed on an earlier page); its subtree
			// only when it sorts wholly before it.
			skip, below := false, false
			if onCursor && level <= len(cursor) {
				switch c := cursor[level-1]; {
				case name < c:
					continue
				case name == c:
					skip, below = true, level < len(cursor)
				default:
					onCursor = false
				}
			}
			child := path.Join(dir, name)
			cfi, err := os.Lstat(child)
			if err != nil {
				continue // removed meanwhile
			}
			if !skip {
				if len(entries) == limit {
					more = true
					return nil
				}
				entries = append(entries, h.s.entryInfo(child, cfi))
			}
			if cfi.IsDir() && level < depth {
				if err := walk(child, level+1, below); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1, cursor != nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: entries, More: more}), nil
}

// readDirNames reads at most limit names of dir, sorted.
func readDirNames(dir string, limit int) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for len(names) < limit {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// Remove removes a path: recursively unless recursive is false, when a
// non-empty directory is FailedPrecondition. "/" is never removed.
func (h fsService) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	p, err := h.s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	if _, err := os.Lstat(p); err != nil {
		return nil, fsError("remove", p, err)
	}
	if req.Msg.Recursive == nil || req.Msg.GetRecursive() {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("remove %s: directory not empty", p))
		}
	}
	if err != nil {
		return nil, fsError("remove", p, err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// entryInfo describes the file at the clean absolute path p, as lstat saw it.
func (s *Server) entryInfo(p string, fi fs.FileInfo) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{
		Name:         path.Base(p),
		Path:         p,
		Size:         fi.Size(),
		Mode:         unixmode.FromFileMode(fi.Mode()),
		Permissions:  permString(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = filesystempb.FileType_FILE_TYPE_FILE
	case fi.IsDir():
		e.Type = filesystempb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = filesystempb.FileType_FILE_TYPE_SYMLINK
		if target, err := os.Readlink(p); err == nil {
			e.SymlinkTarget = &target
		}
	default:
		e.Type = filesystempb.FileType_FILE_TYPE_OTHER
	}
	e.Metadata = readMetadata(p)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = s.users.userName(st.Uid)
		e.Group = s.users.groupName(st.Gid)
	}
	return e
}

// permString renders m as ls -l does ("-rw-r--r--", "drwxrwxrwt",
// "lrwxrwxrwx", "-rwsr-xr-x").
func permString(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[1+i] = rwx[i]
		}
	}
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[i] == 'x' {
			b[i] = lower
		} else {
			b[i] = upper
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}
