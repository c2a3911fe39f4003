package buildspec

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/internal/network/policy"
)

var (
	aptPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,127}(=[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,127})?$`)
	// A pip requirement is a name, extras and version specifiers, from a
	// conservative set of characters: no spaces, quotes, ";" (markers), "@"
	// or "/" (URLs and paths), and a letter or digit first, so that it is
	// never taken for an option or a local path.
	pipRequirementRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\[\]<>=!~,-]{0,255}$`)
	envKeyRE         = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)
	userNameRE       = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// Validate checks every rule of the format (docs/TEMPLATES.md) and returns
// the first problem found, in the order of the file, as an *Error. Parse and
// ParseDockerfile call it; a Spec made in code should be checked with it
// before Keys.
func (s *Spec) Validate() error {
	if s.From == "" {
		return fieldError("from", "required: the template to build from, NAME or NAME@VERSION, or a Debian suite, debian:SUITE")
	}
	if _, ok := DebianSuite(s.From); !ok {
		if _, _, err := ParseRef(s.From); err != nil {
			return fieldError("from", err.Error())
		}
	}
	if s.Network != nil {
		if _, err := policy.Parse(*s.Network); err != nil {
			return fieldError("network", strings.TrimPrefix(err.Error(), "network."))
		}
	}
	if msg := checkEnv(s.Env); msg != "" {
		return fieldError("env", msg)
	}
	if len(s.Steps) > MaxSteps {
		return fieldError("steps", fmt.Sprintf("%d steps, at most %d", len(s.Steps), MaxSteps))
	}
	for i, st := range s.Steps {
		if msg := st.check(); msg != "" {
			return &Error{Line: st.Line, Step: i + 1, Kind: st.Kind, Msg: msg}
		}
	}
	if s.Start != nil {
		if err := s.Start.check(); err != nil {
			return err
		}
	}
	return s.Limits.check()
}

func fieldError(field, msg string) *Error { return &Error{Field: field, Msg: msg} }

// check returns what is wrong with the step, or "".
func (st Step) check() string {
	if !slices.Contains(kinds, st.Kind) {
		return fmt.Sprintf("unknown kind %q: a step is one of %s", st.Kind, kindList())
	}
	if msg := st.checkStray(); msg != "" {
		return msg
	}
	switch st.Kind {
	case KindApt:
		return checkPackages(st.Packages, aptPackageRE,
			"want a Debian package name (2 to 128 characters of a-z 0-9 + . -, starting with a-z or 0-9), optionally with =VERSION")
	case KindPip:
		if msg := checkPackages(st.Packages, pipRequirementRE,
			"want a package name with optional extras and versions, made of letters, digits and . _ - [ ] < > = ! ~ , only, starting with a letter or digit (no spaces, URLs, paths or options)"); msg != "" {
			return msg
		}
		if msg := checkURL("index_url", st.IndexURL); msg != "" {
			return msg
		}
		return checkURL("extra_index_url", st.ExtraIndexURL)
	case KindCopy:
		return st.checkCopy()
	case KindRun:
		return st.checkRun()
	case KindEnv:
		if len(st.Env) == 0 {
			return "sets no variable"
		}
		return checkEnv(st.Env)
	case KindWorkdir:
		return checkAbs("workdir", st.Dir)
	case KindUser:
		if !validUser(st.User) {
			return fmt.Sprintf("user %q: want a user name (a-z 0-9 _ -, up to 32 characters, not starting with a digit or -) or a numeric uid", st.User)
		}
	}
	return ""
}

// checkStray refuses a field that the step's kind does not take, so that
// nothing a builder would ignore changes a step's key.
func (st Step) checkStray() string {
	for _, f := range []struct {
		name  string
		set   bool
		kinds []Kind
	}{
		{"packages", st.Packages != nil, []Kind{KindApt, KindPip}},
		{"index_url", st.IndexURL != "", []Kind{KindPip}},
		{"extra_index_url", st.ExtraIndexURL != "", []Kind{KindPip}},
		{"src", st.Src != "", []Kind{KindCopy}},
		{"dest", st.Dest != "", []Kind{KindCopy}},
		{"mode", st.Mode != nil, []Kind{KindCopy}},
		{"owner", st.Owner != "", []Kind{KindCopy}},
		{"a shell command", st.Shell != "", []Kind{KindRun}},
		{"argv", st.Argv != nil, []Kind{KindRun}},
		{"env", st.Env != nil, []Kind{KindEnv}},
		{"dir", st.Dir != "", []Kind{KindWorkdir}},
		{"user", st.User != "", []Kind{KindUser}},
	} {
		if f.set && !slices.Contains(f.kinds, st.Kind) {
			article := "a"
			if st.Kind == KindApt || st.Kind == KindEnv {
				article = "an"
			}
			return fmt.Sprintf("%s %s step takes no %s", article, st.Kind, f.name)
		}
	}
	return ""
}

func checkPackages(pkgs []string, re *regexp.Regexp, want string) string {
	if len(pkgs) == 0 {
		return "lists no package"
	}
	if len(pkgs) > MaxPackages {
		return fmt.Sprintf("%d packages, at most %d", len(pkgs), MaxPackages)
	}
	for _, p := range pkgs {
		if !re.MatchString(p) {
			return fmt.Sprintf("package %q: %s", p, want)
		}
	}
	return ""
}

