package oci

import (
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// whiteout hides rel of the lower layers.
func (w *writer) whiteout(rel string) error {
	dir, base := path.Split(rel)
	pfd, err := w.resolve(path.Clean(dir))
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil // nothing there to hide
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return w.prune(pfd, base)
}

// opaque empties the directory rel of what lower layers put there.
func (w *writer) opaque(rel string) error {
	pfd, base := w.root, "."
	if rel != "." {
		dir, b := path.Split(rel)
		fd, err := w.resolve(path.Clean(dir))
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return nil
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		pfd, base = fd, b
	}
	// Not followed: a symlink there is no directory of this layer's.
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := w.readDir(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := w.prune(fd, n); err != nil {
			return err
		}
	}
	return nil
}

// prune removes name under pfd and what it holds, sparing what the current
// layer made: a directory holding some of that stays, emptied of the rest.
// The layer's own are known by inode, so a hardlink the layer makes to a
// lower file spares that file too.
func (w *writer) prune(pfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return nil
	} else if err != nil {
		return err
	}
	_, kept := w.layer[fileID{st.Dev, st.Ino}]
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if kept {
			return nil
		}
		return unix.Unlinkat(pfd, name, 0)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := w.readDir(fd)
	for _, n := range names {
		if err == nil {
			err = w.prune(fd, n)
		}
	}
	unix.Close(fd)
	if err != nil || kept {
		return err
	}
	switch err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err {
	case nil:
		delete(w.dirs, fileID{st.Dev, st.Ino}) // the inode may be reused
	case unix.ENOTEMPTY: // it holds the layer's own
	default:
		return err
	}
	return nil
}

// removeAll removes name under pfd, and all it holds, following no
// symlink.
func (w *writer) removeAll(pfd int, name string) error {
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR {
		return err
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	var names []string
	if err == nil {
		names, err = w.readDir(fd)
	}
	for _, n := range names {
		if err == nil {
			err = w.removeAll(fd, n)
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
		return err
	}
	delete(w.dirs, fileID{st.Dev, st.Ino}) // the inode may be reused
	return nil
}

// readDir lists a directory fd (O_PATH or not) without changing it.
func (w *writer) readDir(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}
