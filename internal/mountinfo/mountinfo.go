// Package mountinfo parses the kernel's table of mounts, /proc/self/mountinfo
// (see proc(5)), into the few fields warren reads: where each mount is, its
// filesystem type, its source and its superblock options.
//
// It only reads: it does not mount, unmount or watch for changes, and it does
// not resolve which mount a path is on. Callers pick mounts out of the list.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	// Point is where the filesystem is mounted, unescaped.
	Point string
	// FSType is the filesystem type, such as "ext4" or "cgroup2".
	FSType string
	// Source is what is mounted, unescaped: a device such as /dev/loop3, or
	// a name such as "proc" or "tmpfs"; it may be empty.
	Source string
	// SuperOptions are the superblock options, such as "rw" or a cgroup v1
	// controller's name, split at commas and otherwise as the kernel writes
	// them.
	SuperOptions []string
}

// Parse parses r in the mountinfo format of proc(5) and returns its mounts in
// the order listed, which is mount order: a mount comes after the mounts it
// covers. A line looks like:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// A line without the lone "-" ending the optional fields, without the
// filesystem type, source and superblock options after it, or with an empty
// mount point, type or options, is an error.
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	// Superblock options can be long (overlayfs layer lists); the default
	// 64 KiB limit would fail on them.
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	// Lines end at '\n' only: the kernel does not escape '\r' inside
	// options, which bufio.ScanLines would strip from a line's end.
	sc.Split(lines)
	for sc.Scan() {
		// The kernel writes one space between fields and escapes whitespace
		// inside them, so an empty field (a mount whose source is "") is two
		// spaces in a row: splitting on runs of spaces would shift the fields.
		fields := strings.Split(sc.Text(), " ")
		// id parent major:minor root point options [optional...] - type source superoptions
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[4] == "" || fields[sep+1] == "" || fields[sep+3] == "" {
			return nil, fmt.Errorf("parse mountinfo: malformed line %q", sc.Text())
		}
		mounts = append(mounts, Mount{
			Point:        unescape(fields[4]),
			FSType:       fields[sep+1],
			Source:       unescape(fields[sep+2]),
			SuperOptions: strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return mounts, nil
}

// lines is a bufio.SplitFunc that splits at '\n' and keeps everything else.
func lines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// unescape undoes the kernel's octal escapes in a mountinfo field: \040 for
// a space, \011 for a tab, \012 for a newline, \134 for a backslash.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
