package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// How writer stays inside its root:
//
//   - A directory is reached only by resolve: openat2 on the root's fd with
//     RESOLVE_IN_ROOT, so that "..", absolute symlinks and symlinks with
//     ".." in their target are resolved as if dir were "/" (the way the
//     image's own processes will see them), and RESOLVE_NO_MAGICLINKS.
//   - The last component of a path is only acted on with *at calls on the
//     parent's fd that do not follow it: fstatat, unlinkat, mkdirat,
//     mknodat, symlinkat, linkat without AT_SYMLINK_FOLLOW, fchownat and
//     utimensat with AT_SYMLINK_NOFOLLOW, openat with O_NOFOLLOW (and
//     O_EXCL when creating). A mode is set with fchmod on such an fd, or
//     with fchmodat right after mknodat made the node.
//
// Nothing else writes in dir meanwhile (Unpack's contract), so what the
// writer just made or statted is still what it was.

// writer makes an image's files under root. It is used by one goroutine.
type writer struct {
	root   int  // O_PATH fd of dir
	asRoot bool // euid 0: owners, device nodes, trusted and security xattrs
	// layer is what the current layer made or kept (a directory entry over
	// a directory): its own whiteouts and opaque markers spare these.
	layer map[fileID]struct{}
	// dirs is each directory entry's final mode and times, by inode, set
	// by finish once nothing more is written in them: until then a
	// directory is writable by its owner, so that a non-root writer can
	// fill it. A directory removed leaves it, as its inode may be reused.
	dirs map[fileID]dirMeta
	// skipped is the device nodes not made, so that hardlinks to them are
	// skipped too.
	skipped map[string]struct{}
}

type fileID struct{ dev, ino uint64 }

type dirMeta struct {
	mode         uint32
	atime, mtime time.Time
}

func newWriter(dir string) (*writer, error) {
	if err := private(dir); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("unpack: open %s: %w", dir, err)
	}
	w := &writer{root: fd, asRoot: os.Geteuid() == 0, dirs: map[fileID]dirMeta{}, skipped: map[string]struct{}{}}
	names, err := w.readDir(fd)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("unpack: read %s: %w", dir, err)
	}
	if len(names) > 0 {
		w.close()
		return nil, fmt.Errorf("unpack: %s is not empty", dir)
	}
	return w, nil
}

func (w *writer) close() { unix.Close(w.root) }

// private checks that no other user can enter dir: it or a directory above
// it is the writer's own and closed to group and others. An image's setuid
// files, file capabilities and device nodes (/dev/sda, mode 0666) are
// made there as the image has them, and must not serve anyone on the host.
func private(dir string) error {
	p, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	for {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		if st.Uid == uint32(os.Geteuid()) && st.Mode&0o011 == 0 {
			return nil
		}
		if p == "/" {
			return fmt.Errorf("unpack: %s can be entered by other users: put it in a directory closed to them (0700)", dir)
		}
		p = filepath.Dir(p)
	}
}

func (w *writer) startLayer() { w.layer = map[fileID]struct{}{} }

// resolve opens the directory rel names, as an O_PATH fd.
func (w *writer) resolve(rel string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(w.root, rel, &how)
		// EAGAIN: a rename somewhere raced the lookup; retry.
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err == unix.ENOSYS {
			return -1, errors.New("openat2 needs Linux 5.6 or later")
		}
		return fd, err
	}
}

// parent opens the directory rel names, making the missing ones (0755,
// owned by the writer) as an archive that omits them needs.
func (w *writer) parent(rel string) (int, error) {
	fd, err := w.resolve(rel)
	if err != unix.ENOENT {
		return fd, err
	}
	cur, err := w.resolve(".")
	if err != nil {
		return -1, err
	}
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		next, err := w.resolve(strings.Join(comps[:i+1], "/"))
		if err == unix.ENOENT {
			// c itself is missing (a dangling symlink makes mkdirat fail).
			next, err = w.mkdir(cur, c, 0o755)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// mkdir makes a directory under pfd and returns it opened, marked as the
// layer's.
func (w *writer) mkdir(pfd int, name string, mode uint32) (int, error) {
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return -1, err
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		unix.Close(fd)
		return -1, err
	}
	w.mark(fd, "")
	return fd, nil
}

// mark records the file at fd (or at name under fd) as the layer's.
func (w *writer) mark(fd int, name string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
		return fileID{}, err
	}
	id := fileID{st.Dev, st.Ino}
	w.layer[id] = struct{}{}
	return id, nil
}

