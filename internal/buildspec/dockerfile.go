package buildspec

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ParseDockerfile translates a Dockerfile into a Spec and validates it. It
// supports FROM (a warren template), RUN, COPY and ADD of local paths, ENV,
// ARG (with defaults; there are no build arguments), WORKDIR, USER, CMD and
// ENTRYPOINT (the template's start command), LABEL and EXPOSE (ignored),
// comments and parser directives. Any other instruction, a second stage or
// an ADD that would download or extract is an error naming it and its line.
// docs/TEMPLATES.md says what each becomes.
func ParseDockerfile(data []byte) (*Spec, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{Msg: fmt.Sprintf("the file is %d bytes, at most %d", len(data), MaxFileSize)}
	}
	instrs, escape, err := splitInstructions(data)
	if err != nil {
		return nil, err
	}
	t := &translator{escape: escape, env: map[string]string{}, args: map[string]*string{}, preArgs: map[string]*string{}, lines: map[string]int{}}
	for _, in := range instrs {
		if err := t.instruction(in); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				e = &Error{Msg: err.Error()}
			}
			if e.Line == 0 {
				e.Line = in.line
			}
			if e.Field == "" && e.Step == 0 {
				e.Field = in.cmd
			}
			return nil, e
		}
	}
	if t.spec.From == "" {
		return nil, &Error{Field: "FROM", Msg: "missing: the file must start from a warren template"}
	}
	t.start()
	s := &t.spec
	if err := s.Validate(); err != nil {
		if e := (*Error)(nil); errors.As(err, &e) && e.Line == 0 {
			e.Line = t.lines[e.Field]
		}
		return nil, err
	}
	return s, nil
}

// translator holds what the instructions so far have set.
type translator struct {
	spec    Spec
	escape  rune
	env     map[string]string  // set by ENV in this file
	args    map[string]*string // ARG since FROM; nil: declared without a value
	preArgs map[string]*string // ARG before FROM, for FROM (and for a bare ARG after it)
	workdir string             // set by WORKDIR in this file
	cmd     *command
	entry   *command
	lines   map[string]int // Validate's field → the line it came from
}

// command is a CMD or ENTRYPOINT: an exec form or a shell form.
type command struct {
	argv  []string
	shell string
	exec  bool
}

func (c *command) toArgv() []string {
	if c.exec {
		return c.argv
	}
	return []string{"/bin/sh", "-c", c.shell}
}

var unsupported = map[string]string{
	"HEALTHCHECK": "not supported: give a readiness check as start.ready in a warren.yaml",
	"VOLUME":      "not supported: a sandbox's disk is its own",
	"ONBUILD":     "not supported",
	"SHELL":       "not supported: RUN's shell form runs /bin/sh -c",
	"STOPSIGNAL":  "not supported",
	"MAINTAINER":  "not supported (it is deprecated): use LABEL",
}

func (t *translator) instruction(in instruction) error {
	if t.spec.From == "" && in.cmd != "FROM" && in.cmd != "ARG" {
		return errors.New("comes before FROM: the file must start from a warren template")
	}
	switch in.cmd {
	case "FROM":
		return t.from(in)
	case "ARG":
		return t.arg(in)
	case "RUN":
		return t.run(in)
	case "COPY", "ADD":
		return t.copy(in)
	case "ENV":
		return t.setEnv(in)
	case "WORKDIR":
		return t.setWorkdir(in)
	case "USER":
		return t.setUser(in)
	case "CMD", "ENTRYPOINT":
		return t.setCommand(in)
	case "LABEL", "EXPOSE":
		return nil // nothing in a template to keep them in
	}
	if why, ok := unsupported[in.cmd]; ok {
		return errors.New(why)
	}
	return errors.New("unknown instruction: warren supports FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT, LABEL and EXPOSE")
}

func (t *translator) addStep(in instruction, st Step) error {
	if len(t.spec.Steps) >= MaxSteps {
		return fmt.Errorf("more than %d steps", MaxSteps)
	}
	st.Line = in.line
	t.spec.Steps = append(t.spec.Steps, st)
	return nil
}

// expand expands s with the ENV and ARG values set so far (ENV first, as
// Docker has it), or with the ARGs before FROM when there is no FROM yet.
func (t *translator) expand(s string) (string, error) {
	x := expander{escape: t.escape, lookup: func(name string) (string, bool) {
		if t.spec.From == "" {
			v := t.preArgs[name]
			return derefOK(v)
		}
		if v, ok := t.env[name]; ok {
			return v, true
		}
		return derefOK(t.args[name])
	}}
	return x.expand(s)
}

func derefOK(v *string) (string, bool) {
	if v == nil {
		return "", false
	}
	return *v, true
}

