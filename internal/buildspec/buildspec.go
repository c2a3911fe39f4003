// Package buildspec is warren's template build spec: a small YAML file
// (warren.yaml) or a Dockerfile that says how to make a custom template from
// an existing one. It parses both into a Spec, validates it, says what state
// (environment, working directory, user) each step runs in, and gives each
// step a cache key over the content of its inputs, so that a builder that
// snapshots after each step rebuilds only the steps whose inputs changed.
// docs/TEMPLATES.md describes the format.
//
// It is pure logic: the only I/O is reading the build context directory a
// copy step names (Dir). It is not the builder: it runs nothing, fetches
// nothing, resolves no template and starts no sandbox.
package buildspec

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"warren/api"
)

// Bounds on a spec. Each is checked by Parse, ParseDockerfile or Validate
// and reported with a clear error.
const (
	MaxFileSize         = 1 << 20  // bytes of a warren.yaml or Dockerfile
	MaxSteps            = 256      // steps of a spec
	MaxCommand          = 64 << 10 // bytes of a run command (shell or argv), a start command or check
	MaxPackages         = 1024     // packages of one apt or pip step
	DefaultReadyTimeout = 30 * time.Second
	MaxReadyTimeout     = 600 * time.Second
	MaxTimeout          = 2 * time.Hour // limits.timeout_seconds
	MinDiskMB           = 64
	MaxDiskMB           = 256 << 10
)

// Spec is a parsed build spec.
type Spec struct {
	// From is the template the build starts from, as written: NAME or
	// NAME@VERSION (ParseRef splits it).
	From string
	// Network is the egress policy of the build sandbox for run and pip
	// steps; nil means the server's default.
	Network *api.NetworkPolicy
	// Env is set for every step and kept in the template.
	Env   map[string]string
	Steps []Step
	// Start is a service the template starts in each new sandbox; nil for
	// none.
	Start *Start
	// Limits bound the build; zero fields mean the server's default.
	Limits Limits
}

// Kind is what a step does.
type Kind string

// The kinds of step. apt, pip, copy and run change the disk; env, workdir
// and user change only the template's metadata.
const (
	KindApt     Kind = "apt"
	KindPip     Kind = "pip"
	KindCopy    Kind = "copy"
	KindRun     Kind = "run"
	KindEnv     Kind = "env"
	KindWorkdir Kind = "workdir"
	KindUser    Kind = "user"
)

var kinds = []Kind{KindApt, KindPip, KindCopy, KindRun, KindEnv, KindWorkdir, KindUser}

// Step is one step of a build. Only the fields of its Kind are set (Validate
// refuses others).
type Step struct {
	Kind Kind
	// Line is the step's line in the source file (YAML or Dockerfile), 0
	// when unknown. It is for errors only: it is not part of the step's key.
	Line int

	Packages []string // apt, pip

	IndexURL, ExtraIndexURL string // pip, optional

	// Src is a clean relative path in the build context ("." for all of it).
	// Dest is absolute and clean, with a trailing slash when it names a
	// directory to copy into: a file goes to Dest+base(Src) then, and
	// without the slash to Dest itself. A directory's contents always go to
	// Dest. This is Docker's COPY rule.
	Src, Dest string   // copy
	Mode      *uint32  // copy, optional: the mode of the copied files (directories get it too)
	Owner     string   // copy, optional: NAME, UID, NAME:GROUP or UID:GID
	Shell     string   // run: a shell command (sh -c), or
	Argv      []string // run: an argv

	Env  map[string]string // env
	Dir  string            // workdir: absolute and clean
	User string            // user: a name or a numeric uid
}

// Layered reports whether the step changes the disk (apt, pip, copy, run)
// rather than only the template's metadata (env, workdir, user). A builder
// snapshots after layered steps only.
func (s Step) Layered() bool {
	switch s.Kind {
	case KindApt, KindPip, KindCopy, KindRun:
		return true
	}
	return false
}

// Command returns the argv to run in the build sandbox for a run or pip
// step, in the step's State. It returns nil for the other kinds: the builder
// installs an apt step's packages itself (from packages the host fetched),
// copies a copy step's files, and applies metadata steps.
func (s Step) Command() []string {
	switch s.Kind {
	case KindRun:
		if s.Argv != nil {
			return append([]string(nil), s.Argv...)
		}
		return []string{"/bin/sh", "-c", s.Shell}
	case KindPip:
		argv := []string{"python3", "-m", "pip", "install", "--no-cache-dir", "--break-system-packages"}
		if s.IndexURL != "" {
			argv = append(argv, "--index-url", s.IndexURL)
		}
		if s.ExtraIndexURL != "" {
			argv = append(argv, "--extra-index-url", s.ExtraIndexURL)
		}
		// Validate refuses a requirement that starts with "-"; "--" makes
		// sure none is taken for an option anyway.
		return append(append(argv, "--"), s.Packages...)
	}
	return nil
}

