//go:build linux

package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	filesystempb "warren/internal/agent/pb/filesystem"
)

// maxWatchedDirs bounds the directories one watcher watches (an inotify
// watch each): a recursive watch of a larger tree is refused, and one whose
// tree grows past it ends, both with ResourceExhausted.
const maxWatchedDirs = 8192

// watchMask is what a watched directory reports, as fsnotify (under envd)
// asks for it.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_ONLYDIR

// networkFS names the filesystems (statfs magic numbers) a watch refuses
// unless allowed: envd's (NFS, CIFS, SMB, SMB2, FUSE), with 9P and Ceph.
// inotify sees only the changes made through this kernel, and a FUSE
// server may hang the walk of a recursive watch.
var networkFS = map[uint32]string{
	0x6969:     "nfs",
	0xFF534D42: "cifs",
	0x517B:     "smb",
	0xFE534D42: "smb2",
	0x65735546: "fuse",
	0x01021997: "9p",
	0x00C36400: "ceph",
}

// change is one event of a watched tree.
type change struct {
	name string // relative to the watched directory; "." for itself
	path string // absolute
	op   filesystempb.EventType
}

// inotifyTree is one inotify instance watching a directory and, when
// recursive, every directory below it, those made or moved in later
// included. One goroutine at a time calls next; Close may be called from
// any, and makes a next in progress return.
type inotifyTree struct {
	root      string
	recursive bool
	file      *os.File // the inotify instance, non-blocking so that Close ends a read
	conn      syscall.RawConn
	buf       []byte

	// Touched by the reading goroutine only (and by openTree before it).
	dirs  map[int32]string // watch descriptor → directory relative to root ("" for root)
	ended bool             // the root's watch is gone (removed, unmounted)
}

// openTree watches root, a directory.
func openTree(root string, recursive bool) (*inotifyTree, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fsError("watch", root, err)
	}
	t := &inotifyTree{
		root:      root,
		recursive: recursive,
		file:      os.NewFile(uintptr(fd), "inotify"),
		buf:       make([]byte, 64<<10),
		dirs:      make(map[int32]string),
	}
	if t.conn, err = t.file.SyscallConn(); err != nil {
		t.Close()
		return nil, fsError("watch", root, err)
	}
	if err := t.add(""); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close ends the inotify instance and every watch of it. It is idempotent.
func (t *inotifyTree) Close() { t.file.Close() }

// control runs fn on the instance's descriptor, unless it is closed.
func (t *inotifyTree) control(fn func(fd int) error) error {
	var ferr error
	if err := t.conn.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// add watches the directory rel (relative to root) and, when recursive,
// those below it. A directory below rel that is gone or unreadable by now
// is left out; past maxWatchedDirs, add fails with ResourceExhausted.
func (t *inotifyTree) add(rel string) error {
	pending := []string{rel}
	for len(pending) > 0 {
		dir := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		if len(t.dirs)+len(pending) >= maxWatchedDirs {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: more than %d directories", t.root, maxWatchedDirs))
		}
		full := path.Join(t.root, dir)
		mask := uint32(watchMask)
		if dir != "" {
			mask |= unix.IN_DONT_FOLLOW
		}
		err := t.control(func(fd int) error {
			wd, err := unix.InotifyAddWatch(fd, full, mask)
			if err == nil {
				t.dirs[int32(wd)] = dir // a directory moved within the tree keeps its wd
			}
			return err
		})
		switch {
		case err == nil:
		case dir != "" && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES)):
			continue
		default:
			return fsError("watch", full, err)
		}
		if !t.recursive {
			return nil
		}
		subdirs, err := listSubdirs(full, maxWatchedDirs-len(t.dirs)-len(pending))
		if err != nil {
			if dir == "" {
				return fsError("watch", full, err)
			}
			continue
		}
		if len(subdirs) > maxWatchedDirs-len(t.dirs)-len(pending) {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: more than %d directories", t.root, maxWatchedDirs))
		}
		for _, name := range subdirs {
			pending = append(pending, path.Join(dir, name))
		}
	}
	return nil
}

