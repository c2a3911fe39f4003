package guest

import (
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes a cpio archive in the "newc" format (the SVR4 format
// without checksums, magic 070701), the one the kernel unpacks as an
// initramfs: per entry a 110-byte header of thirteen 8-digit hex fields,
// the NUL-terminated name padded to 4 bytes, the data padded to 4 bytes;
// the archive ends with an entry named TRAILER!!!.
//
// Entries are owned by root with mtime 0, so the same inputs make the same
// archive. Names are relative ("init", "lib/modules/x.ko"); a directory must
// be written before what it holds.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error // the first write error; every later call returns it
}

// newc mode bits (the file type, as stat(2) has them).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

const cpioTrailer = "TRAILER!!!"

func newCPIOWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm uint32) error {
	return c.entry(name, cpioDir|perm&0o7777, 2, 0, 0, 0, nil)
}

// File adds a regular file of size bytes read from r.
func (c *cpioWriter) File(name string, perm uint32, size int64, r io.Reader) error {
	return c.entry(name, cpioFile|perm&0o7777, 1, size, 0, 0, r)
}

// Symlink adds a symbolic link to target.
func (c *cpioWriter) Symlink(name, target string) error {
	return c.entry(name, cpioSymlink|0o777, 1, int64(len(target)), 0, 0, strings.NewReader(target))
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) error {
	return c.entry(name, cpioCharDev|perm&0o7777, 1, 0, major, minor, nil)
}

// Close writes the trailer. It does not close the underlying writer.
func (c *cpioWriter) Close() error {
	return c.entry(cpioTrailer, 0, 1, 0, 0, 0, nil)
}

func (c *cpioWriter) entry(name string, mode, nlink uint32, size int64, rmajor, rminor uint32, data io.Reader) error {
	if c.err != nil {
		return c.err
	}
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("cpio: bad name %q", name)
	}
	if size < 0 || size > 0xffffffff {
		return fmt.Errorf("cpio: %s: size %d does not fit the newc format", name, size)
	}
	var ino uint32
	if name != cpioTrailer {
		c.ino++
		ino = c.ino
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	hdr += name + "\x00" + pad(len(hdr)+len(name)+1)
	if _, err := io.WriteString(c.w, hdr); err != nil {
		c.err = fmt.Errorf("cpio: write %s: %w", name, err)
		return c.err
	}
	if size > 0 {
		n, err := io.Copy(c.w, io.LimitReader(data, size))
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes, want %d (did it change?)", n, size)
		}
		if err == nil {
			_, err = io.WriteString(c.w, pad(int(size)))
		}
		if err != nil {
			c.err = fmt.Errorf("cpio: write %s: %w", name, err)
			return c.err
		}
	}
	return nil
}

// pad is the NULs that bring n bytes up to a multiple of 4.
func pad(n int) string { return "\x00\x00\x00"[:(4-n%4)%4] }