// Start is a service a template starts in each new sandbox.
type Start struct {
	Command string // a shell command (sh -c)
	// Ready is a shell command retried until it succeeds or ReadyTimeout
	// passes; empty for none.
	Ready        string
	ReadyTimeout time.Duration // 1s to MaxReadyTimeout; Parse sets DefaultReadyTimeout
}

// Limits bound a build, within the server's maximums. Zero means the
// server's default.
type Limits struct {
	Timeout time.Duration // the whole build: 1s to MaxTimeout
	DiskMB  int64         // the template's disk: MinDiskMB to MaxDiskMB
}

// State is what the steps have set so far: what a step runs with and, after
// the last step, the template's metadata. An empty Workdir or User means the
// base template's, which only the builder knows.
type State struct {
	Env     map[string]string // never nil
	Workdir string
	User    string
}

// States returns the state each step runs in (len(s.Steps) of them) and the
// final state. The spec's Env is applied first; an env step adds to the
// environment (its keys replace earlier values), workdir and user steps
// replace theirs. The maps returned are the caller's.
func (s *Spec) States() (each []State, final State) {
	cur := State{Env: maps.Clone(s.Env)}
	if cur.Env == nil {
		cur.Env = map[string]string{}
	}
	each = make([]State, len(s.Steps))
	for i, st := range s.Steps {
		each[i] = State{Env: maps.Clone(cur.Env), Workdir: cur.Workdir, User: cur.User}
		switch st.Kind {
		case KindEnv:
			maps.Copy(cur.Env, st.Env)
		case KindWorkdir:
			cur.Workdir = st.Dir
		case KindUser:
			cur.User = st.User
		}
	}
	return each, cur
}

// Error is a problem with a spec, said for its author. Parse,
// ParseDockerfile, Load and Validate return one (possibly wrapped).
type Error struct {
	Line  int    // in the source file; 0 when unknown
	Step  int    // 1-based; 0 when the problem is not in a step
	Kind  Kind   // the step's kind, when known
	Field string // what is wrong when not a step: "from", "start.command", a Dockerfile instruction...
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	switch {
	case e.Step > 0 && e.Kind != "":
		fmt.Fprintf(&b, "step %d (%s): ", e.Step, e.Kind)
	case e.Step > 0:
		fmt.Fprintf(&b, "step %d: ", e.Step)
	case e.Field != "":
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

var (
	templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	versionRE      = regexp.MustCompile(`^[1-9][0-9]{0,8}$`)
)

// ParseRef splits a template reference, NAME or NAME@VERSION, into its name
// and version (0 when it names no version: the latest).
func ParseRef(ref string) (name string, version int, err error) {
	name, v, hasVersion := strings.Cut(ref, "@")
	if !templateNameRE.MatchString(name) {
		return "", 0, fmt.Errorf("%q is not a warren template: a name is 1 to 63 characters of a-z 0-9 . _ -, starting with a-z or 0-9, optionally followed by @VERSION", ref)
	}
	if hasVersion {
		if !versionRE.MatchString(v) {
			return "", 0, fmt.Errorf("%q: the version after @ must be a positive integer", ref)
		}
		version, _ = strconv.Atoi(v)
	}
	return name, version, nil
}

// suiteRE is a Debian suite's code name (bookworm, trixie, sid).
var suiteRE = regexp.MustCompile(`^[a-z]{2,20}$`)

// DebianSuite reports whether from names a Debian suite, debian:SUITE, a
// base the builder makes with debootstrap, and returns the suite.
func DebianSuite(from string) (string, bool) {
	suite, ok := strings.CutPrefix(from, "debian:")
	return suite, ok && suiteRE.MatchString(suite)
}

// Load parses a spec file by its name: a Dockerfile for "Dockerfile",
// "*.Dockerfile" and "Dockerfile.*" (in any case), YAML otherwise. Errors
// begin with the file's name.
func Load(data []byte, filename string) (*Spec, error) {
	parse := Parse
	if IsDockerfile(filename) {
		parse = ParseDockerfile
	}
	s, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return s, nil
}

// IsDockerfile reports whether Load reads filename as a Dockerfile.
func IsDockerfile(filename string) bool {
	base := strings.ToLower(filepath.Base(filename))
	return base == "dockerfile" || strings.HasSuffix(base, ".dockerfile") || strings.HasPrefix(base, "dockerfile.")
}
