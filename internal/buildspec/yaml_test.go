package buildspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// example is the spec of docs/TEMPLATES.md's format section.
const example = `from: default            # a warren template
network:
  allow: [pypi.org, files.pythonhosted.org]
env: {LANG: C.UTF-8}
steps:
  - apt: [python3-pip, nodejs]
  - pip: [numpy==2.1.0, pandas]
  - pip: {packages: [torch], index_url: "https://download.pytorch.org/whl/cpu", extra_index_url: "http://mirror.internal/simple"}
  - copy: {src: app/, dest: /opt/app/, mode: "0644", owner: "user"}
  - run: pip install -e /opt/app
  - run: [python3, -c, "print(1)"]
  - env: {APP_MODE: prod}
  - workdir: /opt/app/
  - user: user
start:
  command: python3 -m http.server 8000
  ready: curl -sf http://127.0.0.1:8000/
  ready_timeout_seconds: 45
limits:
  timeout_seconds: 1800
  disk_mb: 8192
`

func TestParseExample(t *testing.T) {
	got, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o644)
	want := &Spec{
		From:    "default",
		Network: &api.NetworkPolicy{Allow: []string{"pypi.org", "files.pythonhosted.org"}},
		Env:     map[string]string{"LANG": "C.UTF-8"},
		Steps: []Step{
			{Kind: KindApt, Line: 6, Packages: []string{"python3-pip", "nodejs"}},
			{Kind: KindPip, Line: 7, Packages: []string{"numpy==2.1.0", "pandas"}},
			{Kind: KindPip, Line: 8, Packages: []string{"torch"}, IndexURL: "https://download.pytorch.org/whl/cpu", ExtraIndexURL: "http://mirror.internal/simple"},
			{Kind: KindCopy, Line: 9, Src: "app", Dest: "/opt/app/", Mode: &mode, Owner: "user"},
			{Kind: KindRun, Line: 10, Shell: "pip install -e /opt/app"},
			{Kind: KindRun, Line: 11, Argv: []string{"python3", "-c", "print(1)"}},
			{Kind: KindEnv, Line: 12, Env: map[string]string{"APP_MODE": "prod"}},
			{Kind: KindWorkdir, Line: 13, Dir: "/opt/app"},
			{Kind: KindUser, Line: 14, User: "user"},
		},
		Start:  &Start{Command: "python3 -m http.server 8000", Ready: "curl -sf http://127.0.0.1:8000/", ReadyTimeout: 45 * time.Second},
		Limits: Limits{Timeout: 30 * time.Minute, DiskMB: 8192},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
		for i := range min(len(got.Steps), len(want.Steps)) {
			if !reflect.DeepEqual(got.Steps[i], want.Steps[i]) {
				t.Errorf("step %d: got %+v, want %+v", i+1, got.Steps[i], want.Steps[i])
			}
		}
	}
}

