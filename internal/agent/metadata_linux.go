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
	// Most files have no attributes: one syscall, no allocation.
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, min(size, 64<<10)) // XATTR_LIST_MAX
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil // changed meanwhile (ERANGE), or gone
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
	for _, name := range names {
		key := name[len(metadataPrefix):]
		size, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			continue // removed meanwhile
		}
		if len(key)+size > budget {
			break
		}
		value := make([]byte, size)
		n, err := unix.Lgetxattr(p, name, value)
		if err != nil {
			continue // removed or grown meanwhile
		}
		budget -= len(key) + n
		if md == nil {
			md = make(map[string]string)
		}
		md[key] = string(value[:n])
	}
	return md
}