// listSubdirs names the subdirectories of dir (not symlinks to one), at
// most limit+1 of them.
func listSubdirs(dir string, limit int) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for len(names) <= limit {
		batch, err := f.ReadDir(256)
		for _, d := range batch {
			if d.IsDir() {
				names = append(names, d.Name())
			}
		}
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

// forget stops watching rel and the directories below it: rel moved away,
// and events of its watches would name it where it no longer is.
func (t *inotifyTree) forget(rel string) {
	for wd, dir := range t.dirs {
		if dir == rel || strings.HasPrefix(dir, rel+"/") {
			_ = t.control(func(fd int) error {
				_, err := unix.InotifyRmWatch(fd, uint32(wd))
				return err
			})
			delete(t.dirs, wd)
		}
	}
}

// next waits for the events of one read of the instance and returns them
// as changes, in envd's order for the operations of one inotify event
// (create, rename, chmod, write, remove). It returns io.EOF once the watched
// directory is gone, os.ErrClosed once Close was called, and
// ResourceExhausted when the kernel's event queue overflowed (events were
// lost) or a recursive tree outgrew maxWatchedDirs, with the changes read
// before it.
func (t *inotifyTree) next() ([]change, error) {
	if t.ended {
		return nil, io.EOF
	}
	n, err := t.file.Read(t.buf)
	if err != nil {
		return nil, err
	}
	var changes []change
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		wd := int32(binary.NativeEndian.Uint32(t.buf[off:]))
		mask := binary.NativeEndian.Uint32(t.buf[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(t.buf[off+12:]))
		start := off + unix.SizeofInotifyEvent
		off = start + nameLen
		if off > n {
			break
		}
		name := string(bytes.TrimRight(t.buf[start:off], "\x00"))
		if mask&unix.IN_Q_OVERFLOW != 0 {
			return changes, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: the kernel's event queue overflowed, events were lost", t.root))
		}
		dir, ok := t.dirs[wd]
		if !ok {
			continue // a watch forgotten meanwhile
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(t.dirs, wd)
			t.ended = t.ended || dir == ""
			continue
		}
		if dir != "" && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			continue // its parent's watch reports it, by the name it had there
		}
		rel := path.Join(dir, name)
		if rel == "" {
			rel = "."
		}
		full := path.Join(t.root, rel)
		for _, m := range opMasks {
			if mask&m.mask != 0 {
				changes = append(changes, change{name: rel, path: full, op: m.op})
			}
		}
		if t.recursive && mask&unix.IN_ISDIR != 0 {
			if mask&unix.IN_MOVED_FROM != 0 {
				t.forget(rel)
			}
			if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				if err := t.add(rel); err != nil {
					return changes, err
				}
			}
		}
	}
	return changes, nil
}

// opMasks maps inotify's masks to event types as fsnotify does, in the
// order envd sends the operations of one fsnotify event.
var opMasks = []struct {
	mask uint32
	op   filesystempb.EventType
}{
	{unix.IN_CREATE | unix.IN_MOVED_TO, filesystempb.EventType_EVENT_TYPE_CREATE},
	{unix.IN_MOVE_SELF | unix.IN_MOVED_FROM, filesystempb.EventType_EVENT_TYPE_RENAME},
	{unix.IN_ATTRIB, filesystempb.EventType_EVENT_TYPE_CHMOD},
	{unix.IN_MODIFY, filesystempb.EventType_EVENT_TYPE_WRITE},
	{unix.IN_DELETE | unix.IN_DELETE_SELF, filesystempb.EventType_EVENT_TYPE_REMOVE},
}

// networkMount names the network filesystem p is on, or "" for another.
// Under gVisor (OwnKernel without Guest) 9P is the gofer's, the sandbox's
// own disk served to the Sentry, which sees every change made to it.
func (s *Server) networkMount(p string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "", err
	}
	fs := networkFS[uint32(st.Type)]
	if fs == "9p" && s.opts.OwnKernel && !s.opts.Guest {
		return "", nil
	}
	return fs, nil
}
