package agent

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// FuzzResolvePath checks resolvePath against an independent model of "does
// the path climb above /": the joined path is cleaned under a sentinel
// directory whose name no input can contain (it holds a NUL byte), and it
// climbs iff the result leaves the sentinel. An accepted path is absolute,
// clean, free of NUL bytes and ".." elements; a refused one is
// CodeInvalidArgument. With a sound home (absolute, no NUL, not climbing
// itself) or an absolute path, it is refused exactly when it is empty,
// holds a NUL byte or climbs, and is otherwise the cleaned join. The home
// comes from the sandbox's /etc/passwd, so it is input too: a relative path
// from an unsound home may be refused, but what is accepted must still be
// absolute, clean and NUL-free.
func FuzzResolvePath(f *testing.F) {
	for _, s := range [][2]string{
		{"/etc/passwd", "/root"},
		{"a/b", "/root"},
		{".", "/root"},
		{"..", "/root"},
		{"../..", "/root"},
		{"/a/../b//c/.", "/"},
		{"x", ""},
		{"x", "/"},
		{"x", "//"},
		{"/../etc/x", "/"},
		{"/a/../../etc", "/"},
		{"../x", "/"},
		{"a/../../b", "/home/u"},
		{"...", "/"},
		{"./../root", "/"},
		{"", "/root"},
		{"a\x00b", "/"},
		{"x", "/home/../../"},
		{"/etc/passwd", "relative/home"},
		{"/x/", "/"},
		{"a//../b", "/h"},
	} {
		f.Add(s[0], s[1])
	}
	const sentinel = "/\x00sandbox"
	// within reports whether clean path c, made under the sentinel, stayed
	// in it.
	within := func(c string) bool { return c == sentinel || strings.HasPrefix(c, sentinel+"/") }
	f.Fuzz(func(t *testing.T, p, home string) {
		got, err := resolvePath(p, home)
		relative := !strings.HasPrefix(p, "/")
		joined := p
		if relative {
			h := home
			if h == "" {
				h = "/"
			}
			joined = strings.TrimSuffix(h, "/") + "/" + p
		}
		soundHome := home == "" || strings.HasPrefix(home, "/") && strings.IndexByte(home, 0) < 0 && within(path.Clean(sentinel+home))
		strict := !relative || soundHome
		checked := p != "" && strings.IndexByte(p, 0) < 0 // else refused before the walk
		climbs := checked && !within(path.Clean(sentinel+"/"+joined))
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("resolvePath(%q, %q): %v, want CodeInvalidArgument", p, home, err)
			}
			if strict && errors.Is(err, errPathEscapes) != climbs {
				t.Fatalf("resolvePath(%q, %q): %v; climbs above / = %v", p, home, err, climbs)
			}
			if strict && !climbs && checked {
				t.Fatalf("resolvePath(%q, %q) refused a path that neither is empty, holds NUL nor climbs: %v", p, home, err)
			}
			return
		}
		if !checked || strict && climbs {
			t.Fatalf("resolvePath(%q, %q) = %q, want it refused", p, home, got)
		}
		if !strings.HasPrefix(got, "/") || path.Clean(got) != got {
			t.Fatalf("resolvePath(%q, %q) = %q: not an absolute clean path", p, home, got)
		}
		if strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("resolvePath(%q, %q) = %q holds a NUL byte", p, home, got)
		}
		for _, elem := range strings.Split(got, "/") {
			if elem == ".." {
				t.Fatalf("resolvePath(%q, %q) = %q holds ..", p, home, got)
			}
		}
		if want := path.Clean(joined); strict && got != want {
			t.Fatalf("resolvePath(%q, %q) = %q, want %q", p, home, got, want)
		}
	})
}

