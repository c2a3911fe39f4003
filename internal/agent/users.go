package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxAccountFile bounds how much of /etc/passwd or /etc/group is read: the
// files belong to the sandbox, which may make them huge.
const maxAccountFile = 8 << 20

// account is a user of the sandbox as the agent runs processes and owns files
// for it.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	home   string
	groups []uint32 // supplementary groups, the primary one included
}

// userDB reads the sandbox's /etc/passwd and /etc/group (pure Go: the agent
// is built without cgo) and rereads them when they change.
type userDB struct {
	passwdPath string
	groupPath  string

	mu        sync.Mutex // guards the fields below
	passwdSig fileSig
	groupSig  fileSig
	users     []passwdEntry
	groupList []groupEntry
}

type fileSig struct {
	size  int64
	mtime time.Time
	ok    bool
}

type passwdEntry struct {
	name string
	uid  uint32
	gid  uint32
	home string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

func newUserDB(passwdPath, groupPath string) *userDB {
	return &userDB{passwdPath: passwdPath, groupPath: groupPath}
}

// refresh rereads the files whose size or mtime changed. mu must be held.
func (db *userDB) refresh() {
	if sig, changed := db.changed(db.passwdPath, db.passwdSig); changed {
		db.passwdSig = sig
		db.users = nil
		if data, err := readBounded(db.passwdPath); err == nil {
			db.users = parsePasswd(data)
		}
	}
	if sig, changed := db.changed(db.groupPath, db.groupSig); changed {
		db.groupSig = sig
		db.groupList = nil
		if data, err := readBounded(db.groupPath); err == nil {
			db.groupList = parseGroup(data)
		}
	}
}

func (db *userDB) changed(path string, old fileSig) (fileSig, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}, old.ok
	}
	sig := fileSig{size: fi.Size(), mtime: fi.ModTime(), ok: true}
	return sig, sig != old
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxAccountFile))
}

// lookup finds the account named by spec: a user name, or a numeric uid
// (which need not be in /etc/passwd: it then gets gid = uid and home "/").
// An empty spec means the agent's own user: root, in a sandbox; an agent
// that is not root (serving in a test's process) can act only as itself.
func (db *userDB) lookup(spec string) (*account, error) {
	if spec == "" {
		spec = strconv.Itoa(os.Geteuid())
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	var found *passwdEntry
	uid, numErr := strconv.ParseUint(spec, 10, 32)
	for i := range db.users {
		u := &db.users[i]
		if u.name == spec || (numErr == nil && u.uid == uint32(uid)) {
			found = u
			break
		}
	}
	if found == nil {
		if numErr != nil || uid == 1<<32-1 {
			return nil, fmt.Errorf("unknown user %q", spec)
		}
		home := "/"
		if uid == 0 {
			home = "/root"
		}
		return &account{name: spec, uid: uint32(uid), gid: uint32(uid), home: home, groups: []uint32{uint32(uid)}}, nil
	}
	acc := &account{name: found.name, uid: found.uid, gid: found.gid, home: found.home, groups: []uint32{found.gid}}
	if acc.home == "" {
		acc.home = "/"
	}
	for _, g := range db.groupList {
		if g.gid == found.gid {
			continue
		}
		for _, m := range g.members {
			if m == found.name {
				acc.groups = append(acc.groups, g.gid)
				break
			}
		}
	}
	return acc, nil
}

// userName is the name of uid, or the number when it has none.
func (db *userDB) userName(uid uint32) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	for _, u := range db.users {
		if u.uid == uid {
			return u.name
		}
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// groupName is the name of gid, or the number when it has none.
func (db *userDB) groupName(gid uint32) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	for _, g := range db.groupList {
		if g.gid == gid {
			return g.name
		}
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// parsePasswd parses passwd(5) lines, skipping malformed ones.
func parsePasswd(data []byte) []passwdEntry {
	var out []passwdEntry
	forEachLine(data, func(line string) {
		f := strings.Split(line, ":")
		if len(f) < 7 || f[0] == "" {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid), home: f[5]})
	})
	return out
}

// parseGroup parses group(5) lines, skipping malformed ones.
func parseGroup(data []byte) []groupEntry {
	var out []groupEntry
	forEachLine(data, func(line string) {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			return
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return
		}
		var members []string
		for m := range strings.SplitSeq(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: f[0], gid: uint32(gid), members: members})
	})
	return out
}

func forEachLine(data []byte, fn func(string)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fn(line)
	}
}
