//go:build linux

package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrShrink is returned by Grow when asked for a size below the current one.
var ErrShrink = errors.New("disk images cannot shrink")

// copyChunk is how much data copySparse copies between checks of ctx.
const copyChunk = 64 << 20

// Clone makes dst a copy of the image src: a copy-on-write clone sharing
// src's extents in the reflink modes (milliseconds whatever the size), a copy
// of src's data that keeps its holes in CloneCopy mode. Both must be in Dir
// for a reflink. dst must not exist; it is created with mode 0600 (images
// hold tenant data) and removed again if the clone fails or ctx ends. src
// must not change during the clone: freeze the filesystem in it first.
func (p *Pool) Clone(ctx context.Context, src, dst string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	if p.mode == CloneCopy {
		err = copySparse(ctx, in, out)
	} else {
		err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("clone disk: %w", err)
	}
	return nil
}

// copySparse copies the data extents of in to out (found with SEEK_DATA and
// SEEK_HOLE) and leaves holes where in has them, so that copying a mostly
// empty image costs only its data.
func copySparse(ctx context.Context, in, out *os.File) error {
	st, err := in.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if err := out.Truncate(size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := in.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := in.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		n := min(hole-data, copyChunk)
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		// Between two *os.File, io.CopyN copies in the kernel
		// (copy_file_range) where it can.
		if _, err := io.CopyN(out, in, n); err != nil {
			return err
		}
		off = data + n
	}
	return nil
}

// Grow enlarges the ext4 filesystem in the image at path to size bytes: it
// replays the filesystem's journal (a snapshot's clone of a mounted disk
// holds one to replay, as after a power cut; resize2fs would not, and the
// replay at the next mount would write the old layout back over the new),
// extends the file (sparse) and runs resize2fs. The image must not be
// mounted or attached. Asking for less than the current size returns an
// error wrapping ErrShrink; asking for the current size makes the
// filesystem fill the file, which finishes a Grow that was interrupted.
func (p *Pool) Grow(path string, size int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("grow disk: %w", err)
	}
	if size < st.Size() {
		return fmt.Errorf("grow disk to %d bytes: it has %d: %w", size, st.Size(), ErrShrink)
	}
	if err := os.Truncate(path, size); err != nil {
		return fmt.Errorf("grow disk: %w", err)
	}
	return GrowFS(path)
}

// GrowFS grows the ext4 filesystem in the image at path to the image's
// size, replaying its journal first (a crash-consistent snapshot's
// filesystem needs it).
func GrowFS(path string) error {
	// e2fsck exits 1 when it changed something: the replay.
	if out, err := exec.Command("e2fsck", "-y", "-E", "journal_only", path).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return fmt.Errorf("grow disk: replay its journal: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	out, err := exec.Command("resize2fs", "-f", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("grow disk: resize2fs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// MakeExt4 makes path a new sparse image of size bytes holding an empty ext4
// filesystem whose root directory belongs to uid 0. Its blocks are 4 KiB
// whatever its size: a loop device in direct I/O mode has 4 KiB sectors,
// and mkfs would pick 1 KiB blocks for a small filesystem. path must not exist; it
// is removed again on failure.
func MakeExt4(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("make ext4: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		// Lazy journal and inode tables: the image stays sparse (a 256 GiB
		// one takes 7 MiB of the host, not the 1.1 GiB its zeroed journal
		// did), and a fresh sparse file reads as zeros anyway.
		out, err = exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-b", "4096", "-L", "warren-ws",
			"-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1",
			path, fmt.Sprintf("%dk", size>>10)).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("make ext4: %w", err)
	}
	return nil
}