// FuzzParseAccounts checks parsePasswd and parseGroup on arbitrary file
// contents: no panic, and every entry is one of the file's lines read as
// the format says, with a non-empty name and fields free of ':' and line
// ends (so no entry can be spliced from two lines).
func FuzzParseAccounts(f *testing.F) {
	for _, s := range []string{
		"root:x:0:0:root:/root:/bin/sh\n# comment\nbroken line\nbad:x:notanumber:1::/:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
		"root:x:0:\nalice:x:1000:\ndocker:x:999:bob,alice\nwheel:x:10: alice , ,bob,\n",
		"",
		"\n\n   \n#only:a:comment\n",
		":x:0:0::/:/bin/sh\n",
		"u:x:4294967295:4294967296::/:/bin/sh\n",
		"u:x:-1:+1::/:/bin/sh\n",
		"u:x:1:1::/h:/bin/sh:extra:fields\n",
		"u:x:1:1::/h\n",
		"  spaced:x:1:1::/home/spaced:/bin/sh  \r\n",
		"u:x:1:1::/h:/bin/sh\r\rv:x:2:2::/v:/bin/sh",
		"g:x:5:a\x00b,c\n",
		"u:x:01:001::/h:/s\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := accountLines(data)
		for _, u := range parsePasswd(data) {
			if err := checkName("user", u.name); err != nil {
				t.Fatalf("parsePasswd(%q): %v", data, err)
			}
			if strings.ContainsAny(u.home, ":\n") {
				t.Fatalf("parsePasswd(%q): home %q holds ':' or a line end", data, u.home)
			}
			if !hasLine(lines, func(f []string) bool {
				return len(f) >= 7 && f[0] == u.name && num(f[2]) == uint64(u.uid) && num(f[3]) == uint64(u.gid) && f[5] == u.home
			}) {
				t.Fatalf("parsePasswd(%q): entry %+v is not one of its lines", data, u)
			}
		}
		for _, g := range parseGroup(data) {
			if err := checkName("group", g.name); err != nil {
				t.Fatalf("parseGroup(%q): %v", data, err)
			}
			for _, m := range g.members {
				if m == "" || strings.ContainsAny(m, ":,\n") || strings.TrimSpace(m) != m {
					t.Fatalf("parseGroup(%q): group %q has member %q", data, g.name, m)
				}
			}
			if !hasLine(lines, func(f []string) bool {
				return len(f) >= 4 && f[0] == g.name && num(f[2]) == uint64(g.gid) && memberList(f[3]) == strings.Join(g.members, ",")
			}) {
				t.Fatalf("parseGroup(%q): entry %+v is not one of its lines", data, g)
			}
		}
	})
}

// FuzzPasswdRoundTrip writes one passwd(5) line and one group(5) line from
// fuzzed fields, as useradd would, and checks that the parsers read the
// same fields back.
func FuzzPasswdRoundTrip(f *testing.F) {
	f.Add("alice", uint32(1000), uint32(1000), "/home/alice", "docker", "alice,bob")
	f.Add("root", uint32(0), uint32(0), "/root", "root", "")
	f.Add("nobody", uint32(65534), uint32(65534), "/nonexistent", "nogroup", "x")
	f.Add("u", uint32(1<<32-1), uint32(0), "", "g", ",,a,,")
	f.Fuzz(func(t *testing.T, name string, uid, gid uint32, home, group, members string) {
		// What useradd and groupadd accept: no separators, no surrounding
		// space, no comment marker at the start of a line.
		for _, s := range []string{name, home, group, members} {
			if strings.ContainsAny(s, ":\n\r") || strings.TrimSpace(s) != s {
				return
			}
		}
		if name == "" || group == "" || name[0] == '#' || group[0] == '#' {
			return
		}
		passwd := fmt.Sprintf("# users\n%s:x:%d:%d:gecos:%s:/bin/sh\n", name, uid, gid, home)
		users := parsePasswd([]byte(passwd))
		if len(users) != 1 || users[0] != (passwdEntry{name: name, uid: uid, gid: gid, home: home}) {
			t.Fatalf("parsePasswd(%q) = %+v", passwd, users)
		}
		grp := fmt.Sprintf("%s:x:%d:%s\n", group, gid, members)
		groups := parseGroup([]byte(grp))
		if len(groups) != 1 || groups[0].name != group || groups[0].gid != gid || strings.Join(groups[0].members, ",") != memberList(members) {
			t.Fatalf("parseGroup(%q) = %+v", grp, groups)
		}
	})
}

// accountLines are the lines of an account file as the format defines
// them, split at ':'.
func accountLines(data []byte) [][]string {
	var out [][]string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

func hasLine(lines [][]string, match func([]string) bool) bool {
	for _, f := range lines {
		if match(f) {
			return true
		}
	}
	return false
}

// num is s as a uint32 id, or 1<<32 (no id) when it is not one.
func num(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 1 << 32
	}
	return n
}

// memberList is a group's member field normalized: names trimmed, empty
// ones dropped, joined with ",".
func memberList(s string) string {
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return strings.Join(out, ",")
}

// checkName refuses an account name that cannot come from one field of a
// well-formed line.
func checkName(kind, name string) error {
	if name == "" || strings.ContainsAny(name, ":\n") {
		return fmt.Errorf("%s name %q", kind, name)
	}
	return nil
}