// flags removes the --name=value flags that start args and returns them.
func flags(args string) (map[string]string, []string, string) {
	fl := map[string]string{}
	var order []string
	for strings.HasPrefix(args, "--") {
		word, rest, _ := strings.Cut(args, " ")
		if w, r, ok := strings.Cut(word, "\t"); ok {
			word, rest = w, r+" "+rest
		}
		name, value, _ := strings.Cut(word[2:], "=")
		fl[name] = value
		order = append(order, name)
		args = strings.TrimSpace(rest)
	}
	return fl, order, args
}

func (t *translator) from(in instruction) error {
	if t.spec.From != "" {
		return errors.New("a second one: multi-stage builds are not supported")
	}
	_, names, args := flags(in.args)
	if len(names) > 0 {
		return fmt.Errorf("--%s is not supported", names[0])
	}
	words := strings.Fields(args)
	switch {
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		return fmt.Errorf("%s %s %s: naming a stage is not supported (multi-stage builds are not)", words[0], words[1], words[2])
	case len(words) != 1:
		return errors.New("takes one warren template, NAME or NAME@VERSION")
	}
	ref, err := t.expand(words[0])
	if err != nil {
		return err
	}
	if _, ok := DebianSuite(ref); ok {
		t.spec.From = ref
		t.lines["from"] = in.line
		return nil
	}
	if _, _, err := ParseRef(ref); err != nil {
		return fmt.Errorf("%q is not a warren template (NAME or NAME@VERSION) nor a Debian suite (debian:SUITE); for an OCI image, use warren template create NAME --from-image %s", ref, ref)
	}
	t.spec.From = ref
	t.lines["from"] = in.line
	return nil
}

func (t *translator) arg(in instruction) error {
	words := splitWords(in.args, t.escape)
	if len(words) == 0 {
		return errors.New("needs NAME or NAME=default")
	}
	for _, w := range words {
		name, raw, hasValue := strings.Cut(w, "=")
		if !validEnvName(name) {
			return fmt.Errorf("%q is not a valid name", name)
		}
		var value *string
		if hasValue {
			v, err := t.expand(raw)
			if err != nil {
				return err
			}
			value = &v
		}
		if t.spec.From == "" {
			t.preArgs[name] = value
			continue
		}
		if value == nil {
			value = t.preArgs[name] // an ARG before FROM gives its default to one after
		}
		t.args[name] = value
	}
	return nil
}

func (t *translator) run(in instruction) error {
	_, names, args := flags(in.args)
	if len(names) > 0 {
		return fmt.Errorf("--%s is not supported", names[0])
	}
	if argv, ok := parseJSONArray(args); ok {
		return t.addStep(in, Step{Kind: KindRun, Argv: argv})
	}
	if hasHeredoc(args) {
		return errors.New("heredocs (<<EOF) are not supported: write the commands on continuation lines, or COPY a script and run it")
	}
	shell := substituteArgs(args, t.escape, func(name string) (string, bool) {
		if _, isEnv := t.env[name]; isEnv {
			return "", false // the shell has ENV's value
		}
		return derefOK(t.args[name])
	})
	return t.addStep(in, Step{Kind: KindRun, Shell: shell})
}

var archiveRE = regexp.MustCompile(`\.(tar|tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz|tar\.zst|tzst|tar\.lz|tar\.lzma)$`)

func (t *translator) copy(in instruction) error {
	fl, names, args := flags(in.args)
	st := Step{Kind: KindCopy}
	for _, name := range names {
		switch name {
		case "chown", "chmod":
		case "link":
			continue // Docker's layer placement: nothing to do here
		case "from":
			return errors.New("--from is not supported: multi-stage builds are not")
		default:
			return fmt.Errorf("--%s is not supported", name)
		}
		v, err := t.expand(fl[name])
		if err != nil {
			return err
		}
		if name == "chown" {
			st.Owner = v
		} else {
			m, err := strconv.ParseUint(v, 8, 32)
			if err != nil {
				return fmt.Errorf("--chmod=%s: want octal digits, such as 0644", v)
			}
			mode := uint32(m)
			st.Mode = &mode
		}
	}
	if hasHeredoc(args) {
		return errors.New("heredocs (<<EOF) are not supported: put the file in the build context")
	}
	words, ok := parseJSONArray(args)
	if !ok {
		words = strings.Fields(args)
	}
	if len(words) < 2 {
		return errors.New("needs a source and a destination")
	}
	for i, w := range words {
		v, err := t.expand(w)
		if err != nil {
			return err
		}
		words[i] = v
	}
	dest, srcs := words[len(words)-1], words[:len(words)-1]
	isDir := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.")
	if len(srcs) > 1 && !isDir {
		return errors.New("with more than one source, the destination must be a directory ending in /")
	}
	if !path.IsAbs(dest) {
		if t.workdir == "" {
			return fmt.Errorf("the relative destination %q needs an earlier absolute WORKDIR (warren cannot see the base template's)", dest)
		}
		dest = path.Join(t.workdir, dest)
	}
	if isDir {
		dest += "/"
	}
	st.Dest = cleanDest(dest)
	for _, src := range srcs {
		if in.cmd == "ADD" {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return fmt.Errorf("%s: adding a URL is not supported; download it in a RUN step", src)
			}
			if archiveRE.MatchString(strings.ToLower(src)) {
				return fmt.Errorf("%s: adding an archive is not supported (Docker would extract it); COPY it and extract it in a RUN step", src)
			}
		}
		if strings.ContainsAny(src, "*?[") {
			return fmt.Errorf("%s: wildcards are not supported; name each file or directory", src)
		}
		// Docker reads a source from the context even when it starts with /.
		st.Src = path.Clean("./" + strings.TrimLeft(src, "/"))
		if err := t.addStep(in, st); err != nil {
			return err
		}
	}
	return nil
}

