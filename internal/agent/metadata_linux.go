//go:build linux

package agent

import (
	"bytes"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// metadataPrefix is the extended-attribute namespace of file metadata, as
// envd keeps it: metadata KEY is the attribute "user.KEY".
const metadataPrefix = "user."

// maxEntryMetadata bounds the bytes (keys and values) of one entry's
// metadata: attributes past it, in key order, are left out of the entry.
// The sandbox sets attributes at will, and a listing holds many entries.
const maxEntryMetadata = 16 << 10

// readMetadata is the metadata of the file at p (not following a final
// symlink), or nil when it has none or the filesystem keeps no extended
// attributes.
func readMetadata(p string) map[string]string {
	buf := make([]byte, 4<<10)
	n, err := unix.Llistxattr(p, buf)
	if err == unix.ERANGE {
		buf = make([]byte, 64<<10) // XATTR_LIST_MAX
		n, err = unix.Llistxattr(p, buf)
	}
	if err != nil || n <= 0 {
		return nil
	}
	var names []string
	for name := range bytes.SplitSeq(buf[:n], []byte{0}) {
		if s := string(name); strings.HasPrefix(s, metadataPrefix) && len(s) > len(metadataPrefix) {
			names = append(names, s)
		}
	}
	slices.Sort(names)
	var md map[string]string
	budget := maxEntryMetadata
	value := make([]byte, 4<<10)
	for _, name := range names {
		key := name[len(metadataPrefix):]
		if len(key) >= budget {
			break
		}
		sz, err := unix.Lgetxattr(p, name, value)
		if err == unix.ERANGE {
			value = make([]byte, 64<<10) // XATTR_SIZE_MAX
			sz, err = unix.Lgetxattr(p, name, value)
		}
		if err != nil {
			continue // removed meanwhile
		}
		if len(key)+sz > budget {
			break
		}
		budget -= len(key) + sz
		if md == nil {
			md = make(map[string]string)
		}
		md[key] = string(value[:sz])
	}
	return md
}