func TestParseDefaults(t *testing.T) {
	s, err := Parse([]byte("from: base@7\nstart:\n  command: ./serve\nsteps:\n  - copy: {src: ., dest: /srv, mode: 755}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Start.ReadyTimeout != DefaultReadyTimeout {
		t.Errorf("ready timeout %v, want the default %v", s.Start.ReadyTimeout, DefaultReadyTimeout)
	}
	if s.Network != nil || s.Limits != (Limits{}) {
		t.Errorf("network %v, limits %+v: want the server's defaults", s.Network, s.Limits)
	}
	if m := s.Steps[0].Mode; m == nil || *m != 0o755 {
		t.Errorf("an unquoted mode 755 is %v, want 0755", m)
	}
	if name, v, _ := ParseRef(s.From); name != "base" || v != 7 {
		t.Errorf("ParseRef(%q) = %q, %d", s.From, name, v)
	}
}

func TestParseErrors(t *testing.T) {
	const (
		debianWant = "want a Debian package name (2 to 128 characters of a-z 0-9 + . -, starting with a-z or 0-9), optionally with =VERSION"
		pipWant    = "want a package name with optional extras and versions, made of letters, digits and . _ - [ ] < > = ! ~ , only, starting with a letter or digit (no spaces, URLs, paths or options)"
	)
	step := func(body string) string { return "from: x\nsteps:\n  - " + body + "\n" }
	for _, tt := range []struct {
		name, yaml, want string
	}{
		// from
		{"no from", "steps: []\n", "from: required: the template to build from, NAME or NAME@VERSION, or a Debian suite, debian:SUITE"},
		{"from upper case", "from: Default\n", `line 1: from: "Default" is not a warren template: a name is 1 to 63 characters of a-z 0-9 . _ -, starting with a-z or 0-9, optionally followed by @VERSION`},
		{"from version 0", "from: default@0\n", `line 1: from: "default@0": the version after @ must be a positive integer`},
		{"from version word", "from: default@latest\n", `line 1: from: "default@latest": the version after @ must be a positive integer`},
		{"from too long", "from: " + strings.Repeat("a", 64) + "\n", `line 1: from: "` + strings.Repeat("a", 64) + `" is not a warren template: a name is 1 to 63 characters of a-z 0-9 . _ -, starting with a-z or 0-9, optionally followed by @VERSION`},
		// network, env
		{"network entry", "from: x\nnetwork:\n  allow: [\"no such name!\"]\n", `line 2: network: allow: "no such name!" is neither an IPv4 address, a CIDR nor a domain name: `},
		{"env key", "from: x\nenv: {1A: b}\n", `line 2: env: variable name "1A": want letters, digits and _, not starting with a digit`},
		{"env NUL", "from: x\nenv: {A: \"a\\0b\"}\n", "line 2: env: the value of A contains a NUL byte"},
		// the shape of a step
		{"two keys", "from: x\nsteps:\n  - apt: [curl]\n    pip: [numpy]\n", "line 3: step 1: has 2 keys (apt, pip): a step is exactly one of apt, pip, copy, run, env, workdir, user; make each a step of its own"},
		{"no key", step("{}"), "line 3: step 1: a step is a mapping of one key, one of apt, pip, copy, run, env, workdir, user"},
		{"no value", step("run:"), "line 3: step 1 (run): has no value"},
		{"unknown step", step("install: [x]"), `line 3: step 1: unknown step "install": a step is one of apt, pip, copy, run, env, workdir, user`},
		{"step a string", step("apt"), `line 3: step 1: want a step: a mapping of one key, one of apt, pip, copy, run, env, workdir, user, not the string "apt"`},
		{"steps a mapping", "from: x\nsteps: {apt: [x]}\n", "line 2: steps: want a list of steps, not a mapping"},
		{"too many steps", "from: x\nsteps:\n" + strings.Repeat("  - run: x\n", MaxSteps+1), "line 2: steps: 257 steps, at most 256"},
		// apt
		{"apt scalar", step("apt: curl"), `line 3: step 1 (apt): want a list of strings, not the string "curl"`},
		{"apt empty", step("apt: []"), "line 3: step 1 (apt): lists no package"},
		{"apt upper case", step("apt: [Python3]"), `line 3: step 1 (apt): package "Python3": ` + debianWant},
		{"apt one letter", step("apt: [a]"), `line 3: step 1 (apt): package "a": ` + debianWant},
		{"apt option", step("apt: [-y]"), `line 3: step 1 (apt): package "-y": ` + debianWant},
		{"apt bad version", step("apt: [\"curl=1;rm -rf /\"]"), `line 3: step 1 (apt): package "curl=1;rm -rf /": ` + debianWant},
		{"apt too many", step("apt: [" + strings.Repeat("ab,", MaxPackages) + "ab]"), "line 3: step 1 (apt): 1025 packages, at most 1024"},
		// pip
		{"pip option", step("pip: [-e, .]"), `line 3: step 1 (pip): package "-e": ` + pipWant},
		{"pip space", step("pip: [\"numpy >=2\"]"), `line 3: step 1 (pip): package "numpy >=2": ` + pipWant},
		{"pip url", step("pip: [\"git+https://example.com/x\"]"), `line 3: step 1 (pip): package "git+https://example.com/x": ` + pipWant},
		{"pip path", step("pip: [./app]"), `line 3: step 1 (pip): package "./app": ` + pipWant},
		{"pip marker", step("pip: [\"x;python_version<'3'\"]"), `line 3: step 1 (pip): package "x;python_version<'3'": ` + pipWant},
		{"pip index scheme", step("pip: {packages: [x], index_url: \"ftp://example.com/\"}"), `line 3: step 1 (pip): index_url "ftp://example.com/": want an http:// or https:// URL`},
		{"pip extra index", step("pip: {packages: [x], extra_index_url: \"--trusted-host x\"}"), `line 3: step 1 (pip): extra_index_url "--trusted-host x": want an http:// or https:// URL`},
		{"pip unknown key", step("pip: {packages: [x], index: y}"), `line 3: step 1 (pip): unknown key "index" (known: packages, index_url, extra_index_url)`},
		{"pip scalar", step("pip: numpy"), "line 3: step 1 (pip): want a list of packages or a mapping of packages, index_url, extra_index_url"},
		// copy
		{"copy no src", step("copy: {dest: /x}"), "line 3: step 1 (copy): no src: the path to copy, relative to the build context"},
		{"copy absolute src", step("copy: {src: /etc/passwd, dest: /x}"), `line 3: step 1 (copy): src "/etc/passwd": must be relative to the build context`},
		{"copy escape", step("copy: {src: ../secret, dest: /x}"), `line 3: step 1 (copy): src "../secret" is outside the build context`},
		{"copy escape inside", step("copy: {src: a/../../secret, dest: /x}"), `line 3: step 1 (copy): src "../secret" is outside the build context`},
		{"copy no dest", step("copy: {src: a}"), "line 3: step 1 (copy): no dest: the absolute path to copy to"},
		{"copy relative dest", step("copy: {src: a, dest: opt/a}"), `line 3: step 1 (copy): dest "opt/a": must be an absolute path`},
		{"copy mode", step("copy: {src: a, dest: /a, mode: \"10000\"}"), "line 3: step 1 (copy): mode 010000: at most 07777"},
		{"copy mode digits", step("copy: {src: a, dest: /a, mode: \"0999\"}"), `line 3: step 1 (copy): mode "0999": want octal digits, such as "0644"`},
		{"copy owner", step("copy: {src: a, dest: /a, owner: \"a b\"}"), `line 3: step 1 (copy): owner "a b": want USER, UID, USER:GROUP or UID:GID`},
		{"copy unknown key", step("copy: {src: a, dest: /a, chmod: 1}"), `line 3: step 1 (copy): unknown key "chmod" (known: src, dest, mode, owner)`},
		// run
		{"run empty", step(`run: ""`), "line 3: step 1 (run): the command is empty"},
		{"run blank", step(`run: "  "`), "line 3: step 1 (run): the command is empty"},
		{"run empty argv", step("run: []"), "line 3: step 1 (run): the argv is empty"},
		{"run too long", step("run: " + strings.Repeat("x", MaxCommand+1)), "line 3: step 1 (run): the command is 65537 bytes, at most 65536"},
		{"run NUL", step(`run: "a\0b"`), "line 3: step 1 (run): the command contains a NUL byte"},
		{"run mapping", step("run: {sh: x}"), "line 3: step 1 (run): want a shell command (a string) or an argv (a list of strings)"},
		// env, workdir, user
		{"env empty", step("env: {}"), "line 3: step 1 (env): sets no variable"},
		{"env bad key", step("env: {A-B: c}"), `line 3: step 1 (env): variable name "A-B": want letters, digits and _, not starting with a digit`},
		{"workdir relative", step("workdir: app"), `line 3: step 1 (workdir): workdir "app": must be an absolute path`},
		{"user bad", step("user: Admin"), `line 3: step 1 (user): user "Admin": want a user name (a-z 0-9 _ -, up to 32 characters, not starting with a digit or -) or a numeric uid`},
		{"user uid too big", step("user: 4294967295"), `line 3: step 1 (user): user "4294967295": want a user name (a-z 0-9 _ -, up to 32 characters, not starting with a digit or -) or a numeric uid`},
		// start, limits
		{"start no command", "from: x\nstart: {ready: \"true\"}\n", "line 2: start.command: the command is empty"},
		{"start ready 0", "from: x\nstart:\n  command: x\n  ready_timeout_seconds: 0\n", "line 4: start.ready_timeout_seconds: 0: want 1 to 600 seconds"},
		{"start ready 601", "from: x\nstart:\n  command: x\n  ready_timeout_seconds: 601\n", "line 4: start.ready_timeout_seconds: 601: want 1 to 600 seconds"},
		{"start unknown", "from: x\nstart:\n  command: x\n  port: 8000\n", `line 4: unknown key "port" (known: command, ready, ready_timeout_seconds)`},
		{"timeout 0", "from: x\nlimits: {timeout_seconds: 0}\n", "line 2: limits.timeout_seconds: 0: want 1 to 7200 seconds"},
		// Issue 35, row 11: a build could ask for a day, holding a build
		// place that long.
		{"timeout a day", "from: x\nlimits: {timeout_seconds: 86400}\n", "line 2: limits.timeout_seconds: 86400: want 1 to 7200 seconds"},
		{"disk 0", "from: x\nlimits: {disk_mb: 0}\n", "line 2: limits.disk_mb: 0: want 64 to 262144"},
		{"disk 63", "from: x\nlimits:\n  disk_mb: 63\n", "line 3: limits.disk_mb: 63: want 64 to 262144"},
		{"disk 262145", "from: x\nlimits: {disk_mb: 262145}\n", "line 2: limits.disk_mb: 262145: want 64 to 262144"},
		{"disk a word", "from: x\nlimits: {disk_mb: lots}\n", `line 2: limits.disk_mb: want a whole number, not the string "lots"`},
		// the file
		{"unknown key", "from: x\nstpes: []\n", `line 2: unknown key "stpes" (known: from, network, env, steps, start, limits)`},
		{"repeated key", "from: x\nfrom: y\n", `line 2: key "from" is repeated (first at line 1)`},
		{"not a mapping", "- from: x\n", "line 1: want a mapping of from, network, env, steps, start, limits, not a list"},
		{"syntax", "from: [x\n", "line 1: did not find expected ',' or ']'"},
		{"two documents", "from: x\n---\nfrom: y\n", "more than one YAML document: a spec is one"},
		{"empty", "", "the file is empty: it needs at least from"},
		{"too big", "from: x\n#" + strings.Repeat("x", MaxFileSize), "the file is 1048585 bytes, at most 1048576"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted: %+v", s)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not an *Error", err)
			}
			if got := err.Error(); got != tt.want && !(strings.HasSuffix(tt.want, ": ") && strings.HasPrefix(got, tt.want)) {
				t.Errorf("error\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

// TestValidate covers what only a Spec made in code can get wrong: Parse
// cleans paths and never sets a field of another kind.
func TestValidate(t *testing.T) {
	mode := uint32(0o644)
	for _, tt := range []struct {
		name string
		st   Step
		want string
	}{
		{"unknown kind", Step{Kind: "docker"}, `step 1 (docker): unknown kind "docker": a step is one of apt, pip, copy, run, env, workdir, user`},
		{"no kind", Step{Line: 4}, `line 4: step 1: unknown kind "": a step is one of apt, pip, copy, run, env, workdir, user`},
		{"stray shell", Step{Kind: KindApt, Packages: []string{"curl"}, Shell: "x"}, "step 1 (apt): an apt step takes no a shell command"},
		{"stray mode", Step{Kind: KindRun, Shell: "x", Mode: &mode}, "step 1 (run): a run step takes no mode"},
		{"stray packages", Step{Kind: KindEnv, Env: map[string]string{"A": "b"}, Packages: []string{}}, "step 1 (env): an env step takes no packages"},
		{"stray index", Step{Kind: KindApt, Packages: []string{"curl"}, IndexURL: "https://x/"}, "step 1 (apt): an apt step takes no index_url"},
		{"unclean src", Step{Kind: KindCopy, Src: "app/", Dest: "/a"}, `step 1 (copy): src "app/" is not clean: write "app"`},
		{"unclean dest", Step{Kind: KindCopy, Src: "app", Dest: "/a/../b//"}, `step 1 (copy): dest "/a/../b//" is not clean: write "/b/"`},
		{"unclean workdir", Step{Kind: KindWorkdir, Dir: "/a/"}, `step 1 (workdir): workdir "/a/" is not clean: write "/a"`},
		{"shell and argv", Step{Kind: KindRun, Shell: "x", Argv: []string{"y"}}, "step 1 (run): has both a shell command and an argv"},
		{"argv NUL", Step{Kind: KindRun, Argv: []string{"a\x00"}}, "step 1 (run): the argv contains a NUL byte"},
		{"argv too long", Step{Kind: KindRun, Argv: []string{strings.Repeat("x", MaxCommand)}}, "step 1 (run): the argv is 65537 bytes, at most 65536"},
		{"argv empty name", Step{Kind: KindRun, Argv: []string{""}}, "step 1 (run): the argv is empty"},
		{"src NUL", Step{Kind: KindCopy, Src: "a\x00", Dest: "/a"}, "step 1 (copy): src contains a NUL byte"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Spec{From: "default", Steps: []Step{tt.st}}
			if err := s.Validate(); err == nil || err.Error() != tt.want {
				t.Errorf("error\n %v\nwant\n %s", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"ready timeout unset", Spec{From: "x", Start: &Start{Command: "x"}}, "start.ready_timeout_seconds: 0s: want 1 to 600 seconds"},
		{"ready too long", Spec{From: "x", Start: &Start{Command: "x", Ready: strings.Repeat("x", MaxCommand+1), ReadyTimeout: time.Second}}, "start.ready: the check is 65537 bytes, at most 65536"},
		{"negative timeout", Spec{From: "x", Limits: Limits{Timeout: -time.Second}}, "limits.timeout_seconds: -1s: want 1 to 7200 seconds"},
		{"negative disk", Spec{From: "x", Limits: Limits{DiskMB: -1}}, "limits.disk_mb: -1: want 64 to 262144"},
		{"network deny", Spec{From: "x", Network: &api.NetworkPolicy{Deny: []string{"10.0.0.0/33"}}}, `network: deny: "10.0.0.0/33": netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.spec.Validate(); err == nil || err.Error() != tt.want {
				t.Errorf("error\n %v\nwant\n %s", err, tt.want)
			}
		})
	}
	ok := &Spec{From: "x", Steps: []Step{
		{Kind: KindApt, Packages: []string{"python3=3.11.2-1+b1", "libc6=1:2.36-9", "g++"}},
		{Kind: KindPip, Packages: []string{"numpy==2.1.0", "pandas[excel]>=2,<3", "requests~=2.32", "a!=1"}},
		{Kind: KindCopy, Src: ".", Dest: "/", Owner: "1000:1000"},
		{Kind: KindCopy, Src: "a/b", Dest: "/opt/", Owner: "user:staff"},
		{Kind: KindUser, User: "0"},
		{Kind: KindUser, User: "_apt"},
		{Kind: KindRun, Argv: []string{"true"}},
	}, Start: &Start{Command: "x", ReadyTimeout: MaxReadyTimeout}, Limits: Limits{Timeout: MaxTimeout, DiskMB: MinDiskMB}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid spec: %v", err)
	}
}

func TestStates(t *testing.T) {
	s := &Spec{From: "x", Env: map[string]string{"LANG": "C.UTF-8", "A": "spec"}, Steps: []Step{
		{Kind: KindRun, Shell: "one"},
		{Kind: KindEnv, Env: map[string]string{"A": "step", "B": "b"}},
		{Kind: KindWorkdir, Dir: "/opt"},
		{Kind: KindUser, User: "user"},
		{Kind: KindRun, Shell: "two"},
		{Kind: KindWorkdir, Dir: "/srv"},
	}}
	each, final := s.States()
	base := map[string]string{"LANG": "C.UTF-8", "A": "spec"}
	later := map[string]string{"LANG": "C.UTF-8", "A": "step", "B": "b"}
	want := []State{
		{Env: base},
		{Env: base},
		{Env: later},
		{Env: later, Workdir: "/opt"},
		{Env: later, Workdir: "/opt", User: "user"},
		{Env: later, Workdir: "/opt", User: "user"},
	}
	if !reflect.DeepEqual(each, want) {
		t.Errorf("states\n%+v\nwant\n%+v", each, want)
	}
	if wantFinal := (State{Env: later, Workdir: "/srv", User: "user"}); !reflect.DeepEqual(final, wantFinal) {
		t.Errorf("final %+v, want %+v", final, wantFinal)
	}
	each[0].Env["A"] = "changed"
	if s.Env["A"] != "spec" || each[1].Env["A"] != "spec" {
		t.Error("the states share their maps with the spec or each other")
	}
	if _, final := (&Spec{From: "x"}).States(); final.Env == nil {
		t.Error("no env gives a nil map")
	}
}

func TestCommand(t *testing.T) {
	for _, tt := range []struct {
		st      Step
		want    []string
		layered bool
	}{
		{Step{Kind: KindRun, Shell: "make && make install"}, []string{"/bin/sh", "-c", "make && make install"}, true},
		{Step{Kind: KindRun, Argv: []string{"make", "install"}}, []string{"make", "install"}, true},
		{Step{Kind: KindPip, Packages: []string{"numpy==2.1.0", "pandas"}},
			[]string{"python3", "-m", "pip", "install", "--no-cache-dir", "--break-system-packages", "--", "numpy==2.1.0", "pandas"}, true},
		{Step{Kind: KindPip, Packages: []string{"torch"}, IndexURL: "https://i/", ExtraIndexURL: "https://e/"},
			[]string{"python3", "-m", "pip", "install", "--no-cache-dir", "--break-system-packages", "--index-url", "https://i/", "--extra-index-url", "https://e/", "--", "torch"}, true},
		{Step{Kind: KindApt, Packages: []string{"curl"}}, nil, true},
		{Step{Kind: KindCopy, Src: "a", Dest: "/a"}, nil, true},
		{Step{Kind: KindEnv, Env: map[string]string{"A": "b"}}, nil, false},
		{Step{Kind: KindWorkdir, Dir: "/a"}, nil, false},
		{Step{Kind: KindUser, User: "user"}, nil, false},
	} {
		if got := tt.st.Command(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s Command() = %q, want %q", tt.st.Kind, got, tt.want)
		}
		if got := tt.st.Layered(); got != tt.layered {
			t.Errorf("%s Layered() = %v, want %v", tt.st.Kind, got, tt.layered)
		}
	}
	argv := []string{"a", "b"}
	(Step{Kind: KindRun, Argv: argv}).Command()[0] = "changed"
	if argv[0] != "a" {
		t.Error("Command returns the step's own argv")
	}
}

func TestLoad(t *testing.T) {
	for name, docker := range map[string]bool{
		"Dockerfile": true, "dir/Dockerfile": true, "dockerfile": true, "app.Dockerfile": true, "Dockerfile.dev": true,
		"warren.yaml": false, "build.yml": false, "Dockerfile-notes.yaml": false,
	} {
		if got := IsDockerfile(name); got != docker {
			t.Errorf("IsDockerfile(%q) = %v, want %v", name, got, docker)
		}
	}
	if s, err := Load([]byte("FROM default\nRUN true\n"), "ctx/Dockerfile"); err != nil || s.Steps[0].Shell != "true" {
		t.Errorf("a Dockerfile: %+v, %v", s, err)
	}
	if s, err := Load([]byte("from: default\nsteps: [{run: \"true\"}]\n"), "warren.yaml"); err != nil || s.Steps[0].Shell != "true" {
		t.Errorf("a warren.yaml: %+v, %v", s, err)
	}
	_, err := Load([]byte("from: Bad\n"), "warren.yaml")
	var e *Error
	if err == nil || !strings.HasPrefix(err.Error(), "warren.yaml: line 1: from: ") || !errors.As(err, &e) || e.Line != 1 {
		t.Errorf("error %v: want one naming the file and the line, wrapping an *Error", err)
	}
}