func checkURL(field, u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || len(u) > 2048 ||
		strings.ContainsFunc(u, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Sprintf("%s %q: want an http:// or https:// URL", field, u)
	}
	return ""
}

func (st Step) checkCopy() string {
	switch {
	case st.Src == "":
		return "no src: the path to copy, relative to the build context"
	case strings.ContainsRune(st.Src, 0):
		return "src contains a NUL byte"
	case path.IsAbs(st.Src):
		return fmt.Sprintf("src %q: must be relative to the build context", st.Src)
	case st.Src == ".." || strings.HasPrefix(st.Src, "../"):
		return fmt.Sprintf("src %q is outside the build context", st.Src)
	case path.Clean(st.Src) != st.Src:
		return fmt.Sprintf("src %q is not clean: write %q", st.Src, path.Clean(st.Src))
	case st.Dest == "":
		return "no dest: the absolute path to copy to"
	case strings.ContainsRune(st.Dest, 0):
		return "dest contains a NUL byte"
	case !path.IsAbs(st.Dest):
		return fmt.Sprintf("dest %q: must be an absolute path", st.Dest)
	case cleanDest(st.Dest) != st.Dest:
		return fmt.Sprintf("dest %q is not clean: write %q", st.Dest, cleanDest(st.Dest))
	case st.Mode != nil && *st.Mode > 0o7777:
		return fmt.Sprintf("mode %#o: at most 07777", *st.Mode)
	case st.Owner != "" && !validOwner(st.Owner):
		return fmt.Sprintf("owner %q: want USER, UID, USER:GROUP or UID:GID", st.Owner)
	}
	return ""
}

// cleanDest cleans an absolute copy destination, keeping one trailing slash
// (a directory to copy into) when d has one or ends in "/.".
func cleanDest(d string) string {
	c := path.Clean(d)
	if c != "/" && (strings.HasSuffix(d, "/") || strings.HasSuffix(d, "/.")) {
		c += "/"
	}
	return c
}

func (st Step) checkRun() string {
	switch {
	case st.Shell != "" && st.Argv != nil:
		return "has both a shell command and an argv"
	case st.Argv != nil:
		if len(st.Argv) == 0 || st.Argv[0] == "" {
			return "the argv is empty"
		}
		n := 0
		for _, a := range st.Argv {
			n += len(a) + 1
			if strings.ContainsRune(a, 0) {
				return "the argv contains a NUL byte"
			}
		}
		if n > MaxCommand {
			return fmt.Sprintf("the argv is %d bytes, at most %d", n, MaxCommand)
		}
		return ""
	}
	return checkCommand("the command", st.Shell, true)
}

func checkCommand(what, cmd string, required bool) string {
	switch {
	case strings.TrimSpace(cmd) == "" && required:
		return what + " is empty"
	case len(cmd) > MaxCommand:
		return fmt.Sprintf("%s is %d bytes, at most %d", what, len(cmd), MaxCommand)
	case strings.ContainsRune(cmd, 0):
		return what + " contains a NUL byte"
	}
	return ""
}

func checkEnv(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !envKeyRE.MatchString(k) {
			return fmt.Sprintf("variable name %q: want letters, digits and _, not starting with a digit", k)
		}
		if strings.ContainsRune(env[k], 0) {
			return fmt.Sprintf("the value of %s contains a NUL byte", k)
		}
	}
	return ""
}

func checkAbs(what, p string) string {
	switch {
	case strings.ContainsRune(p, 0):
		return what + " contains a NUL byte"
	case !path.IsAbs(p):
		return fmt.Sprintf("%s %q: must be an absolute path", what, p)
	case path.Clean(p) != p:
		return fmt.Sprintf("%s %q is not clean: write %q", what, p, path.Clean(p))
	}
	return ""
}

// validUser reports whether u is a user name or a numeric uid.
func validUser(u string) bool {
	if userNameRE.MatchString(u) {
		return true
	}
	id, err := strconv.ParseUint(u, 10, 32)
	return err == nil && id < 1<<32-1 && (u == "0" || u[0] != '0')
}

func validOwner(o string) bool {
	u, g, hasGroup := strings.Cut(o, ":")
	return validUser(u) && (!hasGroup || validUser(g))
}

func (st *Start) check() error {
	if msg := checkCommand("the command", st.Command, true); msg != "" {
		return fieldError("start.command", msg)
	}
	if msg := checkCommand("the check", st.Ready, false); msg != "" {
		return fieldError("start.ready", msg)
	}
	if st.ReadyTimeout < time.Second || st.ReadyTimeout > MaxReadyTimeout {
		return fieldError("start.ready_timeout_seconds", fmt.Sprintf("%v: want 1 to %d seconds", st.ReadyTimeout, int(MaxReadyTimeout/time.Second)))
	}
	return nil
}

func (l Limits) check() error {
	if l.Timeout != 0 && (l.Timeout < time.Second || l.Timeout > MaxTimeout) {
		return fieldError("limits.timeout_seconds", fmt.Sprintf("%v: want 1 to %d seconds", l.Timeout, int(MaxTimeout/time.Second)))
	}
	if l.DiskMB != 0 && (l.DiskMB < MinDiskMB || l.DiskMB > MaxDiskMB) {
		return fieldError("limits.disk_mb", fmt.Sprintf("%d: want %d to %d", l.DiskMB, MinDiskMB, MaxDiskMB))
	}
	return nil
}

func kindList() string { return strings.Join(kindNames(), ", ") }