func (t *translator) setEnv(in instruction) error {
	words := splitWords(in.args, t.escape)
	if len(words) == 0 {
		return errors.New("needs NAME=VALUE")
	}
	var pairs [][2]string
	if !strings.Contains(words[0], "=") {
		// The legacy form, ENV NAME VALUE: the value is the rest of the line.
		name, value, ok := strings.Cut(in.args, " ")
		if n, v, tab := strings.Cut(name, "\t"); tab {
			name, value, ok = n, v+" "+value, true
		}
		if value = strings.TrimSpace(value); !ok || value == "" {
			return fmt.Errorf("%s needs a value: ENV NAME=VALUE", name)
		}
		pairs = append(pairs, [2]string{name, value})
	} else {
		for _, w := range words {
			name, value, ok := strings.Cut(w, "=")
			if !ok {
				return fmt.Errorf("%q: want NAME=VALUE", w)
			}
			pairs = append(pairs, [2]string{name, value})
		}
	}
	// Every value is expanded with the ENV before this instruction, as
	// Docker does: ENV A=1 B=$A sees the A of before.
	set := map[string]string{}
	for _, p := range pairs {
		if !validEnvName(p[0]) {
			return fmt.Errorf("%q is not a valid variable name", p[0])
		}
		v, err := t.expand(p[1])
		if err != nil {
			return fmt.Errorf("%s: %w", p[0], err)
		}
		set[p[0]] = v
	}
	for k, v := range set {
		t.env[k] = v
	}
	return t.addStep(in, Step{Kind: KindEnv, Env: set})
}

func (t *translator) setWorkdir(in instruction) error {
	dir, err := t.expand(in.args)
	if err != nil {
		return err
	}
	if dir == "" {
		return errors.New("needs a path")
	}
	if !path.IsAbs(dir) {
		if t.workdir == "" {
			return fmt.Errorf("the relative path %q needs an earlier absolute WORKDIR (warren cannot see the base template's)", dir)
		}
		dir = path.Join(t.workdir, dir)
	}
	t.workdir = path.Clean(dir)
	return t.addStep(in, Step{Kind: KindWorkdir, Dir: t.workdir})
}

func (t *translator) setUser(in instruction) error {
	user, err := t.expand(in.args)
	if err != nil {
		return err
	}
	if u, group, ok := strings.Cut(user, ":"); ok {
		return fmt.Errorf("%s:%s: a group is not supported; give a user name or uid", u, group)
	}
	if user == "" {
		return errors.New("needs a user name or uid")
	}
	return t.addStep(in, Step{Kind: KindUser, User: user})
}

func (t *translator) setCommand(in instruction) error {
	c := &command{shell: in.args}
	if argv, ok := parseJSONArray(in.args); ok {
		c = &command{argv: argv, exec: true}
	} else if in.args == "" {
		return errors.New("needs a command")
	}
	if in.cmd == "CMD" {
		t.cmd = c
	} else {
		t.entry = c
	}
	if t.lines["start.command"] == 0 || in.cmd == "ENTRYPOINT" {
		t.lines["start.command"] = in.line
	}
	return nil
}

// start sets the spec's Start from CMD and ENTRYPOINT, combined as Docker
// combines them: an exec-form ENTRYPOINT gets CMD's argv as arguments, a
// shell-form one ignores CMD.
func (t *translator) start() {
	var argv []string
	switch {
	case t.entry != nil && t.entry.exec:
		argv = slices.Clone(t.entry.argv)
		if t.cmd != nil {
			argv = append(argv, t.cmd.toArgv()...)
		}
	case t.entry != nil:
		argv = t.entry.toArgv()
	case t.cmd != nil:
		argv = t.cmd.toArgv()
	}
	if len(argv) == 0 {
		return
	}
	command := shellJoin(argv)
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		command = argv[2]
	}
	t.spec.Start = &Start{Command: command, ReadyTimeout: DefaultReadyTimeout}
}

var shellSafeRE = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin quotes each word for sh as needed and joins them.
func shellJoin(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if shellSafeRE.MatchString(a) {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'"'"'`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
