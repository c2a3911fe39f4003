package blockserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/blockdev"
	"warren/internal/blockdev/fusefile"
	"warren/internal/blockdev/nbd"
	"warren/internal/disk"
)

// attach serves vol through front, in the volume's directory dir, and
// returns the path the runtime attaches and the function that stops the
// front end.
func attach(dir, front string, vol blockdev.Device, log *slog.Logger) (string, func() error, error) {
	switch front {
	case FrontFile:
		mnt := filepath.Join(dir, mountDir)
		if err := clearMount(dir); err != nil {
			return "", nil, err
		}
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return "", nil, err
		}
		m, err := fusefile.Mount(mnt, "disk", vol, fusefile.Options{Log: log})
		if err != nil {
			return "", nil, err
		}
		return m.Path(), func() error { return closeFile(m) }, nil
	case FrontNBD:
		sock := filepath.Join(dir, nbdSock)
		os.Remove(sock)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return "", nil, err
		}
		if err := os.Chmod(sock, 0o600); err != nil {
			ln.Close()
			return "", nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		srv := nbd.NewServer(vol, nbd.Options{Log: log})
		go func() { done <- srv.Serve(ctx, ln) }()
		return sock, func() error {
			cancel()
			err := <-done
			os.Remove(sock)
			return err
		}, nil
	}
	return "", nil, fmt.Errorf("front %q", front)
}

// clearMount clears what a block server that died left at volume
// directory dir's mount point: its mount, dead. A lazy unmount clears it (a
// loop device still holding its file keeps failing, as the disk of a lost
// node would).
func clearMount(dir string) error {
	err := unix.Unmount(filepath.Join(dir, mountDir), unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("clear the old mount: %w", err)
	}
	return nil
}

// busyWait bounds how long closeFile waits for the loop device above a
// file to let it go.
const busyWait = 10 * time.Second

// closeFile unmounts m. A sandbox's loop device lets its file go only
// once the kernel has cleared it, after the sandbox's last mount of it
// went (autoclear, asynchronous): until then the unmount is refused
// (EBUSY), and closeFile tries again, for up to busyWait.
func closeFile(m *fusefile.File) error {
	ctx, cancel := context.WithTimeout(context.Background(), busyWait)
	defer cancel()
	var err error
	backoff.Poll(ctx, backoff.Backoff{Base: 5 * time.Millisecond, Max: 200 * time.Millisecond}, func() (bool, error) {
		err = m.Close()
		return !errors.Is(err, unix.EBUSY), nil
	})
	return err
}

// growFS grows the ext4 filesystem on vol, served at volume directory dir
// through any front end, to vol's size: through a FUSE file of its own,
// mounted for the while, which e2fsck and resize2fs (other processes:
// never this one, which serves the file) open.
func growFS(dir string, vol blockdev.Device, log *slog.Logger) error {
	mnt := filepath.Join(dir, "grow")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	defer os.Remove(mnt)
	m, err := fusefile.Mount(mnt, "disk", vol, fusefile.Options{Log: log})
	if err != nil {
		return err
	}
	err = disk.GrowFS(m.Path())
	return errors.Join(err, closeFile(m))
}
