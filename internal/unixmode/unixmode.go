// Package unixmode converts between Go's fs.FileMode and the mode bits of
// chmod(2): the nine permission bits plus setuid (0o4000), setgid (0o2000)
// and sticky (0o1000), as the agent's wire protocol and the HTTP API carry
// them. fs.FileMode keeps those three in high bits of its own, so the
// numbers differ for any mode that has one.
//
// It converts only these twelve bits; a file's type is not a chmod bit and
// is dropped.
package unixmode

import "io/fs"

// FromFileMode is m's permission, setuid, setgid and sticky bits as chmod(2)
// numbers them.
func FromFileMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// ToFileMode is the fs.FileMode of chmod(2) bits u; bits above 0o7777 are
// ignored.
func ToFileMode(u uint32) fs.FileMode {
	m := fs.FileMode(u & 0o777)
	if u&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if u&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if u&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