// create makes e; false when it is a node it may not make.
func (w *writer) create(e entry) (bool, error) {
	dir, base := path.Split(e.rel)
	pfd, err := w.parent(path.Clean(dir))
	if err != nil {
		return false, fmt.Errorf("parent directory: %w", err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	exists := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	hdr := e.hdr
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeDir:
		return true, w.createDir(pfd, base, e, exists && st.Mode&unix.S_IFMT == unix.S_IFDIR)

	case tar.TypeReg:
		if exists {
			if err := w.removeAll(pfd, base); err != nil {
				return false, err
			}
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return false, err
		}
		f := os.NewFile(uintptr(fd), base)
		defer f.Close()
		if _, err := io.Copy(f, e.content); err != nil {
			return false, err
		}
		if err := w.setMeta(fd, hdr, mode); err != nil {
			return false, err
		}
		if err := f.Close(); err != nil {
			return false, err
		}

	case tar.TypeSymlink:
		if exists {
			if err := w.removeAll(pfd, base); err != nil {
				return false, err
			}
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return false, err
		}
		if w.asRoot {
			if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return false, fmt.Errorf("chown: %w", err)
			}
		}

	case tar.TypeLink:
		return w.link(pfd, base, e, exists, st)

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := nodeKinds[hdr.Typeflag]
		if kind != unix.S_IFIFO && !w.asRoot {
			w.skipped[e.rel] = struct{}{}
			return false, nil
		}
		if exists {
			if err := w.removeAll(pfd, base); err != nil {
				return false, err
			}
		}
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknodat(pfd, base, kind|0o600, int(dev)); err != nil {
			return false, err
		}
		if w.asRoot {
			if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return false, fmt.Errorf("chown: %w", err)
			}
		}
		// Just made as a node, so fchmodat (which follows) acts on it.
		if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
			return false, fmt.Errorf("chmod: %w", err)
		}
	}
	w.mark(pfd, base)
	return true, setTimes(pfd, base, hdr)
}

var nodeKinds = map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}

// createDir makes a directory entry, or keeps the directory there: an
// upper layer's entry changes its metadata, not its contents.
func (w *writer) createDir(pfd int, base string, e entry, isDir bool) error {
	var fd int
	var err error
	if isDir {
		fd, err = unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	} else {
		if err := w.removeAll(pfd, base); err != nil {
			return err
		}
		fd, err = w.mkdir(pfd, base, 0o700)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	id, err := w.mark(fd, "")
	if err != nil {
		return err
	}
	mode := uint32(e.hdr.Mode) & 0o7777
	if err := w.setMeta(fd, e.hdr, mode|0o700); err != nil {
		return err
	}
	w.dirs[id] = dirMeta{mode: mode, atime: atime(e.hdr), mtime: e.hdr.ModTime}
	return nil
}

// link makes a hardlink to a file within the root.
func (w *writer) link(pfd int, base string, e entry, exists bool, st unix.Stat_t) (bool, error) {
	if e.link == e.rel {
		return false, nil
	}
	tdir, tbase := path.Split(e.link)
	tfd, err := w.resolve(path.Clean(tdir))
	if err == nil {
		defer unix.Close(tfd)
		var tst unix.Stat_t
		err = unix.Fstatat(tfd, tbase, &tst, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err != nil:
		case tst.Mode&unix.S_IFMT == unix.S_IFDIR:
			return false, errors.New("hardlink to a directory")
		case exists && st.Dev == tst.Dev && st.Ino == tst.Ino:
			w.mark(pfd, base)
			return true, nil // already that file
		}
	}
	if err != nil {
		if _, ok := w.skipped[e.link]; ok {
			w.skipped[e.rel] = struct{}{}
			return false, nil
		}
		return false, fmt.Errorf("hardlink target %q: %w", e.link, err)
	}
	if exists {
		if err := w.removeAll(pfd, base); err != nil {
			return false, err
		}
	}
	// No AT_SYMLINK_FOLLOW: a link to a symlink links the symlink.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return false, err
	}
	w.mark(pfd, base)
	return true, nil
}

// setMeta sets the owner (as root), mode and xattrs of an open file, in
// that order: chown clears setuid, setgid and security.capability.
func (w *writer) setMeta(fd int, hdr *tar.Header, mode uint32) error {
	if w.asRoot {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !w.xattrAllowed(name) {
			continue
		}
		err := unix.Fsetxattr(fd, name, []byte(v), 0)
		if err != nil && err != unix.ENOTSUP {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

func (w *writer) xattrAllowed(name string) bool {
	switch {
	case strings.HasPrefix(name, "user."):
		return true
	case strings.HasPrefix(name, "trusted."), name == "security.capability":
		return w.asRoot
	}
	return false
}

func atime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

// timespec is t for utimensat; UnixNano would overflow past 2262.
func timespec(t time.Time) unix.Timespec {
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

func setTimes(pfd int, name string, hdr *tar.Header) error {
	ts := []unix.Timespec{timespec(atime(hdr)), timespec(hdr.ModTime)}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// finish gives each directory entry its mode and times, walking the tree
// (symlinks not followed) children first: a mode that forbids the owner to
// search must not stop the ones below, nor a child's change its parent's
// mtime.
func (w *writer) finish() error {
	return w.finishDir(w.root)
}

func (w *writer) finishDir(fd int) error {
	names, err := w.readDir(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = w.finishDir(cfd)
		if m, ok := w.dirs[fileID{st.Dev, st.Ino}]; ok && err == nil {
			err = unix.Fchmod(cfd, m.mode)
			if err == nil {
				ts := []unix.Timespec{timespec(m.atime), timespec(m.mtime)}
				err = unix.UtimesNanoAt(fd, n, ts, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}
